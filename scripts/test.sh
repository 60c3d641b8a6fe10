#!/usr/bin/env bash
# The one quality gate, the same for developers, CI and the pipeline's synth step:
# formatter, linter, type check, then the test suite (which runs cdk-nag and cfn-lint).
#   ./scripts/test.sh [pytest args]
# mypy runs beside pytest (the first, cold run on a fresh clone takes minutes; a warm one about
# a second); its report follows pytest's, and the exit status is the worse of the two.
set -euo pipefail
cd "$(dirname "$0")/.."
# PYTHONDONTWRITEBYTECODE (set on some machines, this project's CI kind among them) makes
# Python read bytecode but never write it: every process would recompile what it imports
# (aws-cdk-lib's 2.4 MB __init__.py alone, 5-6 s of CPU per synth; pytest's rewritten test
# modules too). Unset here, the runs write the bytecode of what they import, once, into
# .venv and the clone's __pycache__ folders; later runs read it whatever the variable says
# (docs/testing.md, "Speed budgets").
unset PYTHONDONTWRITEBYTECODE
export PATH="$PWD/node_modules/.bin:$PATH"

.venv/bin/ruff format --check .
.venv/bin/ruff check .

mypy_log=$(mktemp)
.venv/bin/mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
# An interrupted run (Ctrl-C, a CI timeout) stops mypy too; background jobs ignore SIGINT.
trap 'kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
trap 'exit 130' INT TERM

pytest_status=0
.venv/bin/python -m pytest "$@" || pytest_status=$?
# pytest's 2 is an interrupted run (Ctrl-C): stop there rather than wait for a cold mypy.
[ "$pytest_status" -ne 2 ] || exit 2
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
echo "mypy:"
cat "$mypy_log"
exit $((pytest_status > mypy_status ? pytest_status : mypy_status))
