"""The serving tier on a machine with one NVIDIA GPU: the app's rendered Serve config on CUDA vLLM
0.26, Ray 2.58 and NIXL 1.3.1 over UCX, then ``vllm bench serve`` as the project's ``bench``
runs it, in the PD profile or the aggregated one.

Two steps, because the GPU machine has no CDK (the rendering needs aws-cdk-lib):

    # here: render both profiles of the app, with the bench's context length
    .venv/bin/python -m tests_serving.gpu_run prepare .gpuwh/apps.json
    # on the GPU machine (its own python3 with PyTorch; the serving wheels unpacked in SITE):
    python3 -m tests_serving.gpu_run run --apps .gpuwh/apps.json --site SITE \
        --profile pd --out "$OUT"

``run`` writes ``<profile>-run.json`` (what each check saw and the times) and
``<profile>-bench.json`` (each level's ``vllm bench serve --save-result`` file, by name) under
``--out``; ``ray-pd-eks bench report`` reads the latter once unpacked (``unpack``).

What differs from EKS, and why: docs/testing.md "The serving tier". In short: one GPU holds both
engines (each Ray worker node declares the one GPU, and each engine takes under half of its
memory), NIXL runs over UCX (no EFA), and the model is a Qwen3-8B-shaped config with vLLM's
seeded dummy weights: compute-exact, its answers meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The bench's sweep: long prompts as in RAG and summarisation (docs/benchmarking.md).
BENCH_INPUT_LEN = 4000
BENCH_OUTPUT_LEN = 200
BENCH_LEVELS = (1, 4, 16, 32)
# The context length the profiles are rendered with, so the longest request fits.
BENCH_MAX_MODEL_LEN = 8192
PROFILES = {"pd": {}, "aggregated": {"servingMode": "aggregated"}}


def prepare(out: Path) -> None:
    from tests_serving.rendering import app_for

    apps = {
        name: asdict(app_for({"maxModelLen": BENCH_MAX_MODEL_LEN, **context}))
        for name, context in PROFILES.items()
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(apps, indent=1))
    print(f"rendered {', '.join(apps)} into {out}")


def make_venv(site: Path, venv: Path) -> None:
    """Make the image's Python (its own venv, with PyTorch) see the unpacked serving wheels
    (a ``.pth`` file appended to its site-packages: the image's packages win), and give it the
    ``bin/`` the plane calls (``python``, ``ray``, ``vllm``) under ``venv``. A venv made from
    the image's Python would not see its PyTorch (``--system-site-packages`` means the base
    interpreter's, not the image venv's)."""
    import sysconfig

    Path(sysconfig.get_paths()["purelib"], "serving-wheels.pth").write_text(f"{site}\n")
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    for name, module in (("ray", "ray.scripts.scripts"), ("vllm", "vllm.entrypoints.cli.main")):
        script = venv / "bin" / name
        script.write_text(f"#!{sys.executable}\nfrom {module} import main\nmain()\n")
        script.chmod(0o755)


def bench(
    base: str,
    model: str,
    tokenizer: Path,
    out_dir: Path,
    label: str,
    deadline: float,
    save: Path,
    levels: tuple[int, ...] = BENCH_LEVELS,
) -> dict[str, str]:
    """Every level of the sweep with the project's own ``vllm bench serve`` arguments
    (``ray_pd_eks.bench.job.Sweep.args``); the result files by name, also written to ``save``
    after each level (a call cut off at its limit still brings back the levels it ran)."""
    from ray_pd_eks.bench.job import RESULT_DIR, TOKENIZER_DIR, Sweep, prompts_per_level
    from ray_pd_eks.rehearse.plane import serving_bin

    prompts = prompts_per_level(levels, None)
    sweep = Sweep(
        base_url=base,
        model=model,
        tokenizer=str(tokenizer),
        tokenizer_revision="local",
        concurrency=levels,
        prompts=tuple(max(8, p // 2) for p in prompts),
        input_len=BENCH_INPUT_LEN,
        output_len=BENCH_OUTPUT_LEN,
        seed=0,
        label=label,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for concurrency, count in zip(sweep.concurrency, sweep.prompts, strict=True):
        if time.monotonic() > deadline:
            files[f"skipped-{concurrency}.txt"] = "not run: the call's time budget was used up"
            continue
        args = sweep.args(concurrency, count)
        args = [
            str(tokenizer) if a == TOKENIZER_DIR else str(out_dir) if a == RESULT_DIR else a
            for a in args
        ]
        args[0] = str(serving_bin("vllm"))
        started = time.monotonic()
        result = subprocess.run(args, capture_output=True, text=True, timeout=400, check=False)
        path = out_dir / sweep.result_file(concurrency)
        print(
            f"[bench] {label} concurrency={concurrency} prompts={count}: exit "
            f"{result.returncode} in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        if path.exists():
            files[path.name] = path.read_text()
        else:
            files[f"failed-{concurrency}.txt"] = (result.stdout + result.stderr)[-4000:]
        save.write_text(json.dumps(files, indent=1))
    return files


def _stop_on_term(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}: the call's time limit")


def run(args: argparse.Namespace) -> int:
    # ``timeout`` ends the run with SIGTERM: the report, the logs and the plane's stop still run.
    signal.signal(signal.SIGTERM, _stop_on_term)
    os.environ["RAY_PD_EKS_SERVING_VENV"] = str(args.venv)
    make_venv(args.site, args.venv)
    from ray_pd_eks.rehearse import plane as plane_module
    from ray_pd_eks.rehearse.checks import rehearse_checks

    plane_module.SERVING_VENV = args.venv
    apps = json.loads(args.apps.read_text())
    app = plane_module.RenderedApp(**apps[args.profile])
    workdir = Path(f"/tmp/rpe-gpu-{args.profile}")
    # vLLM 0.26's GPU sampler imports FlashInfer unless told not to use it; the prepared set
    # leaves FlashInfer out (its kernels compile at first use), so the sampler is PyTorch's.
    plane = plane_module.ServingPlane(
        app,
        workdir,
        device="cuda",
        model_shape=args.shape,
        extra_env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
    )
    report: dict[str, Any] = {"profile": args.profile, "shape": args.shape, "checks": {}}
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    checks = report["checks"]
    started = time.monotonic()
    try:
        plane.start()
        report["ray_started_s"] = round(time.monotonic() - started, 1)
        serve = plane_module.adapt_serve_config(
            app.serve_config, model_dir=plane.model_dir, device="cuda", engines_per_gpu=2
        )
        report["serve_config"] = serve
        plane.deploy(serve)
        plane.wait_running(args.deploy_timeout)
        report["running_after_s"] = round(time.monotonic() - started, 1)
        base = f"http://127.0.0.1:{plane_module.SERVE_PORT}"
        # The rehearsal's checks (ray_pd_eks/rehearse/checks.py): the KV proof reads decode's
        # counters until the probe's transfer shows (Ray exports metrics every few seconds).
        checks["findings"] = [f.line() for f in rehearse_checks(plane)]
        print(*checks["findings"], sep="\n", flush=True)
        report["bench_started_s"] = round(time.monotonic() - started, 1)
        bench(
            base,
            app.model_id,
            plane.model_dir,
            workdir / "bench",
            args.label,
            started + args.budget_s,
            out / f"{args.profile}-bench.json",
            tuple(int(level) for level in args.levels.split(",")),
        )
        report["bench_done_s"] = round(time.monotonic() - started, 1)
        return 0
    except (Exception, SystemExit) as exc:  # the report says what failed; logs come beside it
        report["error"] = f"{type(exc).__name__}: {exc}"
        print(report["error"], flush=True)
        return 1
    finally:
        (out / f"{args.profile}-run.json").write_text(json.dumps(report, indent=1, default=str))
        logs_dir = plane.logs_dir()
        tails = []
        for path in sorted(logs_dir.glob("serve/*.log")) + sorted(logs_dir.glob("worker-*.err")):
            text = path.read_text("utf-8", "replace").splitlines()
            tails.append(f"==> {path.name}\n" + "\n".join(text[-60:]))
        (out / f"{args.profile}-logs.txt").write_text("\n".join(tails)[-4_000_000:])
        plane.stop()


def unpack(bench_json: Path, out_dir: Path, run_json: Path | None, gpu: str) -> None:
    """A ``<profile>-bench.json`` back into a run folder that ``bench report`` reads, with a
    ``bench-meta.json`` from the run's report (``<profile>-run.json``) when given."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in json.loads(bench_json.read_text()).items():
        (out_dir / name).write_text(text)
    if run_json is None:
        return
    report = json.loads(run_json.read_text())
    serve = report["serve_config"]["applications"][0]["args"]
    pd = "prefill_config" in serve
    engine = serve["decode_config"] if pd else serve["llm_configs"][0]
    replicas = lambda c: c.get("deployment_config", {}).get("num_replicas")  # noqa: E731
    meta = {
        "servingMode": "pd" if pd else "aggregated",
        "kvBackend": "UCX" if pd else None,
        "modelId": engine["model_loading_config"]["model_id"],
        "modelSource": f"dummy {report['shape']} shape (seeded random weights)",
        "gpuNodeCount": 1,
        "gpuNodeType": f"one {gpu}, both worker nodes on it",
        "gpuModel": gpu,
        "inputLen": BENCH_INPUT_LEN,
        "outputLen": BENCH_OUTPUT_LEN,
        "seed": 0,
        "enforceEager": engine["engine_kwargs"].get("enforce_eager"),
        "prefillReplicas": replicas(serve["prefill_config"]) if pd else None,
        "decodeReplicas": replicas(engine) if pd else None,
        "engines": None if pd else replicas(engine),
    }
    (out_dir / "bench-meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("--apps", type=Path, required=True)
    r.add_argument("--site", type=Path, required=True)
    r.add_argument("--venv", type=Path, default=Path("/tmp/serving-venv"))
    r.add_argument("--profile", choices=sorted(PROFILES), required=True)
    r.add_argument("--shape", default="qwen3-8b")
    r.add_argument("--label", default="")
    r.add_argument("--levels", default=",".join(map(str, BENCH_LEVELS)), help="concurrencies")
    r.add_argument("--deploy-timeout", type=float, default=420)
    r.add_argument("--budget-s", type=float, default=430, help="start no bench level after")
    r.add_argument("--out", type=Path, required=True)
    u = sub.add_parser("unpack")
    u.add_argument("bench_json", type=Path)
    u.add_argument("out_dir", type=Path)
    u.add_argument("--run", type=Path, help="the run's <profile>-run.json, for bench-meta.json")
    u.add_argument("--gpu", default="NVIDIA H100 80GB HBM3")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.out)
        return 0
    if args.command == "unpack":
        unpack(args.bench_json, args.out_dir, args.run, args.gpu)
        return 0
    args.label = args.label or f"{args.profile}-1gpu"
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
