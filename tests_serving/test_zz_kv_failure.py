"""A KV path that is really broken, on the real plane: the readiness probe says so at once.

The decode engine is redeployed from a copy of the model directory, as a decode engine of
another model or another vLLM (a half-done upgrade) would be: vLLM 0.26's NIXL handshake
compares a compatibility hash of both sides (vLLM version, model, dtype, KV shape and
attention backend: ``compute_nixl_compatibility_hash``) and refuses the mismatch, so the KV
pull fails inside decode, which ends the request (``kv_load_failure_policy`` "fail") and
answers HTTP 500 through Serve's PD router. (A decode with ``UCX_TLS=self``, tried first,
never came up within 10 minutes.) The readiness check's probe must report that as a KV
transfer failure on its first poll, not as "pending" until the check times out (the behaviour
before the fix, after up to 55 minutes of GPU billing). Last in the session (the file's
name): it leaves decode broken.
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.rehearse.plane import RenderedApp, ServingPlane, adapt_serve_config
from ray_pd_eks.rehearse.probe import wait_for
from tests_serving.proxy_standin import RealPlaneKubeApi
from tests_serving.test_plane import _client, _dashboard, _props

checks = lambda_code.checks()
kv_probe = lambda_code.kv_probe()
placement = lambda_code.placement()


def test_a_blocked_kv_path_is_reported_at_once_as_a_kv_transfer_failure(
    plane: ServingPlane, app: RenderedApp, kube: RealPlaneKubeApi
) -> None:
    client = _client(kube)
    props = _props(kube)
    serve = copy.deepcopy(
        adapt_serve_config(app.serve_config, model_dir=plane.model_dir, device="cpu")
    )
    decode_config = serve["applications"][0]["args"]["decode_config"]
    copy_dir = plane.model_dir.with_name(plane.model_dir.name + "-decode")
    shutil.copytree(plane.model_dir, copy_dir, dirs_exist_ok=True)
    decode_config["model_loading_config"]["model_source"] = str(copy_dir)
    old = _decode(_dashboard(kube, client).serve_applications(), app)
    plane.deploy(serve)

    def redeployed() -> Any:
        new = _decode(_dashboard(kube, client).serve_applications(), app)
        return new is not None and new.replica_id != old.replica_id and new

    new = wait_for(redeployed, 600, every_s=5)
    assert new, "Serve did not start the changed decode replica within 10 minutes"
    serve_json = _dashboard(kube, client).serve_applications()
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{kube.namespace}/pods"), kube.rayservice_name, ()
    )
    place = placement.placement(pods, serve_json, kube.app_name, mode="pd")
    metric_pods = kv_probe.decode_metric_pods(place, serve_json, kube.app_name)
    run = kv_probe.kv_probe(client, props, metric_pods)
    assert not run.pending, run.pending
    assert run.failure is not None and run.failure.startswith(kv_probe.KV_LOAD_FAILED), run


def _decode(serve_json: Any, app: RenderedApp) -> Any:
    running = [
        r
        for r in placement.serve_replicas(serve_json, app.app_name)
        if r.role == "decode" and r.state == "RUNNING"
    ]
    return running[0] if running else None
