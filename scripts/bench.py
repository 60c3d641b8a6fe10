#!/usr/bin/env python3
"""Median wall time of a full `cdk synth` and of the test suite over several runs.

    .venv/bin/python scripts/bench.py [--runs 3] [--skip-tests]

Budgets on a 2-core machine: synth <= 10 s, tests <= 60 s. Exits 1 when a median is over
budget, so it can gate a change; it is not part of the test suite (timed tests are flaky).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"cdk synth": 10.0, "test suite": 60.0}


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-tests", action="store_true")
    args = parser.parse_args()
    env = {
        **os.environ,
        "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
    }
    commands = {"cdk synth": ["npx", "cdk", "synth", "--quiet"]}
    if not args.skip_tests:
        commands["test suite"] = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-q"]
    over = False
    for name, cmd in commands.items():
        times = [_timed(cmd, env) for _ in range(args.runs)]
        median = statistics.median(times)
        verdict = "ok" if median <= BUDGETS[name] else "OVER BUDGET"
        over |= median > BUDGETS[name]
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(
            f"{name:11s} median {median:5.1f} s (budget {BUDGETS[name]:.0f} s) [{runs}] {verdict}"
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
