"""The readiness check's Serve and Ray steps, unmodified, against the real plane.

Every answer below comes from the real Ray 2.58 dashboard, Serve proxy, vLLM 0.26 engines and
NIXL 1.3.1 started by the ``plane`` fixture; only the Kubernetes objects and the proxy hop are
the stand-in's (proxy_standin.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from ray_pd_eks.rehearse.plane import HEAD_IP, RAY_TOKEN, WORKER_IPS, RenderedApp, ServingPlane
from ray_pd_eks.rehearse.probe import answer_text, chat, http
from tests_serving.proxy_standin import RealPlaneKubeApi

checks = lambda_code.checks()
handler = lambda_code.handler()
kube = lambda_code.kube()
kvproof = lambda_code.kvproof()


def _client(api: RealPlaneKubeApi) -> Any:
    return kube.KubeClient(api.url, api.ca_data, lambda: "k8s-aws-v1.serving-tier", timeout=600)


def _props(api: RealPlaneKubeApi) -> Any:
    return handler.Props.from_properties(api.props(KvBackend="UCX"))


def _dashboard(api: RealPlaneKubeApi, client: Any) -> Any:
    return kube.RayDashboard(
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
    replicas = checks.serve_replicas(serve_json, kube_api_real.app_name)
    roles = {r.role: r for r in replicas if r.role in ("prefill", "decode")}
    assert set(roles) == {"prefill", "decode"}, [(r.deployment, r.role) for r in replicas]
    assert {roles["prefill"].node_ip, roles["decode"].node_ip} == set(WORKER_IPS)
    assert all(r.state == "RUNNING" for r in replicas)
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{kube_api_real.namespace}/pods"),
        kube_api_real.rayservice_name,
        (),
    )
    place = checks.placement(pods, serve_json, kube_api_real.app_name, mode="pd")
    assert place.ok, place.why
    assert place.method == "serve-replicas"
    assert not place.conflict


def test_dashboard_refuses_a_request_without_the_ray_token(kube_api_real: RealPlaneKubeApi) -> None:
    client = _client(kube_api_real)
    assert handler.ray_token_enforced(_dashboard(kube_api_real, client)).startswith("yes: 401")
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
    models, _ = handler._list_models(_client(kube_api_real), props)
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
    place = checks.placement(pods, serve_json, kube_api_real.app_name, mode="pd")
    metric_pods = handler.decode_metric_pods(place, serve_json, kube_api_real.app_name)
    decode_ip = next(
        r.node_ip
        for r in checks.serve_replicas(serve_json, kube_api_real.app_name)
        if r.role == "decode"
    )
    assert metric_pods == [kube_api_real.pod_for_ip(decode_ip)]
    run = handler.kv_probe(client, props, metric_pods)
    assert not run.pending, run.pending
    assert run.probe is not None
    assert run.probe.status == 200
    assert (run.probe.prompt_tokens or 0) >= kvproof.PROBE_MIN_PROMPT_TOKENS
    # Dummy weights answer nonsense, so the integrity verdict fails on the code: what the
    # real engines prove here is the transfer (and, in test_pd_answer_is_computed_..., that
    # the KV decode pulled is the KV prefill computed).
    assert run.failure.startswith(kvproof.probe_failure(run.probe) or "")
    after, _ = handler.read_nixl_counters(client, props, metric_pods)
    assert after is not None
    assert (after.transfers or 0) >= 1, after
    assert (after.failed or 0) == 0, after
    assert (after.bytes or 0) > 0, after


def test_decode_worker_log_names_the_nixl_backend(kube_api_real: RealPlaneKubeApi) -> None:
    client = _client(kube_api_real)
    dashboard = _dashboard(kube_api_real, client)
    serve_json = dashboard.serve_applications()
    chat(f"http://{HEAD_IP}:8000", kube_api_real.model_id, "Hello there.", 4)
    report = handler.read_nixl_backends(dashboard, serve_json, kube_api_real.app_name)
    assert report.backends, report.reason
    assert {backend for _, backend in report.backends} == {"UCX"}, report.backends
    assert handler.backend_failure("UCX", report) is None


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
