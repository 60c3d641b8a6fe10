#!/usr/bin/env bash
# The one quality gate, the same for developers, CI and the pipeline's synth step:
# formatter, linter, type check, then the test suite (which runs cdk-nag and cfn-lint).
#   ./scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"

.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
