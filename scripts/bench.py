#!/usr/bin/env python3
"""Time the project's three speed budgets: `cdk synth`, the test command, a fresh clone's set-up.

    .venv/bin/python scripts/bench.py [--runs 3] [--skip-tests] [--fresh-clone [--rev REV]]

- cdk synth: `npx cdk synth --quiet`, median of --runs.
- test command: `./scripts/test.sh` (ruff, ruff format, mypy beside pytest), warm: when the
  worktree has no mypy cache or no cfn-lint cache yet, one untimed run comes first. Median of
  --runs.
- fresh clone (--fresh-clone, one run, minutes): this repository cloned into a temporary folder
  at --rev (default HEAD: committed files only), then `./scripts/setup.sh` and
  `./scripts/test.sh` in it, as `.ci/run` does (pip and npm use their usual caches).

- cluster tier (--cluster-tier [--cold], one run): `./scripts/test-cluster.sh` with the built
  components cached; --cold first moves ~/.cache/ray-pd-eks/ and Go's build cache aside (put
  back afterwards), so the run builds everything as on a fresh machine.

Budgets on a 2-core machine: synth <= 10 s, test command <= 60 s warm, fresh clone <= 6 min,
cluster tier <= 3 min warm and <= 25 min cold.
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
BUDGETS = {
    "cdk synth": 10.0,
    "test command": 60.0,
    "fresh clone": 360.0,
    # The cluster tier (scripts/test-cluster.sh): cached components, and a machine without
    # them (--cold moves the cache aside for the run, so everything builds).
    "cluster tier": 180.0,
    "cluster cold": 1500.0,
}


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


def _cluster_tier(cold: bool) -> tuple[float, float]:
    """One run of the cluster tier; with ``cold``, without any cached build."""
    cache = Path(os.environ.get("RAY_PD_EKS_CACHE", Path.home() / ".cache" / "ray-pd-eks"))
    gocache = Path(
        subprocess.run(["go", "env", "GOCACHE"], capture_output=True, text=True).stdout.strip()
    )
    moved = []
    if cold:
        for path in (cache, gocache):
            if path.exists():
                aside = path.with_name(path.name + ".bench-aside")
                path.rename(aside)
                moved.append((aside, path))
    try:
        return _timed(["./scripts/test-cluster.sh", "-q"], ROOT)
    finally:
        for aside, path in moved:
            if path.exists():
                subprocess.run(["rm", "-rf", str(path)], check=True)
            aside.rename(path)


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
    parser.add_argument(
        "--cluster-tier", action="store_true", help="time scripts/test-cluster.sh only"
    )
    parser.add_argument("--cold", action="store_true", help="with --cluster-tier: build all")
    args = parser.parse_args()
    if args.cluster_tier:
        name = "cluster cold" if args.cold else "cluster tier"
        return 1 if _report(name, [_cluster_tier(args.cold)]) else 0
    over = _report(
        "cdk synth",
        [_timed(["npx", "cdk", "synth", "--quiet"], ROOT) for _ in range(args.runs)],
    )
    if not args.skip_tests:
        test_command = ["./scripts/test.sh", "-q"]
        caches = (ROOT / ".mypy_cache", ROOT / ".cfn_lint_cache" / "clean.json")
        if not all(c.exists() for c in caches):
            _timed(test_command, ROOT)  # warm mypy's and cfn-lint's: the budget is for a warm run
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
