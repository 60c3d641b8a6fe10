"""The checks of one poll, in order (the steps the handler's docstring lists): GPU nodes,
the RayService and its pods, placement, the models, the Ray token, the KV integrity probe and,
for P/D, the NIXL evidence. ``check`` returns the first pending step or the Data when every
step passed, and raises :class:`~properties.ReadinessError` for a state waiting cannot fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import checks
import kube
import ray_dashboard
from kv_probe import decode_metric_pods, kv_probe
from nixl_logs import backend_failure, read_nixl_backends
from placement import placement
from properties import DASHBOARD_PORT, SERVE_PORT, Props, ReadinessError
from report import MAX_DATA_VALUE_CHARS, aggregated_data, pd_data
from terminal import terminal_failure


@dataclass(frozen=True)
class Outcome:
    complete: bool
    data: dict[str, str] = field(default_factory=dict)
    pending_check: str = ""
    status: str = ""


def _pending(check_name: str, status: str) -> Outcome:
    return Outcome(complete=False, pending_check=check_name, status=status)


def check(
    props: Props,
    client: kube.KubeClient,
    *,
    now: float,
    budget_ends: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    started: float | None = None,
) -> Outcome:
    """Run every check once, in order; return the first pending one or the Data when done.

    Raises :class:`ReadinessError` for terminal states, and lets ``KubeAuthError`` /
    ``KubeTlsError`` through (retrying cannot fix either). Other API errors after the client's
    own retries make the poll pending, so a blip does not fail a deploy but a persistent one
    shows up as the last status in the timeout message.
    """

    def out_of_budget(step: str) -> Outcome | None:
        if budget_ends is not None and monotonic() > budget_ends:
            return _pending(step, "poll budget used up before this step; the next poll resumes")
        return None

    ns, rs = props.namespace, props.rayservice
    try:
        nodes = checks.gpu_nodes(
            client.get_json("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}),
            props.expected_gpu_nodes,
        )
        rs_json = get_rayservice(client, props)
        state = checks.rayservice_state(rs_json, props.app_name)
        pods = checks.ray_pods(
            client.get_json(f"/api/v1/namespaces/{ns}/pods"), rs, state.cluster_names
        )
        # Warnings of the pods and of the RayService/RayCluster: a pod the API server refused
        # to create has no events of its own, only its RayCluster's FailedToCreate*Pod.
        events = client.get_json(
            f"/api/v1/namespaces/{ns}/events", {"fieldSelector": "type=Warning"}
        )
    except (kube.KubeAuthError, kube.KubeTlsError):
        raise
    except kube.KubeApiError as exc:
        return _pending("kubernetes-api", str(exc))

    problems = checks.pod_problems(pods, events)
    warnings = checks.ray_object_warnings(events, rs, state.cluster_names)
    failure = terminal_failure(
        props, nodes, state, problems, now, warnings=warnings, started=started
    )
    if failure:
        raise ReadinessError(failure)
    pod_note = "; ".join(p.describe() for p in problems)
    pod_note = f"; pods: {pod_note}" if pod_note else ""

    if not nodes.ok:
        return _pending("gpu-nodes", nodes.why + pod_note)
    if not state.running:
        return _pending("rayservice", state.summary() + pod_note)

    dashboard = ray_dashboard.RayDashboard(
        client, ns, rs, port=DASHBOARD_PORT, token_secret=props.ray_auth_secret or None
    )
    if late := out_of_budget("placement"):
        return late
    serve_json, serve_error = serve_applications(dashboard)
    place = placement(
        pods,
        serve_json,
        props.app_name,
        serve_error=serve_error,
        mode=props.serving_mode,
        gpus_per_worker=props.gpus_per_worker,
    )
    if place.conflict:
        raise ReadinessError(place.why)
    if not place.ok:
        return _pending("placement", place.why)

    if late := out_of_budget("models"):
        return late
    models, models_status = _list_models(client, props)
    if props.model_id not in models:
        if models:
            raise ReadinessError(
                f"the endpoint serves {', '.join(models)} but not ModelId {props.model_id}; "
                "make ModelId match model_loading_config.model_id in serveConfigV2"
            )
        return _pending("models", models_status)

    if late := out_of_budget("ray-token"):
        return late
    token_enforced = ray_token_enforced(dashboard)
    if token_enforced.startswith("unknown"):
        # The dashboard did not answer (5xx, 429, no route): not proven yet, ask again.
        return _pending("ray-token", token_enforced)

    pd = props.serving_mode == "pd"
    metric_pods = decode_metric_pods(place, serve_json, props.app_name) if pd else []
    if late := out_of_budget("chat-completion"):
        return late
    run = kv_probe(client, props, metric_pods if pd else None)
    if run.pending:
        return _pending(run.pending_check, run.pending)
    if run.failure:
        raise ReadinessError(run.failure)
    probe, verdict = run.probe, run.verdict
    assert probe is not None

    if not pd:
        data = aggregated_data(props, nodes, state, place, models, probe.answer)
        data["IntegrityProbe"] = probe.describe()[:MAX_DATA_VALUE_CHARS]
        data["RayTokenEnforced"] = token_enforced
        return Outcome(complete=True, data=data)
    assert verdict is not None

    kv = read_nixl_backends(
        dashboard,
        serve_json,
        props.app_name,
        deadline=budget_ends,
        monotonic=monotonic,
        fi_provider=checks.workers_fi_provider(pods),
    )
    fallbacks = kv.fallbacks(props.kv_backend)
    if fallbacks:
        raise ReadinessError(
            f"NIXL instantiated UCX on {', '.join(fallbacks)} although KvBackend is LIBFABRIC "
            f"(observed {kv.value()}): KV cache moves at TCP speed, not over EFA; set "
            'kv_connector_extra_config.backends: ["LIBFABRIC"] in both prefill_config and '
            "decode_config, FI_PROVIDER=efa on the workers, and request vpc.amazonaws.com/efa"
        )
    if kv.out_of_budget:
        return _pending("kv-backend", "poll budget used up while reading the engines' logs")
    if failure := backend_failure(props.kv_backend, kv):
        raise ReadinessError(failure)

    data = pd_data(props, nodes, state, place, models, probe, verdict, kv, token_enforced)
    return Outcome(complete=True, data=data)


def ray_token_enforced(dashboard: ray_dashboard.RayDashboard) -> str:
    """Prove the dashboard refuses a request without the Ray token: 401/403 passes; an answer
    fails the deploy (an image whose Ray predates token authentication, 2.52, starts the
    dashboard open and ignores authOptions). Skipped, and said so, without a token Secret."""
    if not dashboard.token_secret:
        return "not checked: no RayAuthSecret (the dashboard takes no token)"
    # The endpoint the check reads with the token: a route that is certainly not exempt
    # (Ray 2.58's token_auth_middleware, ray/_private/authentication/
    # http_token_authentication.py, answers 401 without a token and 403 with a wrong one).
    where = (
        f"GET /api/serve/applications/ via {dashboard.service}:{dashboard.port} without the "
        "Ray token"
    )
    try:
        dashboard.client.service_proxy(
            dashboard.namespace,
            dashboard.service,
            dashboard.port,
            "api/serve/applications/",
            retries=1,
        )
    except kube.UpstreamAuthError as exc:
        return f"yes: {exc.status} without the token"
    except kube.KubeAuthError:
        raise
    except kube.KubeApiError as exc:
        if exc.status is not None and exc.status < 500 and exc.status != 429:
            raise ReadinessError(
                f"Ray token authentication is not proven: {where} answered {exc.status} "
                f"({exc.reason}), not 401/403"
            ) from None
        return f"unknown: {where}: {exc.reason or exc}"
    raise ReadinessError(
        f"Ray token authentication is not enforced: {where} was answered, not refused with "
        "401/403; the image's Ray is older than 2.52 or authOptions did not reach the "
        "RayCluster: use a Ray >= 2.52 image and check rayClusterConfig.authOptions"
    )


def get_rayservice(client: kube.KubeClient, props: Props) -> dict[str, Any]:
    path = f"/apis/ray.io/v1/namespaces/{props.namespace}/rayservices/{props.rayservice}"
    try:
        return client.get_json(path)
    except kube.KubeApiError as exc:
        if exc.status == 404:
            raise ReadinessError(
                f"RayService {props.namespace}/{props.rayservice} not found ({exc.reason}); "
                "check RayServiceName and Namespace match the manifest, that the KubeRay CRDs "
                "are installed, and that this resource depends on the RayService"
            ) from None
        raise


def serve_applications(dashboard: ray_dashboard.RayDashboard) -> tuple[dict[str, Any] | None, str]:
    """The dashboard's Serve details, or why not. A refused or unreadable Ray token is not
    "not deployed yet": it raises (waiting cannot fix it)."""
    try:
        return dashboard.serve_applications(), ""
    except kube.KubeAuthError:
        raise
    except kube.KubeApiError as exc:
        return None, f"GET /api/serve/applications/ via {dashboard.service}: {exc.reason or exc}"


def _list_models(client: kube.KubeClient, props: Props) -> tuple[list[str], str]:
    where = f"GET /v1/models via {props.serve_service}:{SERVE_PORT}"
    try:
        _, body = client.service_proxy(
            props.namespace, props.serve_service, SERVE_PORT, "v1/models", retries=1
        )
        payload = json.loads(body)
    except kube.KubeAuthError:
        raise
    except kube.KubeApiError as exc:
        return [], f"{where}: {exc.reason or exc}"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return [], f"{where}: response is not JSON"
    entries = payload.get("data") if isinstance(payload, dict) else None
    models = [str(m.get("id")) for m in entries or [] if isinstance(m, dict) and m.get("id")]
    return models, f"{where}: listed {', '.join(models) or 'no models'}"
