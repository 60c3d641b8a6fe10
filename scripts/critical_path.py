#!/usr/bin/env python3
"""The modelled critical path of a from-scratch deploy, from the synthesized templates.

    .venv/bin/python scripts/critical_path.py                  # this checkout
    .venv/bin/python scripts/critical_path.py --before f62c2af # and an earlier commit, compared
    .venv/bin/python scripts/critical_path.py --concurrency 1  # `cdk deploy` without --concurrency

It synthesizes the app with cdk.json's settings (offline, no credentials), schedules every
resource with the duration model of ray_pd_eks/timeline.py (CloudFormation references,
DependsOn and stack dependencies; the image pulls, weight downloads and engine start inside the
cluster) and prints when the readiness check proves the endpoint, with the steps on the
critical path, then the scale-out: a new GPU node's minutes until its engine serves (and
with the weights staged in S3, when they are not, and on a warm spare node when the app has
them; docs/cold-start.md). `--before`
synthesizes another commit in a temporary git worktree (sharing this checkout's .venv and
node_modules) and models it with the same numbers.
docs/deploy-timeline.md explains the model and shows the output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_pd_eks.timeline import (  # noqa: E402
    CONTROL_PLANE_MINUTES_RANGE,
    DURATIONS,
    Deploy,
    report,
    scale_out,
    schedule,
)

# Runs inside the checkout to model (this one or the --before worktree): the Stage as app.py
# builds it, from that checkout's cdk.json, without cdk-nag (not needed for the templates).
SYNTH = """
import json, sys
import aws_cdk as cdk
from ray_pd_eks.config import AppConfig
try:
    from stacks.stage import RayPdEksStage
except ImportError:  # a checkout from before the Stage moved beside its stacks
    from ray_pd_eks.stage import RayPdEksStage
context = json.load(open("cdk.json"))["context"]
app = cdk.App(context=context, outdir=sys.argv[1])
RayPdEksStage(app, "RayPdEks", config=AppConfig.from_context(context))
app.synth()
"""


def synthesize(checkout: Path, outdir: Path) -> Deploy:
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    subprocess.run(
        [sys.executable, "-c", SYNTH, str(outdir)],
        cwd=checkout,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return Deploy.from_assembly(outdir)


def synthesize_commit(ref: str, workdir: Path) -> Deploy:
    tree = workdir / "before"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(tree), ref], cwd=ROOT, check=True
    )
    try:
        for shared in (".venv", "node_modules"):
            (tree / shared).symlink_to(ROOT / shared)
        return synthesize(tree, workdir / "before.out")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="GIT_REF", help="also model this commit, compared")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="stacks deployed at once, as `cdk deploy --concurrency` (default 4; 1 = one by one)",
    )
    parser.add_argument(
        "--control-plane-minutes",
        type=float,
        default=None,
        metavar="MIN",
        help="minutes the EKS control plane takes to create (default: the model's "
        f"{DURATIONS['AWS::EKS::Cluster']:g}; published averages reach "
        f"{CONTROL_PLANE_MINUTES_RANGE[1]:g})",
    )
    args = parser.parse_args()
    if args.control_plane_minutes is not None and args.control_plane_minutes <= 0:
        parser.error(f"--control-plane-minutes {args.control_plane_minutes:g}: must be above 0")
    with tempfile.TemporaryDirectory(prefix="critical-path-") as tmp:
        work = Path(tmp)
        deploy = synthesize(ROOT, work / "after.out")
        after = schedule(
            deploy, concurrency=args.concurrency, control_plane_minutes=args.control_plane_minutes
        )
        lines = report(after, title=f"this checkout, --concurrency {args.concurrency}")
        if args.control_plane_minutes is None:
            low, high = (
                schedule(deploy, concurrency=args.concurrency, control_plane_minutes=m)
                for m in CONTROL_PLANE_MINUTES_RANGE
            )
            lines += [
                "",
                f"with the control plane at {CONTROL_PLANE_MINUTES_RANGE[0]:g}-"
                f"{CONTROL_PLANE_MINUTES_RANGE[1]:g} min: endpoint proven after "
                f"{low.endpoint_minutes:.1f}-{high.endpoint_minutes:.1f} min",
            ]
        growth = scale_out(deploy)
        lines += ["", f"scale-out: a new GPU node serves after {growth.minutes:.1f} min"]
        lines += [f"  {start:5.1f} - {end:5.1f}  {what}" for what, start, end in growth.steps]
        if growth.spare_minutes is not None:
            lines += [
                f"  on a warm spare (gpuWarmSpareNodes): serves after {growth.spare_minutes:.1f} "
                "min (its image and weights are on the node)"
            ]
            lines += [f"    {s:5.1f} - {e:5.1f}  {what}" for what, s, e in growth.spare_steps]
        staged = scale_out(deploy, weights_in_s3=True)
        if staged.minutes != growth.minutes:
            lines += [f"  with the weights staged in S3 (modelS3Uri): {staged.minutes:.1f} min"]
        if args.before:
            before = schedule(
                synthesize_commit(args.before, work),
                concurrency=args.concurrency,
                control_plane_minutes=args.control_plane_minutes,
            )
            lines = report(before, title=f"{args.before}, --concurrency {args.concurrency}")
            lines += ["", *report(after, title=f"this checkout, --concurrency {args.concurrency}")]
            saved = before.endpoint_minutes - after.endpoint_minutes
            lines += ["", f"endpoint proven {saved:+.1f} min earlier than {args.before}"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
