#!/usr/bin/env bash
# Sets up everything from the pinned files, then synthesizes the app with its defaults.
#   ./scripts/setup.sh
# Python: .venv from requirements-dev.txt, constrained by requirements-lock.txt.
# Node: the CDK CLI and Node.js 22 from package-lock.json (`npm ci`), so `npx cdk` and jsii
# run on a supported Node whatever the machine's own Node is.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
  -r requirements-dev.txt -c requirements-lock.txt
npm ci --no-audit --no-fund --loglevel=error

export PATH="$PWD/node_modules/.bin:$PATH"
echo "node $(node --version), cdk $(cdk --version)"
npx cdk synth --quiet
echo "Synthesized to cdk.out/ (rendered Kubernetes YAML in cdk.out/rendered/)."
