"""The serving plane's pure parts (ray_pd_eks/rehearse/plane.py): what it changes in the rendered
Serve config, the ports each local node gets, and the processes it cleans up. The plane itself
runs in the serving tier (tests_serving/)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pd_constructs.inventory.render import rendered_files
from ray_pd_eks.config import DEFAULTS
from ray_pd_eks.rehearse.plane import (
    GPU_STANDIN,
    PLANE_MARK,
    RENDERED_RAYSERVICE,
    PlaneError,
    RenderedApp,
    _node_ports,
    adapt_serve_config,
    engine_configs,
    marked_processes,
    rendered_app,
)


@pytest.fixture(scope="module")
def app() -> RenderedApp:
    return rendered_app(rendered_files(DEFAULTS)[RENDERED_RAYSERVICE.name])


def test_the_rendered_app_is_read_from_the_manifest(app: RenderedApp) -> None:
    assert app.rayservice_name == DEFAULTS.ray_service_name
    assert app.app_name == DEFAULTS.application_name
    assert app.model_id == DEFAULTS.model_id
    assert app.head_start_params["num-gpus"] == "0"
    assert app.worker_gpus == 1
    assert "VLLM_HOST_IP" not in app.worker_env  # a valueFrom: the plane fills it


def test_a_manifest_without_a_rayservice_is_refused() -> None:
    with pytest.raises(PlaneError, match="no RayService"):
        rendered_app("kind: ConfigMap\nmetadata: {name: x}\n")


def test_on_cpu_only_the_model_bundles_and_kv_transport_change(
    app: RenderedApp, tmp_path: Path
) -> None:
    adapted = adapt_serve_config(app.serve_config, model_dir=tmp_path, device="cpu")
    for before, after in zip(
        engine_configs(app.serve_config), engine_configs(adapted), strict=True
    ):
        assert after["model_loading_config"]["model_source"] == str(tmp_path)
        assert after["engine_kwargs"]["load_format"] == "dummy"
        assert "revision" not in after["engine_kwargs"]
        kv = after["engine_kwargs"]["kv_transfer_config"]
        assert kv["kv_connector_extra_config"]["backends"] == ["UCX"]
        assert kv["kv_buffer_device"] == "cpu"
        assert kv["kv_role"] == before["engine_kwargs"]["kv_transfer_config"]["kv_role"]
        assert after["placement_group_config"]["bundles"] == [{"CPU": 1, GPU_STANDIN: 1}]
        assert after["deployment_config"] == before["deployment_config"]
        for key in ("max_model_len", "dtype", "gpu_memory_utilization", "enforce_eager"):
            assert after["engine_kwargs"][key] == before["engine_kwargs"][key]
    # The rendered config itself is untouched.
    assert engine_configs(app.serve_config)[0]["engine_kwargs"].get("load_format") is None


def test_two_engines_on_one_gpu_share_its_memory(app: RenderedApp, tmp_path: Path) -> None:
    adapted = adapt_serve_config(
        app.serve_config, model_dir=tmp_path, device="cuda", engines_per_gpu=2
    )
    for engine in engine_configs(adapted):
        assert engine["engine_kwargs"]["gpu_memory_utilization"] == 0.43
        assert engine["placement_group_config"]["bundles"] == [{"GPU": 1}]
        assert "kv_buffer_device" not in engine["engine_kwargs"]["kv_transfer_config"]


def test_each_node_gets_ports_of_its_own(app: RenderedApp) -> None:
    nodes = [_node_ports(app.worker_start_params, i) for i in range(3)]
    assert nodes[0]["node-manager-port"] == app.worker_start_params["node-manager-port"]
    for key in ("node-manager-port", "metrics-export-port", "dashboard-agent-listen-port"):
        assert len({n[key] for n in nodes}) == 3
    ranges = [range(int(n["min-worker-port"]), int(n["max-worker-port"]) + 1) for n in nodes]
    for a, b in itertools.pairwise(ranges):
        assert a[-1] < b[0]


def test_stop_finds_exactly_the_processes_carrying_the_plane_mark(tmp_path: Path) -> None:
    for pid, env in (
        ("101", f"A=1\0{PLANE_MARK}=/tmp/p1\0B=2"),
        ("102", f"{PLANE_MARK}=/tmp/p10"),
        ("103", "A=1"),
    ):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "environ").write_bytes(env.encode())
    (tmp_path / "self").mkdir()
    (tmp_path / "104").mkdir()  # a process that ended while being read: no environ
    assert marked_processes("/tmp/p1", proc=tmp_path) == [101]
