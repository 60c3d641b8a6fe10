#!/usr/bin/env python3
"""Vendor a Helm chart from its source repository into ``assets/charts/<name>-<version>/``.

The chart is taken from a git checkout (or bare mirror) of the project that publishes it, at the
commit of its release, with ``git archive`` (exactly the files git has there), and the tree's
SHA-256 is printed for ``ray_pd_eks/charts.py`` (``VENDORED_CHARTS``), which the tests pin:

    scripts/vendor_chart.py --git-dir ../kuberay/.git --ref v1.7.0 \\
        --path helm-chart/kuberay-operator --name kuberay-operator --version 1.7.0

The deploy then installs the chart from this folder (a CDK asset), never from a chart
repository: what runs is what was reviewed here.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_pd_eks.charts import CHARTS_DIR, chart_tree_sha256  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", required=True, help="the source repository's git directory")
    parser.add_argument("--ref", required=True, help="the release's tag or commit")
    parser.add_argument("--path", required=True, help="the chart's folder in that repository")
    parser.add_argument("--name", required=True, help="the chart's name (Chart.yaml name)")
    parser.add_argument("--version", required=True, help="the chart's version (Chart.yaml)")
    args = parser.parse_args()
    commit = subprocess.check_output(
        ["git", "--git-dir", args.git_dir, "rev-parse", f"{args.ref}^{{commit}}"], text=True
    ).strip()
    archive = subprocess.check_output(
        ["git", "--git-dir", args.git_dir, "archive", "--format=tar", commit, args.path]
    )
    target = CHARTS_DIR / f"{args.name}-{args.version}"
    shutil.rmtree(target, ignore_errors=True)
    prefix = args.path.rstrip("/") + "/"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            out = target / member.name[len(prefix) :]
            out.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member)
            assert data is not None
            out.write_bytes(data.read())
    print(f"{target.relative_to(ROOT)}: commit {commit}")
    print(f"sha256 {chart_tree_sha256(target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
