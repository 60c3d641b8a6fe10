#!/usr/bin/env bash
# Sets up everything from the pinned files, then synthesizes the app with its defaults.
#   ./scripts/setup.sh
# Python: .venv from requirements-lock.txt (every package pinned with its hashes, pip too;
# requirements-dev.txt names the direct ones).
# Node: the CDK CLI and Node.js 22 from package-lock.json (`npm ci`), so `npx cdk` and jsii
# run on a supported Node whatever the machine's own Node is.
set -euo pipefail
cd "$(dirname "$0")/.."
# PYTHONDONTWRITEBYTECODE (set on some machines, this project's CI kind among them) makes
# Python read bytecode but never write it: every process would recompile what it imports
# (aws-cdk-lib's 2.4 MB __init__.py alone, 5-6 s of CPU per synth; pytest's rewritten test
# modules too). Unset here, the runs write the bytecode of what they import, once, into
# .venv and the clone's __pycache__ folders; later runs read it whatever the variable says
# (docs/testing.md, "Speed budgets").
unset PYTHONDONTWRITEBYTECODE

# Check the prerequisites first, so an unsupported Python fails here with what to install
# rather than later with a dependency-resolution error. PYTHON picks another interpreter.
PYTHON="${PYTHON:-python3}"
MIN_PYTHON="3.11"
MAX_PYTHON="3.12"
install_hint="install Python ${MIN_PYTHON} or ${MAX_PYTHON} (python.org, 'apt install python3.12 python3.12-venv', 'brew install python@3.12'), then run again, e.g. PYTHON=python3.12 ./scripts/setup.sh"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup: '$PYTHON' not found: $install_hint" >&2
  exit 1
fi
# 3.13 and newer: the lock has no hashes for what some pins pull in there (libcst needs
# pyyaml-ft on 3.13), so pip would stop with a hash error; refused here with the fix instead.
version_check=0
"$PYTHON" -c 'import sys; v = sys.version_info[:2]; sys.exit(1 if v < (3, 11) else 2 if v > (3, 12) else 0)' 2>/dev/null || version_check=$?
if [ "$version_check" -eq 1 ]; then
  echo "setup: $("$PYTHON" --version 2>&1) is too old: this project needs Python ${MIN_PYTHON} or newer; $install_hint" >&2
  exit 1
elif [ "$version_check" -ne 0 ]; then
  echo "setup: $("$PYTHON" --version 2>&1) is not supported yet: the pinned dependencies (requirements-lock.txt) install on Python ${MIN_PYTHON} and ${MAX_PYTHON}; $install_hint" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "setup: $("$PYTHON" --version 2>&1) has no venv/ensurepip module: on Debian or Ubuntu 'apt install python3-venv' (or python3.X-venv for your version), then run again" >&2
  exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm not found: install Node.js with npm (nodejs.org or your package manager; any version that runs 'npm ci'), then run again" >&2
  exit 1
fi

# A .venv made by another Python (an earlier run with another PYTHON, a failed one included)
# would mix two interpreters' packages: it is made anew. A linked .venv (a git worktree sharing
# its main checkout's) is left alone.
venv_args=()
want=$("$PYTHON" --version 2>&1)
want=${want#Python }
have=""
if [ -f .venv/pyvenv.cfg ]; then
  while IFS= read -r line; do
    case "$line" in "version = "*) have=${line#version = } ;; esac
  done <.venv/pyvenv.cfg
fi
if [ -n "$have" ] && [ "${have%.*}" != "${want%.*}" ]; then
  if [ -L .venv ]; then
    echo "setup: .venv links to a Python $have environment; not recreated for Python $want" >&2
  else
    echo "setup: .venv was made with Python $have; making it anew with Python $want" >&2
    venv_args=(--clear)
  fi
fi
"$PYTHON" -m venv ${venv_args[@]+"${venv_args[@]}"} .venv
# --no-compile: Python compiles a module when it is first imported. Compiling every installed
# file up front (340 MB of bytecode, mostly aws-cdk-lib modules the app never imports) cost
# about 35 s of CPU, over half of the install; the app and the tests import a few per cent.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile \
  --require-hashes -r requirements-lock.txt
# The `ray-pd-eks` console script (ray_pd_eks/console.py): .venv/bin/ray-pd-eks, runnable
# from any folder; `python -m ray_pd_eks` is the same tool.
.venv/bin/python -m ray_pd_eks.console install
npm ci --no-audit --no-fund --loglevel=error

export PATH="$PWD/node_modules/.bin:$PATH"
echo "node $(node --version), cdk $(cdk --version)"
# The app is one Stage: select its stacks, or the CLI selects none and prints no warning.
# Shown: the app's warnings (the defaults' is that the deploy will be refused until you add an
# admin); left out: the CLI's hint to name one stack and the trace lines of each warning.
synth_log=$(mktemp)
if ! npx cdk synth --quiet 'RayPdEks/*' >"$synth_log" 2>&1; then
  cat "$synth_log" >&2
  rm -f "$synth_log"
  exit 1
fi
grep -Ev '^Supply a stack id|^/.*\.js:[0-9]+:[0-9]+$' "$synth_log" || true
rm -f "$synth_log"
echo "Synthesized to cdk.out/ (rendered Kubernetes YAML in cdk.out/rendered/)."
echo "Run the operations CLI as .venv/bin/ray-pd-eks (or put .venv/bin on your PATH)."
