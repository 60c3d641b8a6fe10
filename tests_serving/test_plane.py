"""The readiness check's Serve and Ray steps, unmodified, against the real plane.

Every answer below comes from the real Ray 2.58 dashboard, Serve proxy, vLLM 0.26 engines and
NIXL 1.3.1 started by the ``plane`` fixture; only the Kubernetes objects and the proxy hop are
the stand-in's (proxy_standin.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from ray_pd_eks.rehearse.plane import (
    HEAD_IP,
    RAY_TOKEN,
    WORKER_IPS,
    RenderedApp,
    ServingPlane,
    serving_python,
)
from ray_pd_eks.rehearse.probe import answer_text, chat, http, wait_for
from tests.readiness import (
    checks,
    kube,
    kv_probe,
    kvproof,
    nixl_logs,
    placement,
    properties,
    ray_dashboard,
    steps,
)
from tests_serving.proxy_standin import RealPlaneKubeApi


def _client(api: RealPlaneKubeApi) -> Any:
    return kube.KubeClient(api.url, api.ca_data, lambda: "k8s-aws-v1.serving-tier", timeout=600)


def _props(api: RealPlaneKubeApi) -> Any:
    return properties.Props.from_properties(api.props(KvBackend="UCX"))


def _dashboard(api: RealPlaneKubeApi, client: Any) -> Any:
    return ray_dashboard.RayDashboard(
        client,
        api.namespace,
        api.rayservice_name,
        token_secret=f"{api.rayservice_name}-ray-token",
    )


def test_serve_places_prefill_and_decode_on_two_worker_nodes(
    kube_api_real: RealPlaneKubeApi,
) -> None:
    client = _client(kube_api_real)
    serve_json = _dashboard(kube_api_real, client).serve_applications()
    replicas = placement.serve_replicas(serve_json, kube_api_real.app_name)
    roles = {r.role: r for r in replicas if r.role in ("prefill", "decode")}
    assert set(roles) == {"prefill", "decode"}, [(r.deployment, r.role) for r in replicas]
    assert {roles["prefill"].node_ip, roles["decode"].node_ip} == set(WORKER_IPS)
    assert all(r.state == "RUNNING" for r in replicas)
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{kube_api_real.namespace}/pods"),
        kube_api_real.rayservice_name,
        (),
    )
    place = placement.placement(pods, serve_json, kube_api_real.app_name, mode="pd")
    assert place.ok, place.why
    assert place.method == "serve-replicas"
    assert not place.conflict


def test_dashboard_refuses_a_request_without_the_ray_token(kube_api_real: RealPlaneKubeApi) -> None:
    client = _client(kube_api_real)
    assert steps.ray_token_enforced(_dashboard(kube_api_real, client)).startswith("yes: 401")
    status, _ = http(
        f"http://{HEAD_IP}:8265/api/serve/applications/",
        headers={"Authorization": "Bearer not-the-token"},
    )
    assert status == 403
    status, _ = http(
        f"http://{HEAD_IP}:8265/api/serve/applications/",
        headers={"Authorization": f"Bearer {RAY_TOKEN}"},
    )
    assert status == 200


def test_models_list_the_model_id(kube_api_real: RealPlaneKubeApi) -> None:
    props = _props(kube_api_real)
    models, _ = steps._list_models(_client(kube_api_real), props)
    assert models == [kube_api_real.model_id]


def test_probe_moves_kv_through_nixl_and_decode_counts_it(kube_api_real: RealPlaneKubeApi) -> None:
    """The chat completion goes through Serve's PD router: prefill computes, decode pulls the
    KV blocks over NIXL and records the transfer in the counters the readiness check reads."""
    client = _client(kube_api_real)
    props = _props(kube_api_real)
    serve_json = _dashboard(kube_api_real, client).serve_applications()
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{kube_api_real.namespace}/pods"),
        kube_api_real.rayservice_name,
        (),
    )
    place = placement.placement(pods, serve_json, kube_api_real.app_name, mode="pd")
    metric_pods = kv_probe.decode_metric_pods(place, serve_json, kube_api_real.app_name)
    decode_ip = next(
        r.node_ip
        for r in placement.serve_replicas(serve_json, kube_api_real.app_name)
        if r.role == "decode"
    )
    assert metric_pods == [kube_api_real.pod_for_ip(decode_ip)]
    before, _ = kv_probe.read_nixl_counters(client, props, metric_pods)
    assert before is not None
    run = kv_probe.kv_probe(client, props, metric_pods)
    assert not run.pending, run.pending
    assert run.probe is not None
    tokens = run.probe.prompt_tokens or 0
    assert kvproof.PROBE_MIN_PROMPT_TOKENS <= tokens <= kvproof.PROBE_MAX_PROMPT_TOKENS
    # Dummy weights answer nonsense, so the integrity verdict fails on the code: what the
    # real engines prove here is the transfer (test_a_repeated_prompt_... covers the answer).
    assert run.failure == kvproof.probe_failure(run.probe)
    after = wait_for(lambda: _rose(client, props, metric_pods, before), 40, every_s=5)
    assert after, "decode's NIXL transfer count did not rise within 40 s of the probe"
    assert (after.failed or 0) == (before.failed or 0), after
    # The byte histogram's buckets bracket the prompt's real KV size: the tiny model holds
    # 2 layers x 2 KV heads x 64 dims x K and V x 2 bytes = 1 KiB a token.
    bounds = kvproof.moved_bytes_bounds(before, after)
    assert bounds is not None, after
    low, high = bounds
    kv_bytes = (tokens - kvproof.UNCOUNTED_TOKENS) * TINY_KV_BYTES_PER_TOKEN
    assert low <= tokens * TINY_KV_BYTES_PER_TOKEN
    assert high >= kv_bytes


TINY_KV_BYTES_PER_TOKEN = 2 * 2 * 64 * 2 * 2


def _rose(client: Any, props: Any, pods: list[str], before: Any) -> Any:
    after, _ = kv_probe.read_nixl_counters(client, props, pods)
    if after is not None and (after.transfers or 0) > (before.transfers or 0):
        return after
    return None


def test_decode_worker_log_names_the_nixl_backend(kube_api_real: RealPlaneKubeApi) -> None:
    client = _client(kube_api_real)
    dashboard = _dashboard(kube_api_real, client)
    serve_json = dashboard.serve_applications()
    chat(f"http://{HEAD_IP}:8000", kube_api_real.model_id, "Hello there.", 4)
    report = nixl_logs.read_nixl_backends(dashboard, serve_json, kube_api_real.app_name)
    assert report.backends, report.reason
    assert {backend for _, backend in report.backends} == {"UCX"}, report.backends
    assert nixl_logs.backend_failure("UCX", report) is None


def test_pd_answer_is_computed_from_the_kv_prefill_sent(
    plane: ServingPlane, app: RenderedApp
) -> None:
    """Decode never computes the prompt in P/D: its greedy tokens come from the KV blocks it
    pulled. Dummy weights are seeded, so prefill's engine holds the same weights as decode's;
    the same request answered twice must give the same greedy text, and a different prompt a
    different one (the answer depends on the prompt's KV, not on a fixed output)."""
    base = f"http://{HEAD_IP}:8000"
    prompt = kvproof.probe_prompt("QX7K2P9D")
    first = chat(base, app.model_id, prompt, 12)
    second = chat(base, app.model_id, prompt, 12)
    other = chat(base, app.model_id, kvproof.probe_prompt("ZZ00YY11") + " Different.", 12)
    assert first["status"] == second["status"] == other["status"] == 200
    assert answer_text(first) == answer_text(second)
    assert answer_text(first)
    del other  # (the different prompt's answer may coincide on a 2-layer random model)


@pytest.fixture(scope="module")
def kube_api_real(kube: RealPlaneKubeApi) -> RealPlaneKubeApi:
    return kube


def test_metrics_port_answers_ray_metrics(app: RenderedApp, plane: ServingPlane) -> None:
    from ray_pd_eks.rehearse.plane import metrics_port

    status, text = http(f"http://{WORKER_IPS[0]}:{metrics_port(app, 1)}/metrics")
    assert status == 200
    assert "ray_" in text
    json.dumps({"waited": time.monotonic()})


KILL_ACTOR = """
import sys, ray
ray.init(address=sys.argv[1], namespace="serve", logging_level="ERROR")
ray.kill(ray.get_actor(sys.argv[2], namespace="serve"), no_restart=True)
print("killed", sys.argv[2])
"""


def test_a_prefill_engine_restarted_on_its_node_serves_again(
    plane: ServingPlane, app: RenderedApp
) -> None:
    """The prefill replica dies and Serve starts a new one on the same node (the only one with a
    free GPU), pod and IP unchanged. The serve config pins no ``engine_id``, so the new engine
    gets a new NIXL id and decode handshakes with it; requests succeed again. (With the ids
    pinned, test_stale_peer.py's by-hand control, this plane recovers too.)"""
    base = f"http://{HEAD_IP}:8000"
    assert chat(base, app.model_id, "Warm the decode peer up.", 4)["status"] == 200
    prefill, new = restart_prefill(plane, app)
    assert new.node_ip == prefill.node_ip
    answers = [chat(base, app.model_id, kvproof.probe_prompt("RSTRT001"), 4) for _ in range(2)]
    assert [a["status"] for a in answers] == [200, 200], answers


def restart_prefill(plane: ServingPlane, app: RenderedApp) -> tuple[Any, Any]:
    """Kill the prefill replica's actor (its node, the pod on EKS, stays) and wait until Serve
    runs a new one; (the old replica, the new one)."""
    serve_json = plane.dashboard("api/serve/applications/")
    prefill = next(
        r for r in placement.serve_replicas(serve_json, app.app_name) if r.role == "prefill"
    )
    subprocess.run(
        [str(serving_python()), "-c", KILL_ACTOR, f"{HEAD_IP}:6379", prefill.actor_name],
        env=plane.head_env(),
        check=True,
        timeout=120,
    )

    def restarted() -> object:
        replicas = placement.serve_replicas(
            plane.dashboard("api/serve/applications/"), app.app_name
        )
        new = [r for r in replicas if r.role == "prefill" and r.state == "RUNNING"]
        return new and new[0].replica_id != prefill.replica_id and new[0]

    new = wait_for(restarted, 600, every_s=5)
    assert new, "Serve did not restart the prefill replica within 10 minutes"
    return prefill, new
