"""``efa-check``: nodes, worker pod specs and the NIXL backend read from Ray logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_fixtures import REGION, Harness, cli_harness, stub_cluster, write_cdk_json
from tests.fakes.kube_api import (
    GPU_NODE_A,
    GPU_NODE_B,
    WORKER_IP_A,
    WORKER_IP_B,
    WORKER_POD_A,
    WORKER_POD_B,
    FakeKubeApi,
    make_node,
)

PREFILL = f"prefill@{WORKER_IP_A}"
DECODE = f"decode@{WORKER_IP_B}"

pytest_plugins = ["tests.fakes.fixtures"]  # the ``kube_api`` fixture: a fresh fake API server


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    return cli_harness(kube_api, tmp_path)


def serving(kube_api: FakeKubeApi, fi_provider: str | None = "efa") -> None:
    """The serving stage, with FI_PROVIDER on the workers as the RayService manifest sets it.

    The shared fake builds pods without env; this adds it here rather than in the fake.
    """
    kube_api.set_stage("serving")
    for pod in kube_api.pods:
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker" and fi_provider:
            pod["spec"]["containers"][0]["env"] = [
                {"name": "FI_PROVIDER", "value": fi_provider},
                {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ]


def finding(out: str, text: str, kind: str = "") -> str:
    """The one line naming ``text``; a worker's label names its backend and provider lines,
    so ``kind`` picks one (default: the backend line when there are several)."""
    lines = [line.strip() for line in out.splitlines() if text in line]
    if kind or len(lines) > 1:
        lines = [line for line in lines if line.split()[1] == (kind or "backend")]
    (line,) = lines
    return line


def test_libfabric_on_both_workers_passes(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    result = cli.run("efa-check")
    assert result.code == 0, result.out + result.err
    assert finding(result.out, GPU_NODE_A) == (
        f"OK    nodes         {GPU_NODE_A} (us-west-2a): EFA capacity 1, allocatable 1"
    )
    assert finding(result.out, WORKER_POD_B) == (
        f"OK    pods          {WORKER_POD_B}: 1 EFA interface(s), FI_PROVIDER=efa"
    )
    prefill = finding(result.out, PREFILL)
    assert prefill.startswith(f"OK    backend       {PREFILL}: LIBFABRIC (from worker-")
    assert finding(result.out, DECODE).startswith(f"OK    backend       {DECODE}: LIBFABRIC")
    assert finding(result.out, PREFILL, "provider") == f"OK    provider      {PREFILL}: efa"
    assert finding(result.out, DECODE, "provider") == f"OK    provider      {DECODE}: efa"
    assert finding(result.out, "code ", "integrity").startswith("OK    integrity     code ")
    assert " returned (" in finding(result.out, "code ", "integrity")
    assert finding(result.out, "transfer(s)", "transfer").startswith(
        "OK    transfer      1 transfer(s), "
    )
    assert "0 FAIL, 0 WARN: the KV cache path uses EFA" in result.out
    assert (
        '  kubectl logs -n inference -l ray.io/node-type=worker --tail=-1 | grep -h "Backend .* '
        'was instantiated"' in result.out
    )
    # Logs came through the head service's proxy, i.e. the Ray dashboard log API.
    assert kube_api.requests_to("/services/ray-llm-head-svc:8265/proxy/api/v0/logs/file")


def test_ucx_fallback_fails_and_names_the_fix(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.set_nixl_backend("LIBFABRIC", "UCX")
    result = cli.run("efa-check")
    assert result.code == 1
    line = finding(result.out, DECODE)
    assert line.startswith(f"FAIL  backend       {DECODE}: UCX (from worker-")
    assert "the KV cache moves over TCP, not EFA" in line
    assert 'backends: ["LIBFABRIC"]' in line and "FI_PROVIDER=efa" in line
    assert "request vpc.amazonaws.com/efa" in line and "EFA device plugin" in line
    assert "1 FAIL, 0 WARN: the KV cache path is not proven on EFA" in result.out


def test_ucx_is_fine_when_configured_for_comparison(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api, fi_provider=None)  # the UCX variant sets UCX_TLS, not FI_PROVIDER
    kube_api.set_nixl_backend("UCX")
    result = cli.run("efa-check", "-c", "kvBackend=UCX")
    assert result.code == 0, result.out
    assert finding(result.out, PREFILL).startswith(f"OK    backend       {PREFILL}: UCX")
    assert finding(result.out, WORKER_POD_A) == (
        f"OK    pods          {WORKER_POD_A}: kvBackend UCX (TCP comparison): EFA not required"
    )


def test_unreadable_backend_is_not_a_pass(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.set_nixl_backend(None)  # no "Backend ... was instantiated" line anywhere
    result = cli.run("efa-check")
    assert result.code == 1
    line = finding(result.out, PREFILL)
    assert line.startswith(f"FAIL  backend       {PREFILL}: unknown: no 'Backend ... was")


def test_node_without_efa_fails_with_the_plugin_hint(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.nodes[2] = make_node(GPU_NODE_B, efa=0)
    result = cli.run("efa-check")
    assert result.code == 1
    line = finding(result.out, f"{GPU_NODE_B}:")
    assert line.startswith(f"FAIL  nodes         {GPU_NODE_B}: EFA capacity 0, allocatable 0")
    assert "the EFA device plugin does not advertise EFA here" in line


def test_worker_without_fi_provider_fails(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api, fi_provider=None)
    result = cli.run("efa-check")
    assert result.code == 1
    assert finding(result.out, WORKER_POD_A) == (
        f"FAIL  pods          {WORKER_POD_A}: FI_PROVIDER is unset, not efa: fix the worker "
        "group spec"
    )


def test_without_serve_details_every_worker_node_is_read(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    serving(kube_api)
    kube_api.serve_applications = None  # dashboard answers 503 for the Serve details
    result = cli.run("efa-check")
    assert result.code == 0, result.out
    assert finding(result.out, f"node@{WORKER_IP_A}").startswith(
        f"OK    backend       node@{WORKER_IP_A}: LIBFABRIC"
    )


def test_gpu_nodes_in_two_zones_fail(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.nodes[2] = make_node(GPU_NODE_B, zone="us-west-2b")
    result = cli.run("efa-check")
    assert result.code == 1
    assert "FAIL  nodes         GPU nodes span us-west-2a, us-west-2b: EFA needs one AZ" in (
        result.out
    )


def test_rayservice_missing_is_exit_3(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_cluster(harness.session, kube_api.url, kube_api.ca_data)
    result = harness.run("efa-check")
    assert result.code == 3
    assert result.err.startswith("error: RayService 'ray-llm' not found")


def test_aggregated_app_has_no_kv_path_to_prove(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api, fi_provider=None)
    kube_api.set_aggregated()  # the live app is build_openai_app; cdk.json still says pd
    result = cli.run("efa-check")
    assert result.code == 0, result.out + result.err
    assert "(servingMode aggregated, cluster ray-llm-multinode)" in result.out
    assert finding(result.out, GPU_NODE_A).startswith(f"OK    nodes         {GPU_NODE_A}")
    line = finding(result.out, "no NIXL backend")
    assert line.startswith("OK    backend       servingMode aggregated: each engine does")
    assert "FAIL" not in result.out
    assert kube_api.requests_to("/proxy/api/v0/logs") == []  # no log was read


def test_serving_mode_is_read_from_the_live_app() -> None:
    from ray_pd_eks import lambda_code

    checks = lambda_code.checks()
    pd = {
        "spec": {
            "serveConfigV2": "applications:\n- import_path: ray.serve.llm:build_pd_openai_app\n"
        }
    }
    agg = {"spec": {"serveConfigV2": "- import_path: ray.serve.llm:build_openai_app\n"}}
    assert checks.serving_mode(pd) == "pd"
    assert checks.serving_mode(agg) == "aggregated"
    assert checks.serving_mode({"spec": {"serveConfigV2": "applications: []"}}) is None
    assert checks.serving_mode(None) is None


def test_fi_provider_efa_and_libfabric_prove_efa_without_the_discovered_line(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """NIXL's 'Discovered <n> EFA devices' is INFO, below its default level: not required."""
    serving(kube_api)
    kube_api.set_nixl_backend("LIBFABRIC", provider=None)
    result = cli.run("efa-check", "--no-probe")
    assert result.code == 0, result.out
    assert finding(result.out, DECODE, "provider") == f"OK    provider      {DECODE}: efa"


def test_without_fi_provider_the_discovered_line_is_still_needed(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    serving(kube_api, fi_provider=None)
    kube_api.set_nixl_backend("LIBFABRIC", provider=None)
    result = cli.run("efa-check", "--no-probe")
    assert result.code == 1
    assert finding(result.out, DECODE, "provider").startswith(
        f"FAIL  provider      {DECODE}: unknown: no 'Discovered <n> EFA|tcp devices' line"
    )


def test_the_tcp_provider_fails(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.set_nixl_backend("LIBFABRIC", provider="tcp")
    result = cli.run("efa-check", "--no-probe")
    assert result.code == 1
    line = finding(result.out, DECODE, "provider")
    assert line.startswith(f"FAIL  provider      {DECODE}: tcp: NIXL's LIBFABRIC plugin saw no EFA")
    assert kube_api.requests_to("v1/chat/completions") == []  # --no-probe sends nothing


def test_an_answer_without_the_code_fails_the_check(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    kube_api.chat_answer = "The access code is 7QK2M9XD."
    result = cli.run("efa-check")
    assert result.code == 1
    assert finding(result.out, "code ", "integrity").startswith("FAIL  integrity     code ")
    assert "KV integrity probe failed: the answer does not contain the code" in result.out


def test_a_transfer_count_that_did_not_rise_fails_the_check(
    kube_api: FakeKubeApi, cli: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray_pd_eks import lambda_code

    monkeypatch.setattr(lambda_code.kv_probe(), "counter_sleep", lambda _: None)
    serving(kube_api)
    kube_api.kv_transfers_per_chat = 0
    result = cli.run("efa-check")
    assert result.code == 1
    assert "the NIXL transfer count did not rise during the probe" in result.out


def test_log_lines_of_one_is_the_least_accepted(kube_api: FakeKubeApi, cli: Harness) -> None:
    serving(kube_api)
    result = cli.run("efa-check", "--no-probe", "--log-lines", "1")
    assert result.code != 2, result.err  # read (one line per file), not refused
    files = [r for r in kube_api.requests_to("api/v0/logs/file") if r.query.get("lines") == "1"]
    assert files


@pytest.mark.parametrize("lines", ["0", "-1"])
def test_log_lines_below_one_is_refused_before_any_call(
    kube_api: FakeKubeApi, tmp_path: Path, lines: str
) -> None:
    """0 would be Ray's default of 1,000 lines and -1 the whole file: refused, naming the flag,
    the value and the limit, before any AWS or cluster call."""
    from tests.cli_fixtures import Harness, write_cdk_json

    h = Harness(write_cdk_json(tmp_path))  # no AWS call is stubbed: none may be made
    result = h.run("efa-check", "--log-lines", lines)
    assert result.code == 2
    assert f"--log-lines {lines}: must be at least 1" in result.err
    assert kube_api.requests == []
