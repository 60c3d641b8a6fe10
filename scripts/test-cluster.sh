#!/usr/bin/env bash
# The integration tier: the app's manifests against the real Kubernetes control plane and the
# real KubeRay operator (docs/testing.md "The cluster tier").
#   ./scripts/test-cluster.sh [pytest args]
# Builds the components on the first run on a machine (Go and the Go module proxy; 35 minutes
# on 2 busy cores, see docs/testing.md "The cold first build"; cached in ~/.cache/ray-pd-eks/),
# starts a private cluster (scripts/local-cluster.sh up, everything on 127.0.0.1), runs
# tests_cluster/ and always stops the cluster again, whatever the tests did (an interrupt
# included). Exit status: pytest's.
# The cluster's logs stay in $RAY_PD_EKS_CLUSTER_DIR (default ~/.cache/ray-pd-eks/cluster-tier)
# when a test fails, for reading; they are removed on success.
set -euo pipefail
cd "$(dirname "$0")/.."
# PYTHONDONTWRITEBYTECODE (set on some machines, this project's CI kind among them) makes
# Python read bytecode but never write it: every process would recompile what it imports
# (aws-cdk-lib's 2.4 MB __init__.py alone, 5-6 s of CPU per synth; pytest's rewritten test
# modules too). Unset here, the runs write the bytecode of what they import, once, into
# .venv and the clone's __pycache__ folders; later runs read it whatever the variable says
# (docs/testing.md, "Speed budgets").
unset PYTHONDONTWRITEBYTECODE
export RAY_PD_EKS_CLUSTER_DIR="${RAY_PD_EKS_CLUSTER_DIR:-$HOME/.cache/ray-pd-eks/cluster-tier}"
export PATH="$PWD/node_modules/.bin:$PATH"

status=1
stop() {
  if [ "$status" -eq 0 ]; then
    ./scripts/local-cluster.sh down
  else
    KEEP_STATE=1 ./scripts/local-cluster.sh down
    echo "test-cluster: the cluster's logs are in $RAY_PD_EKS_CLUSTER_DIR/*.log" >&2
  fi
}
trap stop EXIT
trap 'exit 130' INT TERM

start=$SECONDS
./scripts/local-cluster.sh build
echo "test-cluster: components ready in $((SECONDS - start))s"
./scripts/local-cluster.sh up
status=0
.venv/bin/python -m pytest "$@" tests_cluster || status=$?
echo "test-cluster: $((SECONDS - start))s in all"
exit "$status"
