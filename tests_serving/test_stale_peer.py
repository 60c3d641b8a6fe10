"""The negative control of the engine-id fix, on the real plane (run by hand:
``RAY_PD_EKS_SERVING_PIN_ENGINE_IDS=1 ./scripts/test-serving.sh -k stale_peer``; skipped
otherwise). With ``engine_id`` pinned as the serve config had it (``prefill``, which Ray turns
into ``prefill-<node ip>-5600``), a prefill replica restarted on its node keeps its NIXL id.
The source review predicted that decode then keeps the dead engine's agent and every request
fails. Observed on this plane (CPU, NIXL over UCX, 2026-12-05): it does not; the restarted
prefill serves, decode counts the transfer and none fails. This test holds that observation,
so a change of behaviour upstream shows; the unpinned id stays either way (docs/
serving-tier.md)."""

from __future__ import annotations

import pytest

from ray_pd_eks import lambda_code
from ray_pd_eks.rehearse.plane import HEAD_IP, RenderedApp, ServingPlane
from ray_pd_eks.rehearse.probe import chat, wait_for
from tests_serving.conftest import PIN_ENGINE_IDS
from tests_serving.proxy_standin import RealPlaneKubeApi
from tests_serving.test_plane import _client, _dashboard, _props, _rose, restart_prefill

checks = lambda_code.checks()
kv_probe = lambda_code.kv_probe()
placement = lambda_code.placement()

pytestmark = pytest.mark.skipif(
    not PIN_ENGINE_IDS, reason="the negative control: RAY_PD_EKS_SERVING_PIN_ENGINE_IDS=1"
)


def test_stale_peer_a_prefill_restarted_with_a_pinned_id_still_serves(
    plane: ServingPlane, app: RenderedApp, kube: RealPlaneKubeApi
) -> None:
    base = f"http://{HEAD_IP}:8000"
    assert chat(base, app.model_id, "Warm the decode peer up.", 4)["status"] == 200
    restart_prefill(plane, app)
    client = _client(kube)
    dashboard = _dashboard(kube, client)
    serve_json = dashboard.serve_applications()
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{kube.namespace}/pods"), kube.rayservice_name, ()
    )
    place = placement.placement(pods, serve_json, kube.app_name, mode="pd")
    metric_pods = kv_probe.decode_metric_pods(place, serve_json, kube.app_name)
    props = _props(kube)
    before, _ = kv_probe.read_nixl_counters(client, props, metric_pods)
    assert before is not None
    run = kv_probe.kv_probe(client, props, metric_pods)
    assert run.probe is not None, (run.failure, run.pending)  # answered: no HTTP 500
    after = wait_for(lambda: _rose(client, props, metric_pods, before), 40, every_s=5)
    assert after, "decode counted no transfer after the restart"
    assert (after.failed or 0) == (before.failed or 0), after
