#!/usr/bin/env python3
"""Time the project's three speed budgets: `cdk synth`, the test command, a fresh clone's set-up.

    .venv/bin/python scripts/bench.py [--runs 3] [--skip-tests] [--fresh-clone [--rev REV]]

- cdk synth: `npx cdk synth --quiet`, median of --runs.
- test command: `./scripts/test.sh` (ruff, ruff format, mypy beside pytest), warm: when the
  worktree has no mypy cache yet, one untimed run comes first. Median of --runs.
- fresh clone (--fresh-clone, one run, minutes): this repository cloned into a temporary folder
  at --rev (default HEAD: committed files only), then `./scripts/setup.sh` and
  `./scripts/test.sh` in it, as `.ci/run` does (pip and npm use their usual caches).

Budgets on a 2-core machine: synth <= 10 s, test command <= 60 s warm, fresh clone <= 6 min.
Each line gives the wall time and the CPU time (user + sys of every process the command ran):
where other work shares the machine, wall time is noisy and CPU time is the fairer comparison.
Exits 1 when a median is over budget, so it can gate a change; it is not part of the test suite
(timed tests are flaky).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"cdk synth": 10.0, "test command": 60.0, "fresh clone": 360.0}


def _env(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{root / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
    }


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run; exits with the command's output when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=_env(cwd), capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(
            f"bench: {' '.join(cmd)} failed (exit {done.returncode}) in {cwd}:\n"
            + (done.stdout + done.stderr)[-4000:]
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _report(name: str, times: list[tuple[float, float]]) -> bool:
    """Print one budget's line; True when its median wall time is over budget."""
    wall = statistics.median(t[0] for t in times)
    cpu = statistics.median(t[1] for t in times)
    over = wall > BUDGETS[name]
    runs = ", ".join(f"{w:.1f}/{c:.1f}" for w, c in times)
    print(
        f"{name:12s} median {wall:6.1f} s wall, {cpu:6.1f} s CPU "
        f"(budget {BUDGETS[name]:.0f} s) [wall/CPU: {runs}] {'OVER BUDGET' if over else 'ok'}",
        flush=True,
    )
    return over


def _fresh_clone(rev: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """Set-up and tests in a clone at ``rev``: wall and CPU seconds of each."""
    with tempfile.TemporaryDirectory(prefix="ray-pd-eks-bench-") as tmp:
        clone = Path(tmp) / "ray-pd-eks"
        subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True
        )
        subprocess.run(["git", "checkout", "--quiet", rev], cwd=clone, check=True)
        setup = _timed(["./scripts/setup.sh"], clone)
        tests = _timed(["./scripts/test.sh"], clone)
    return setup, tests


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-tests", action="store_true", help="time cdk synth only")
    parser.add_argument(
        "--fresh-clone", action="store_true", help="also time set-up + tests in a fresh clone"
    )
    parser.add_argument(
        "--rev", default="HEAD", help="the commit the fresh clone checks out (to compare)"
    )
    args = parser.parse_args()
    over = _report(
        "cdk synth",
        [_timed(["npx", "cdk", "synth", "--quiet"], ROOT) for _ in range(args.runs)],
    )
    if not args.skip_tests:
        test_command = ["./scripts/test.sh", "-q"]
        if not (ROOT / ".mypy_cache").is_dir():
            _timed(test_command, ROOT)  # warm the mypy cache: the budget is for a warm run
        over |= _report("test command", [_timed(test_command, ROOT) for _ in range(args.runs)])
    if args.fresh_clone:
        setup, tests = _fresh_clone(args.rev)
        over |= _report("fresh clone", [(setup[0] + tests[0], setup[1] + tests[1])])
        print(
            f"{'':12s} of which set-up {setup[0]:.1f} s wall, {setup[1]:.1f} s CPU; "
            f"tests {tests[0]:.1f} s wall, {tests[1]:.1f} s CPU"
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
