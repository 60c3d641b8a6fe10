"""Readiness waiter for the PD endpoint: a CDK ``custom_resources.Provider`` user handler.

``on_event`` starts the wait; the Provider then calls ``is_complete`` every query interval until
it returns ``IsComplete: True`` (with ``Data``) or raises. Each ``is_complete`` call is one poll:

1. the GPU nodes are Ready and advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa``;
2. the RayService's ``Ready`` condition is True and the Serve app is ``RUNNING``;
3. prefill and decode run on different nodes (``ServingMode`` aggregated: each engine on a node
   of its own);
4. the Ray dashboard refuses a request without the Ray token (token auth is enforced);
5. ``/v1/models`` lists the model and the KV integrity probe (``kvproof``: a ~2,500-token
   prompt with a random code only at its start, temperature 0) answers with the code (through
   the API server's service proxy, so the Lambda needs no route to pod IPs);
6. (P/D only) the decode engines' NIXL counters, read from their metrics port through the API
   server's pod proxy before and after the probe: the transfer count rose, no transfer failed,
   the bytes moved fit the prompt; and, from the Ray dashboard's log API, the NIXL backend each
   engine instantiated and, with LIBFABRIC, the libfabric provider (``efa``; ``tcp`` or no
   evidence fails).

Terminal states raise at once with a message a person can act on; the Provider turns the
exception into the CloudFormation failure reason. Nothing survives between polls except the
event, so time-based judgements use timestamps Kubernetes keeps (see ``terminal_failure``) and
the start time ``on_event`` adds to the event (the Provider merges on_event's response into the
event it passes to ``is_complete``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import checks
import kube
import kvproof
from pd_lambda import props as props_helpers
from pd_lambda import rollback
from pd_lambda.settings_hint import set_hint

LOG = logging.getLogger("readiness")

STARTED_AT_KEY = "ReadinessStartedAt"  # top-level, so it never leaks into the resource's Data
DEFAULT_TIMEOUT_SECONDS = 3300  # readinessTimeoutMinutes' default, below CloudFormation's hour
DEFAULT_QUERY_INTERVAL_SECONDS = 30
DEFAULT_POLL_BUDGET_SECONDS = 180.0
# A GPU pod still failing to schedule this long after the last GPU node turned Ready is not
# waiting for a device plugin to catch up; the scheduler's message is the diagnosis.
UNSCHEDULABLE_GRACE_SECONDS = 180
# Kubelet retries a failed pull with a backoff capped at 5 minutes; a 20 GB image can meet
# registry throttling or a reset. Only a pull still failing this long after its first failure
# event is terminal.
IMAGE_PULL_GRACE_SECONDS = 600
# A RayCluster/RayService warning (pod creation refused) is terminal once it has repeated and
# was seen during this wait: KubeRay retries with a backoff, so a refusal that persists repeats.
OBJECT_WARNING_MIN_COUNT = 2
# Worst case for one API call: 4 attempts x 10 s timeout + 7 s backoff. The poll reserves it so
# a call started just inside the budget still ends well before the Lambda timeout.
SLOWEST_CALL_SECONDS = 60
# The polling function's timeout (pd_constructs/readiness/readiness.py HANDLER_TIMEOUT): no poll
# lasts longer, whatever it does.
MAX_POLL_SECONDS = 300
SERVE_PORT = 8000
DASHBOARD_PORT = 8265
METRICS_PORT = 8080  # RAY_PORTS.metrics_export; the construct passes it as MetricsPort
# Ray's workers hand their metrics to the node's metrics agent every metrics_report_interval_ms
# (10 s by default), so a counter can lag the request that moved it: re-read for up to ~30 s.
COUNTER_READS = 6
COUNTER_WAIT_SECONDS = 5.0
# One attempt only: a 503 from a proxy without endpoints just means "next poll", and a single
# 45 s call keeps the poll inside SLOWEST_CALL_SECONDS.
CHAT_TIMEOUT_SECONDS = 45.0
SAMPLE_CHARS = 60
LOG_LINES = 3000
# How much of a file's beginning is read when its tail lacks NIXL's start-up lines: vLLM logs
# some hundred lines (tens of KiB) before NIXL's, so 1 MiB leaves a wide margin and keeps the
# read (and the Lambda's memory) small however long the file grew.
LOG_HEAD_BYTES = 1024 * 1024
# Enough for the replica's and its engine workers' .out files on a busy node; the poll budget
# still bounds the reads.
LOG_FILES_PER_WORKER = 24
MAX_REASON_CHARS = 1500
# CloudFormation caps a custom resource response at 4 KiB, Data included.
MAX_DATA_VALUE_CHARS = 200
KV_BACKENDS = ("LIBFABRIC", "UCX")
SERVING_MODES = ("pd", "aggregated")

REQUIRED_PROPERTIES = (
    "ClusterName",
    "ClusterEndpoint",
    "ClusterCertificateAuthorityData",
    "Namespace",
    "RayServiceName",
    "ApplicationName",
    "ModelId",
    "KvBackend",
    "ExpectedGpuNodes",
)


class ReadinessError(Exception):
    """A terminal failure: the deploy should stop now, with this message as the reason."""


class KvLoadFailed(ReadinessError):
    """The P/D endpoint answered the probe with HTTP 500 once serving: a failed KV load."""


# How a P/D endpoint that serves answers a request whose KV cache decode could not load: vLLM
# 0.26's default kv_load_failure_policy "fail" (vllm/config/kv_transfer.py KVTransferConfig)
# ends the request with finish reason "error", its OpenAI layer raises GenerationError, HTTP
# 500 (vllm/entrypoints/generate/base/serving.py _raise_if_error; GenerationError.status_code
# in entrypoints/openai/engine/protocol.py), and Ray Serve LLM 2.58's ingress relays the code
# (ray/llm/_internal/serve/core/ingress/ingress.py, OpenAIHTTPException). 502/503/504 are what
# the API server's proxy and Serve answer while no replica is reachable or free: pending.
KV_LOAD_FAILED_STATUS = 500
KV_LOAD_FAILED = "KV transfer failed"


# --- configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Process-level knobs from the environment (the only place this module reads it)."""

    poll_budget_seconds: float = DEFAULT_POLL_BUDGET_SECONDS
    log_level: str = "INFO"


def read_settings(env: Mapping[str, str] | None = None) -> Settings:
    """``POLL_BUDGET_SECONDS`` (default 180): how long one poll may spend on API calls before
    handing over to the next poll; keep the Lambda timeout >= budget + 2 minutes.
    ``LOG_LEVEL`` (default INFO)."""
    env = os.environ if env is None else env
    budget_text = env.get("POLL_BUDGET_SECONDS", "")
    try:
        budget = float(budget_text) if budget_text else DEFAULT_POLL_BUDGET_SECONDS
    except ValueError as exc:
        raise ReadinessError(
            f"POLL_BUDGET_SECONDS must be a number of seconds, got {budget_text!r}"
        ) from exc
    return Settings(
        poll_budget_seconds=max(10.0, budget),
        log_level=env.get("LOG_LEVEL", "INFO").upper(),
    )


@dataclass(frozen=True)
class Props:
    """The custom resource's ``ResourceProperties``: everything the check needs, nothing looked
    up elsewhere. ``ConfigHash`` and ``ServiceToken`` are accepted and ignored."""

    cluster_name: str
    endpoint: str
    ca_data: str
    namespace: str
    rayservice: str
    app_name: str
    model_id: str
    kv_backend: str
    expected_gpu_nodes: int
    serving_mode: str = "pd"  # optional property ServingMode: pd / aggregated
    # Optional property GpusPerWorker: the GPUs of one engine replica (tensorParallelSize),
    # which each worker pod requests.
    gpus_per_worker: int = 1
    # Optional property RayAuthSecret: the Secret with the Ray token the dashboard requires
    # (rayClusterConfig.authOptions.secretName); empty = the dashboard takes no token.
    ray_auth_secret: str = ""
    # Optional property MetricsPort: the Ray pods' Prometheus port (KubeRay's ``metrics``).
    metrics_port: int = METRICS_PORT
    # Optional property KvBytesPerToken: the model's KV bytes per prompt token
    # (ray_pd_eks/kv_shapes.py), the byte check's floor; 0 = unknown, the generic floor.
    kv_bytes_per_token: int = 0
    # Optional property GpuWorkersPrivileged: whether the GPU workers run privileged
    # (gpuWorkerPrivileged with EFA); "false" adds the setting to EFA failures' messages.
    workers_privileged: bool = True
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    query_interval_seconds: int = DEFAULT_QUERY_INTERVAL_SECONDS

    @property
    def physical_id(self) -> str:
        return f"{self.cluster_name}/{self.namespace}/{self.rayservice}"

    @property
    def serve_service(self) -> str:
        return f"{self.rayservice}-serve-svc"

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        missing = [key for key in REQUIRED_PROPERTIES if properties.get(key) in (None, "")]
        if missing:
            raise ReadinessError(
                "ResourceProperties missing " + ", ".join(missing) + "; the readiness construct "
                "must pass all of " + ", ".join(REQUIRED_PROPERTIES)
            )
        endpoint = str(properties["ClusterEndpoint"])
        if not endpoint.startswith("https://"):
            raise ReadinessError(
                f"ClusterEndpoint must be the cluster's https:// endpoint, got {endpoint!r}"
            )
        kv_backend = str(properties["KvBackend"]).upper()
        if kv_backend not in KV_BACKENDS:
            raise ReadinessError(
                f"KvBackend must be one of {', '.join(KV_BACKENDS)}, got "
                f"{properties['KvBackend']!r}"
            )
        serving_mode = str(properties.get("ServingMode") or "pd")
        if serving_mode not in SERVING_MODES:
            raise ReadinessError(
                f"ServingMode must be one of {', '.join(SERVING_MODES)}, got {serving_mode!r}"
            )
        return cls(
            cluster_name=str(properties["ClusterName"]),
            endpoint=endpoint,
            ca_data=str(properties["ClusterCertificateAuthorityData"]),
            namespace=str(properties["Namespace"]),
            rayservice=str(properties["RayServiceName"]),
            app_name=str(properties["ApplicationName"]),
            model_id=str(properties["ModelId"]),
            kv_backend=kv_backend,
            expected_gpu_nodes=_positive_int(properties, "ExpectedGpuNodes", None),
            serving_mode=serving_mode,
            gpus_per_worker=_positive_int(properties, "GpusPerWorker", 1),
            ray_auth_secret=str(properties.get("RayAuthSecret") or ""),
            metrics_port=_positive_int(properties, "MetricsPort", METRICS_PORT),
            kv_bytes_per_token=_non_negative_int(properties, "KvBytesPerToken"),
            workers_privileged=str(properties.get("GpuWorkersPrivileged") or "true").lower()
            != "false",
            timeout_seconds=_positive_int(properties, "TimeoutSeconds", DEFAULT_TIMEOUT_SECONDS),
            query_interval_seconds=_positive_int(
                properties, "QueryIntervalSeconds", DEFAULT_QUERY_INTERVAL_SECONDS
            ),
        )


def _non_negative_int(properties: Mapping[str, Any], key: str) -> int:
    """An optional whole number >= 0 (absent = 0)."""
    raw = properties.get(key)
    if raw in (None, ""):
        return 0
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if value < 0:
        raise ReadinessError(f"{key} must be a whole number >= 0, got {raw!r}")
    return value


def _positive_int(properties: Mapping[str, Any], key: str, default: int | None) -> int:
    # CloudFormation delivers every property as a string; tests and direct calls may pass ints.
    return props_helpers.positive_int(properties, key, error=ReadinessError, default=default)


# --- dependencies (replaced in tests) ------------------------------------------------------


def make_client(props: Props, *, sleep: Callable[[float], None] = time.sleep) -> kube.KubeClient:
    """A client authenticated as the Lambda's own IAM role (its EKS access entry)."""
    return kube.KubeClient(
        props.endpoint,
        props.ca_data,
        lambda: kube.eks_token(props.cluster_name),
        sleep=sleep,
    )


client_factory: Callable[[Props], kube.KubeClient] = make_client
clock: Callable[[], float] = time.time
# Waits between re-reads of the NIXL counters (tests replace it with a no-op).
counter_sleep: Callable[[float], None] = time.sleep


# --- the Provider contract -----------------------------------------------------------------


def on_event(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Start (Create/Update) or end (Delete) the wait; no Kubernetes call happens here.

    On an Update that CloudFormation sends while rolling the stack back, answer at once with
    the current physical id and the previous Data (see :func:`rollback_response`): the
    rollback must not wait on, or be failed by, the very state that made the update fail.
    This function runs outside the VPC, so it reaches CloudFormation directly.
    """
    request_type = event.get("RequestType")
    if request_type == "Delete":
        # Never block `cdk destroy`, and never change the id on Delete (the Provider rejects it).
        LOG.info("Delete %s: nothing to wait for", event.get("PhysicalResourceId"))
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "")}
    if request_type == "Update" and stack_rolling_back(event):
        response = rollback_response(event)
        LOG.info(
            "Update during UPDATE_ROLLBACK_IN_PROGRESS: answering at once with %s",
            json.dumps(response["Data"], sort_keys=True),
        )
        return response
    props = Props.from_properties(event.get("ResourceProperties") or {})
    LOG.info("%s %s: readiness wait starts", request_type, props.physical_id)
    current = str(event.get("PhysicalResourceId") or "")
    # Keep the current id (it carries the last Data) while it names the same RayService.
    physical_id = current if _base_id(current) == props.physical_id else props.physical_id
    return {"PhysicalResourceId": physical_id, STARTED_AT_KEY: str(int(clock()))}


def is_complete(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """One poll: ``IsComplete`` False while pending, Data when done; raises on failure.

    When done, the physical id becomes ``<cluster>/<namespace>/<rayservice>?<Data>`` (see
    :func:`physical_id_with_data`): a changed id makes CloudFormation treat the update as a
    replacement, so a later rollback keeps the previous resource with its previous Data, and a
    rollback Update can still read the previous Data back from the id it is sent.
    """
    if event.get("RequestType") == "Delete":
        return {"IsComplete": True}
    if event.get(ROLLBACK_KEY) == "true":
        return {"IsComplete": True, "Data": dict(event.get("Data") or {})}
    settings = read_settings()
    LOG.setLevel(settings.log_level)
    props = Props.from_properties(event.get("ResourceProperties") or {})
    now = clock()
    started = _started_at(event, now)
    budget = settings.poll_budget_seconds
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining_ms):
        budget = min(budget, remaining_ms() / 1000.0 - SLOWEST_CALL_SECONDS)
    try:
        outcome = check(
            props,
            client_factory(props),
            now=now,
            budget_ends=time.monotonic() + max(0.0, budget),
            started=started,
        )
    except ReadinessError as exc:
        message = _one_line(f"Readiness check failed for {props.physical_id}: {exc}")
        LOG.error("poll: FAILED: %s", message)
        raise ReadinessError(message) from None
    except (kube.KubeAuthError, kube.KubeTlsError) as exc:
        message = _one_line(f"Readiness check failed for {props.physical_id}: {exc}")
        LOG.error("poll: FAILED: %s", message)
        raise ReadinessError(message) from None

    if outcome.complete:
        LOG.info("poll: COMPLETE: %s", json.dumps(outcome.data, sort_keys=True))
        return {
            "IsComplete": True,
            "Data": outcome.data,
            "PhysicalResourceId": physical_id_with_data(props.physical_id, outcome.data),
        }

    # Measured when this poll ends, not when it began: the decision is whether the *next*
    # poll could still end before the deadline.
    elapsed = max(now, clock()) - started
    give_up_after = _give_up_after(props, settings)
    LOG.info(
        "poll: pending %s (%.0f s of %d s): %s",
        outcome.pending_check,
        elapsed,
        props.timeout_seconds,
        outcome.status,
    )
    if elapsed >= give_up_after:
        message = _one_line(
            f"Readiness check timed out for {props.physical_id} after {elapsed / 60:.0f} min: "
            f"still failing: {outcome.pending_check}; last status: {outcome.status}"
        )
        LOG.error("poll: FAILED: %s", message)
        raise ReadinessError(message)
    return {"IsComplete": False}


def _started_at(event: Mapping[str, Any], now: float) -> float:
    return props_helpers.started_at(event, STARTED_AT_KEY, now)


def _give_up_after(props: Props, settings: Settings) -> float:
    """Seconds after the start past which a poll that ends still pending raises our own message.

    The deadline is ``TimeoutSeconds`` (``readinessTimeoutMinutes``, at most 55), which the
    construct keeps below both the Provider's total timeout and CloudFormation's one-hour limit
    on a custom resource, so neither ends the wait with a bare "Operation timed out" (issue 24
    item 10). The next poll starts one query interval after this one ends and lasts at most
    ``MAX_POLL_SECONDS`` (the polling function's timeout), so a poll that ends later than
    ``timeout - (interval + MAX_POLL_SECONDS)`` is the last one that can end before the
    deadline: it raises. Never before half the timeout (short test timeouts).
    """
    del settings  # the budget is inside MAX_POLL_SECONDS
    margin = props.query_interval_seconds + MAX_POLL_SECONDS
    return max(props.timeout_seconds / 2, props.timeout_seconds - margin)


def _one_line(text: str) -> str:
    return props_helpers.one_line(text, MAX_REASON_CHARS)


# --- rollbacks ---------------------------------------------------------------------------

ROLLBACK_KEY = "ReadinessRollback"  # top-level, so it never leaks into the resource's Data
# Data keys a rollback answer reproduces: every key a successful check returns. ServeService
# derives from the properties; the others travel in the physical id.
DATA_KEYS = (
    "GpuNodes",
    "AppStatus",
    "PrefillNode",
    "DecodeNode",
    "PlacementMethod",
    "Models",
    "CompletionSample",
    "KvBackend",
    "KvProvider",
    "KvTransfer",
    "IntegrityProbe",
    "RayTokenEnforced",
    "ServeService",
)
ID_DATA_KEYS = tuple(k for k in DATA_KEYS if k != "ServeService")
# CloudFormation caps a physical id at 1 KiB and the whole response at 4 KiB; with Data values
# of at most MAX_DATA_VALUE_CHARS each, 700 characters keep the response under that.
MAX_PHYSICAL_ID_CHARS = 700
NOT_RECHECKED = "unknown: not re-checked while the stack rolled back"


def cloudformation_client() -> Any:
    """boto3's CloudFormation client (imported here: the project CLI imports this module)."""
    boto3 = importlib.import_module("boto3")
    config = importlib.import_module("botocore.config").Config(
        connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"}
    )
    return boto3.client("cloudformation", config=config)


def stack_rolling_back(event: Mapping[str, Any], cloudformation: Any = None) -> bool:
    """Whether the event's stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (pd_lambda.rollback: one
    DescribeStacks on the event's own StackId, the only stack the role may describe).

    CloudFormation's rollback Update looks like any other Update (old and new properties
    swapped), so the stack's status is the only way to tell.
    """
    return rollback.stack_rolling_back(
        event, cloudformation, make_client=lambda: cloudformation_client()
    )


def rollback_response(event: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to a rollback Update: the current physical id and the Data of the last
    successful check, decoded from that id, with no Kubernetes call. Keys the id does not
    carry (an id written before it carried Data) say they were not re-checked."""
    current = str(event.get("PhysicalResourceId") or "")
    carried = data_from_physical_id(current)
    properties = event.get("ResourceProperties") or {}
    data = {key: carried.get(key, NOT_RECHECKED) for key in ID_DATA_KEYS}
    data["ServeService"] = (
        f"{properties.get('RayServiceName', '')}-serve-svc.{properties.get('Namespace', '')}"
        f":{SERVE_PORT}"
    )
    return {"PhysicalResourceId": current, "Data": data, ROLLBACK_KEY: "true"}


def _base_id(physical_id: str) -> str:
    return physical_id.partition("?")[0]


def physical_id_with_data(base: str, data: Mapping[str, str]) -> str:
    """``<base>?<url-encoded Data>``, at most ``MAX_PHYSICAL_ID_CHARS``: the longest value is
    shortened (ending in "...") until it fits, so the id and the whole response stay within
    CloudFormation's limits whatever the node names or reasons."""
    values = {key: str(data.get(key, "")) for key in ID_DATA_KEYS}
    while True:
        physical_id = f"{base}?{urllib.parse.urlencode(values)}"
        if len(physical_id) <= MAX_PHYSICAL_ID_CHARS:
            return physical_id
        longest = max(values, key=lambda key: len(values[key]))
        if len(values[longest]) <= 3:
            return base
        keep = max(0, len(values[longest]) - max(16, len(physical_id) - MAX_PHYSICAL_ID_CHARS))
        values[longest] = values[longest][: max(0, keep - 3)] + "..."


def data_from_physical_id(physical_id: str) -> dict[str, str]:
    _, _, query = physical_id.partition("?")
    return {k: v for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)}


# --- the checks ----------------------------------------------------------------------------


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
        rs_json = _get_rayservice(client, props)
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

    dashboard = kube.RayDashboard(
        client, ns, rs, port=DASHBOARD_PORT, token_secret=props.ray_auth_secret or None
    )
    if late := out_of_budget("placement"):
        return late
    serve_json, serve_error = _serve_applications(dashboard)
    place = checks.placement(
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
        data = _aggregated_data(props, nodes, state, place, models, probe.answer)
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

    if place.method == "serve-replicas":
        prefill_node = ",".join(place.prefill_nodes)
        decode_node = ",".join(place.decode_nodes)
    else:
        prefill_node = decode_node = f"unknown (worker nodes {' '.join(place.worker_nodes)})"
    data = {
        "GpuNodes": ",".join(f"{n.name}:{n.zone}" for n in nodes.usable),
        "AppStatus": state.app_status or "",
        "PrefillNode": prefill_node,
        "DecodeNode": decode_node,
        "PlacementMethod": place.method,
        "Models": ",".join(models),
        "CompletionSample": " ".join(probe.answer.split())[:SAMPLE_CHARS],
        "KvBackend": kv.value(),
        "KvProvider": kv.provider_value(props.kv_backend),
        "KvTransfer": verdict.summary,
        "IntegrityProbe": probe.describe(),
        "RayTokenEnforced": token_enforced,
        "ServeService": f"{props.serve_service}.{ns}:{SERVE_PORT}",
    }
    return Outcome(complete=True, data={k: v[:MAX_DATA_VALUE_CHARS] for k, v in data.items()})


@dataclass(frozen=True)
class KvProbeRun:
    """One KV integrity probe with the NIXL counters around it. ``pending`` (with
    ``pending_check``) when it could not be judged yet (an engine or metrics endpoint not
    answering: try again); ``failure`` when it was judged and failed; else ``probe`` and, when
    counters were read, ``verdict`` say what passed."""

    probe: kvproof.ProbeResult | None = None
    verdict: kvproof.KvTransferVerdict | None = None
    pending: str = ""
    pending_check: str = ""
    failure: str = ""


def kv_probe(
    client: kube.KubeClient, props: Props, metric_pods: Sequence[str] | None
) -> KvProbeRun:
    """Read the NIXL counters of ``metric_pods`` (None: an aggregated app, no counters), send
    the integrity probe, and re-read the counters until the transfer shows (Ray exports them
    every 10 s). The one implementation behind the readiness check, the scheduled KV probe and
    the CLI's ``smoke``, ``efa-check`` and ``drill``."""
    before: kvproof.NixlCounters | None = None
    if metric_pods is not None:
        before, status = read_nixl_counters(client, props, metric_pods)
        if before is None:
            return KvProbeRun(pending=status, pending_check="kv-counters")
    try:
        probe, status = _chat_completion(
            client, props, kvproof.new_code(), kv_transfer=metric_pods is not None
        )
    except KvLoadFailed as exc:
        return KvProbeRun(failure=str(exc))
    if probe is None:
        return KvProbeRun(pending=status, pending_check="chat-completion")
    if failure := kvproof.probe_failure(probe):
        return KvProbeRun(probe=probe, failure=failure)
    if metric_pods is None or before is None:
        return KvProbeRun(probe=probe)
    verdict = None
    for attempt in range(COUNTER_READS):
        if attempt:
            counter_sleep(COUNTER_WAIT_SECONDS)
        after, status = read_nixl_counters(client, props, metric_pods)
        if after is None:
            return KvProbeRun(probe=probe, pending=status, pending_check="kv-counters")
        verdict = kvproof.transfer_verdict(
            before, after, probe.prompt_tokens, props.kv_bytes_per_token
        )
        if (after.transfers or 0.0) > (before.transfers or 0.0):
            break
    assert verdict is not None
    return KvProbeRun(probe=probe, verdict=verdict, failure=verdict.failure)


# What a failed NIXL memory registration leaves in Serve's message: vLLM 0.26 registers the KV
# cache at engine start (nixl/base_worker.py, register_kv_caches -> nixl_wrapper.
# register_memory), and NIXL 1.3.1's Python API raises the binding's nixlBackendError
# (NIXL_ERR_BACKEND) when the LIBFABRIC plugin's fi_mr_reg fails ("Failed to register memory
# on rail", "fi_mr_reg failed" in libplugin_LIBFABRIC.so).
NIXL_REGISTRATION_SIGNS = ("nixlBackendError", "NIXL_ERR_BACKEND", "register_memory", "fi_mr_reg")


def _nixl_registration_failed(message: str) -> bool:
    return any(sign in (message or "") for sign in NIXL_REGISTRATION_SIGNS)


def efa_privilege_hint(props: Props) -> str:
    """What to add to a failure of the EFA path when the GPU workers run unprivileged: the
    setting that restores the default. Empty when they run privileged or without EFA."""
    if props.workers_privileged or props.kv_backend != "LIBFABRIC" or props.serving_mode != "pd":
        return ""
    return (
        "; the GPU workers run without privileged (gpuWorkerPrivileged=false), and NIXL may "
        "fail to register GPU memory with EFA without it (libfabric's fi_mr_reg pins it): "
        f"restore the default with {set_hint('gpuWorkerPrivileged', 'true')}, then redeploy"
    )


def kv_load_failure(props: Props, where: str, reason: str) -> str:
    """The message of a probe answered with HTTP 500 by a serving P/D app."""
    return (
        f"{KV_LOAD_FAILED}: {where} answered HTTP {KV_LOAD_FAILED_STATUS} to the KV integrity "
        f"probe ({reason[:200]}) although the app is RUNNING and serves {props.model_id}: vLLM "
        "answers 500 when decode cannot load the prompt's KV cache from prefill "
        "(kv_load_failure_policy 'fail'); read the decode worker's log for the NIXL error, run "
        "python -m ray_pd_eks efa-check, and restart the decode worker pod (python -m "
        "ray_pd_eks drill decode-restart shows the way)" + efa_privilege_hint(props)
    )


def ray_token_enforced(dashboard: kube.RayDashboard) -> str:
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


def decode_metric_pods(place: checks.Placement, serve_json: Any, app_name: str) -> list[str]:
    """The pods whose metrics port carries the decode engines' NIXL counters: the worker pods
    of the RUNNING decode replicas (by node IP), else every running worker pod (prefill's
    engines count no pulls, so the sum is still decode's)."""
    ips = {
        r.node_ip
        for r in checks.serve_replicas(serve_json, app_name)
        if r.role == "decode" and r.state == "RUNNING" and r.node_ip
    }
    workers = [p for p in place.pods if p.role == "worker" and p.phase == "Running"]
    chosen = sorted(p.name for p in workers if p.ip in ips)
    return chosen or sorted(p.name for p in workers)


def read_nixl_counters(
    client: kube.KubeClient, props: Props, pods: Sequence[str]
) -> tuple[kvproof.NixlCounters | None, str]:
    """The NIXL counters summed over ``pods``, read from ``/metrics`` on the metrics port
    through the API server's pod proxy; None and why when a pod's metrics are unreadable."""
    if not pods:
        return None, "no running worker pod to read NIXL metrics from"
    texts: dict[str, str] = {}
    for pod in pods:
        where = f"GET /metrics of pod {pod}:{props.metrics_port}"
        try:
            texts[pod] = client.pod_proxy(
                props.namespace, pod, props.metrics_port, "metrics", retries=1
            )
        except kube.KubeAuthError:
            raise
        except kube.KubeApiError as exc:
            return None, f"{where}: {exc.reason or exc}"
    return kvproof.NixlCounters.from_texts(texts), f"read NIXL metrics of {', '.join(pods)}"


def backend_failure(kv_backend: str, kv: checks.KvBackendReport) -> str | None:
    """No evidence is no proof: every engine must show the configured NIXL backend, and with
    LIBFABRIC the ``efa`` provider (kvproof.provider_failure)."""
    looked_at = kv.looked_at()
    wrong = [
        f"{label}: {backend}" for label, backend in kv.backends if backend != kv_backend.upper()
    ]
    if not kv.backends or wrong:
        found = "; ".join(wrong) or f"unknown: {kv.reason or 'no worker logs read'}"
        return (
            f"no evidence that NIXL instantiated {kv_backend.upper()} ({found}); looked at "
            f"{looked_at}: the deploy cannot prove which transport moves the KV cache; check "
            "the workers' logs for 'Backend ... was instantiated' (python -m ray_pd_eks "
            "efa-check)"
        )
    return kvproof.provider_failure(kv_backend, dict(kv.providers), looked_at)


def _aggregated_data(
    props: Props, nodes: Any, state: Any, place: Any, models: list[str], sample: str
) -> dict[str, str]:
    """Data of an aggregated app: the same keys as PD (stack outputs read them), saying that
    there is no prefill/decode split and no KV transfer."""
    engines = (
        ",".join(place.engine_nodes) or f"unknown (worker nodes {' '.join(place.worker_nodes)})"
    )
    data = {
        "GpuNodes": ",".join(f"{n.name}:{n.zone}" for n in nodes.usable),
        "AppStatus": state.app_status or "",
        "PrefillNode": f"aggregated: engines on {engines}",
        "DecodeNode": f"aggregated: engines on {engines}",
        "PlacementMethod": place.method,
        "Models": ",".join(models),
        "CompletionSample": " ".join(sample.split())[:SAMPLE_CHARS],
        "KvBackend": "none (aggregated: no KV transfer)",
        "KvProvider": "none (aggregated: no KV transfer)",
        "KvTransfer": "none (aggregated: no KV transfer)",
        "ServeService": f"{props.serve_service}.{props.namespace}:{SERVE_PORT}",
    }
    return {k: v[:MAX_DATA_VALUE_CHARS] for k, v in data.items()}


def _get_rayservice(client: kube.KubeClient, props: Props) -> dict[str, Any]:
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


def terminal_failure(
    props: Props,
    nodes: checks.GpuNodes,
    state: checks.RayServiceState,
    problems: list[checks.PodProblem],
    now: float,
    *,
    warnings: Sequence[checks.ObjectWarning] = (),
    started: float | None = None,
) -> str | None:
    """The first state that waiting cannot fix, as a message; None if there is none.

    The RayService's own verdicts (a terminal condition, ``DEPLOY_FAILED``) count only when its
    status describes the current spec (``status.observedGeneration`` equal to
    ``metadata.generation``): right after an update KubeRay may still show the previous
    generation's failure, which the new spec may well fix.

    An ``UNHEALTHY`` app is never terminal here; it stays pending and the timeout message
    reports it with Serve's message and the deployments' statuses. Ray Serve 2.58 turns every
    failure while a deployment is being deployed (replica start-up, health check, deployment
    actor) into ``DEPLOY_FAILED``, which fails at once; ``UNHEALTHY`` means a deployment that
    was HEALTHY (or scaling) lost replicas, which Serve's controller is already replacing, or
    the controller met an internal error (``DeploymentStatusInfo.handle_transition`` in
    ``ray/serve/_private/common.py``). How long
    it has been unhealthy is not knowable: KubeRay v1.7's ``ray.io/v1`` ``AppStatus`` holds only
    ``status``, ``message`` and ``serveDeploymentStatuses`` (``healthLastUpdateTime`` exists only
    in the deprecated ``v1alpha1`` schema, and the v1.7 controller sets it nowhere), and a
    Provider's ``is_complete`` keeps nothing between polls but the event. A replica that
    crashes its pod is caught by the pod checks below (``CrashLoopBackOff``).

    ``warnings`` are the RayService's and its RayClusters' Warning events; one whose reason says
    the API server refused an object (``checks.OBJECT_FAILURE_REASONS``) is terminal once it has
    repeated and was last seen after ``started`` (the wait's start), so neither a one-off
    refusal nor an event left by an earlier deploy fails this one.
    """
    app = props.app_name
    if state.generation_current:
        if state.terminal_reason:
            return state.terminal_message
        if state.app_status == "DEPLOY_FAILED":
            registration = _nixl_registration_failed(state.app_message)
            return (
                f"Serve app {app} is DEPLOY_FAILED: {state.app_message or 'no message'}"
                + _deployment_detail(state)
                + (
                    efa_privilege_hint(props)
                    if registration
                    else "; fix serveConfigV2 or the image, then redeploy"
                )
            )
    if not state.running:
        for warning in warnings:
            if _object_warning_is_terminal(warning, started):
                return (
                    f"KubeRay could not create the Ray cluster: {warning.describe()}; the API "
                    "server refused it (Pod Security admission of the namespace, a "
                    "ResourceQuota or LimitRange, or an admission webhook) or the spec is "
                    "invalid: fix the policy or the RayService, then redeploy"
                )
    for problem in problems:
        if problem.reason == "Unschedulable":
            if not _unschedulable_is_terminal(problem, nodes, now):
                continue
            return (
                f"Ray pod cannot be scheduled: {problem.describe()}; compare the pod's requests "
                f"({checks.GPU_RESOURCE}, {checks.EFA_RESOURCE}, cpu, memory) with the nodes' "
                "allocatable resources and the node selector"
            )
        if problem.reason in checks.IMAGE_PULL_REASONS:
            # ErrImagePull is one failed attempt, which the kubelet retries; a pull that keeps
            # failing spends its time in ImagePullBackOff between attempts. Without a pull
            # failure event there is no telling how long it has failed: keep waiting.
            if problem.reason != "ImagePullBackOff" or problem.since is None:
                continue
            failing_for = now - problem.since.timestamp()
            if failing_for < IMAGE_PULL_GRACE_SECONDS:
                continue
            return (
                f"Ray pod cannot pull its image for {failing_for:.0f} s (first failure "
                f"{problem.since.isoformat()}): {problem.describe()}; check the image URI and "
                "tag, that the node role may pull it, and the registry's throttling"
            )
        hint = {
            "CrashLoopBackOff": (
                f"read its previous log: kubectl logs -n {props.namespace} {problem.pod} "
                f"-c {problem.container or '<container>'} --previous"
            ),
            "CreateContainerConfigError": "a referenced Secret, ConfigMap or key is missing",
        }.get(problem.reason, "")
        return f"Ray pod stuck: {problem.describe()}" + (f"; {hint}" if hint else "")
    return None


def _object_warning_is_terminal(warning: checks.ObjectWarning, started: float | None) -> bool:
    if warning.reason not in checks.OBJECT_FAILURE_REASONS:
        return False
    if warning.count < OBJECT_WARNING_MIN_COUNT and not warning.reason.startswith("Invalid"):
        return False
    if started is None or warning.last_seen is None:
        return started is None
    return warning.last_seen.timestamp() >= started


# The project CLI's `status` called this before it was public; keep the old name working.


def _unschedulable_is_terminal(
    problem: checks.PodProblem, nodes: checks.GpuNodes, now: float
) -> bool:
    """Unschedulable is normal while nodes join and device plugins start; it is final once the
    scheduler still refuses a GPU pod well after every expected GPU node was usable, or a CPU
    pod after the grace period."""
    if problem.observed_at is None:
        return False
    if problem.requests_gpu:
        ready_since = nodes.ready_since
        if not nodes.ok or ready_since is None:
            return False
        return (problem.observed_at - ready_since).total_seconds() >= UNSCHEDULABLE_GRACE_SECONDS
    since = problem.since or problem.observed_at
    return now - since.timestamp() >= UNSCHEDULABLE_GRACE_SECONDS


def _deployment_detail(state: checks.RayServiceState) -> str:
    bad = [
        f"{d.name}={d.status}" + (f" ({d.message[:300]})" if d.message else "")
        for d in state.deployments
        if d.status != "HEALTHY"
    ]
    return f"; deployments: {'; '.join(bad)}" if bad else ""


def _serve_applications(dashboard: kube.RayDashboard) -> tuple[dict[str, Any] | None, str]:
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


def _chat_completion(
    client: kube.KubeClient, props: Props, code: str, *, kv_transfer: bool = False
) -> tuple[kvproof.ProbeResult | None, str]:
    """Send the KV integrity probe (one attempt: a completion is never sent twice in a poll);
    the result when the engine answered with text, else None and why (the next poll retries).

    ``kv_transfer`` (a P/D app, called once it serves its models): HTTP 500 is a failed KV
    load (``KV_LOAD_FAILED_STATUS``), raised at once as :class:`KvLoadFailed`."""
    where = f"POST /v1/chat/completions via {props.serve_service}:{SERVE_PORT}"
    try:
        _, body = client.service_proxy(
            props.namespace,
            props.serve_service,
            SERVE_PORT,
            "v1/chat/completions",
            method="POST",
            json_body=kvproof.probe_request(props.model_id, code),
            timeout=CHAT_TIMEOUT_SECONDS,
            retries=0,
        )
        payload = json.loads(body)
    except kube.KubeAuthError:
        raise
    except kube.KubeApiError as exc:
        if kv_transfer and exc.status == KV_LOAD_FAILED_STATUS:
            raise KvLoadFailed(kv_load_failure(props, where, exc.reason or str(exc))) from None
        if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (404, 408, 429):
            raise ReadinessError(
                f"the endpoint rejected the KV integrity probe ({where} returned {exc.status}: "
                f"{exc.reason}); check maxModelLen holds {kvproof.PROBE_MIN_MODEL_LEN} tokens "
                "and the model's engine settings in serveConfigV2"
            ) from None
        return None, f"{where}: {exc.reason or exc}"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, f"{where}: response is not JSON"
    result = kvproof.judge_answer(code, payload)
    if not result.answer:
        return None, f"{where}: returned no text"
    return result, f"{where}: returned text"


def read_nixl_backends(
    dashboard: kube.RayDashboard,
    serve_json: Mapping[str, Any] | None,
    app_name: str,
    *,
    lines: int = LOG_LINES,
    max_files: int = LOG_FILES_PER_WORKER,
    head_bytes: int = LOG_HEAD_BYTES,
    deadline: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    fi_provider: str = "",
) -> checks.KvBackendReport:
    """Which NIXL backend each worker instantiated, read from its logs without exec.

    Uses the Ray dashboard's log API (through the head service proxy): the Serve replicas name
    the prefill/decode nodes and worker processes; without them, every alive worker node is
    read. Anything unreadable is reported as ``unknown: <reason>``, never as success; the
    caller decides (``backend_failure``: no evidence fails the deploy). With LIBFABRIC it also
    reads the libfabric provider NIXL chose (``kvproof.libfabric_provider``), which NIXL logs on
    the engine worker's stderr with ``NIXL_LOG_LEVEL=INFO``. When the worker pods set
    ``FI_PROVIDER`` (``fi_provider``, from ``checks.workers_fi_provider``) to ``efa``, the
    LIBFABRIC line alone is the evidence (``kvproof.implied_provider``): the chosen files'
    tails are still read for a provider line (a ``tcp`` one fails), but no file's beginning is
    read for it.

    Only the files of live processes count once the dashboard's actor list says which are
    alive (``checks.log_files_to_read``). Each file's last ``lines`` lines come first; NIXL
    logs both lines once, at engine start-up, so when a long-running engine's tail lacks them
    the reader reads the file's beginning (the oldest rotated piece if it rotated), at most
    ``head_bytes`` (``RayDashboard.read_log_head``). An engine whose beginning could not be
    read in full is listed in the report's ``unseen``.
    """
    try:
        have_replicas = bool(checks.nixl_targets(serve_json, app_name))
        ray_nodes = [] if have_replicas else dashboard.nodes()
        targets = checks.nixl_targets(serve_json, app_name, ray_nodes)
    except kube.RayAuthError:
        raise
    except kube.KubeApiError as exc:
        return checks.KvBackendReport(
            reason=f"Ray dashboard not readable via {dashboard.service}: {exc.reason or exc}"
        )
    if not targets:
        return checks.KvBackendReport(reason="the Ray dashboard lists no worker nodes")
    try:
        alive = dashboard.alive_actor_pids()
    except kube.RayAuthError:
        raise
    except kube.KubeApiError as exc:
        LOG.info("actor list unreadable, reading logs without liveness: %s", exc)
        alive = None
    backends: list[tuple[str, str]] = []
    providers: list[tuple[str, str]] = []
    unseen: list[str] = []
    sources: dict[str, str] = {}
    read_count = 0
    late = False
    for target in targets:
        try:
            files = dashboard.list_log_files(target.node_id)
        except kube.KubeApiError as exc:
            backends.append((target.label, f"unknown: cannot list logs ({exc.reason or exc})"))
            providers.append((target.label, f"unknown: cannot list logs ({exc.reason or exc})"))
            unseen.append(target.label)
            continue
        node_alive = None if alive is None else alive.get(target.node_id, set())
        chosen = checks.log_files_to_read(files, target, max_files, node_alive)
        found: str | None = None
        provider: str | None = None
        partial: list[str] = []  # why a file's start-up lines were not all read
        for filename in chosen:
            if deadline is not None and monotonic() > deadline:
                partial.append("poll budget used up while reading logs")
                late = True
                break
            try:
                text = dashboard.read_log(target.node_id, filename, lines=lines)
            except kube.KubeApiError as exc:
                partial.append(f"{filename} unreadable ({exc.reason or exc})")
                continue
            read_count += 1
            found = found or checks.nixl_backend(text)
            provider = provider or kvproof.libfabric_provider(text)
            head = checks.oldest_piece(files, filename)
            # A tail of fewer lines than asked for is the whole file (one fewer when the file
            # does not end in a newline: log_agent counts that last line too).
            whole_tail = head == filename and text.count("\n") < lines - 1
            if not _evidence_complete(found, provider, fi_provider) and not whole_tail:
                # The tail is not the whole file: read its beginning, where NIXL's lines are.
                if deadline is not None and monotonic() > deadline:
                    partial.append("poll budget used up while reading logs")
                    late = True
                    break
                try:
                    start, whole = dashboard.read_log_head(
                        target.node_id,
                        head,
                        max_bytes=head_bytes,
                        until=_completes(found, provider, fi_provider),
                    )
                except kube.KubeApiError as exc:
                    partial.append(f"{head} unreadable ({exc.reason or exc})")
                    continue
                read_count += 1
                found = found or checks.nixl_backend(start)
                provider = provider or kvproof.libfabric_provider(start)
                if not _evidence_complete(found, provider, fi_provider):
                    if head != filename:
                        partial.append(f"{filename} rotated: its oldest piece {head} starts later")
                    elif not whole:
                        partial.append(f"not within the first {head_bytes} bytes of {filename}")
            if found and target.label not in sources:
                sources[target.label] = filename
            if _evidence_complete(found, provider):
                break  # the tails of the other files are still read for a tcp provider line
        why = f" ({'; '.join(partial)})" if partial else ""
        note = f"no 'Backend ... was instantiated' line in {len(chosen)} log file(s){why}"
        provider_note = f"no 'Discovered <n> EFA|tcp devices' line in {len(chosen)} log file(s)"
        if found == "LIBFABRIC":  # only FI_PROVIDER=efa would have made the backend line enough
            provider_note += f", and FI_PROVIDER is {fi_provider or 'not efa on every worker pod'}"
        backends.append((target.label, found or f"unknown: {note} on {target.label}"))
        provider = provider or kvproof.implied_provider(found, fi_provider)
        if found == "LIBFABRIC" or not found:
            providers.append((target.label, provider or f"unknown: {provider_note}{why}"))
        if partial and not _evidence_complete(found, provider, fi_provider):
            unseen.append(target.label)
    return checks.KvBackendReport(
        backends=tuple(backends),
        sources=sources,
        providers=tuple(providers),
        files_read=read_count,
        out_of_budget=late,
        unseen=tuple(unseen),
    )


def _evidence_complete(backend: str | None, provider: str | None, fi_provider: str = "") -> bool:
    """UCX has no libfabric provider to find; LIBFABRIC needs the provider line too, unless the
    pods' FI_PROVIDER=efa makes the backend line the proof (``kvproof.implied_provider``)."""
    return bool(
        backend
        and (provider or backend != "LIBFABRIC" or kvproof.implied_provider(backend, fi_provider))
    )


def _completes(
    backend: str | None, provider: str | None, fi_provider: str = ""
) -> Callable[[str], bool]:
    """Whether a file's beginning, read so far, completes the evidence already found."""

    def enough(text: str) -> bool:
        return _evidence_complete(
            backend or checks.nixl_backend(text),
            provider or kvproof.libfabric_provider(text),
            fi_provider,
        )

    return enough


# --- the scheduled KV probe (kvProbeIntervalMinutes) ---------------------------------------

PROBE_NAMESPACE = "RayPdEks/KvProbe"
PROBE_METRICS = ("ProbeOk", "KvTransferStalled", "ProviderEfa", "ProviderUnknown")


def scheduled_probe(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """One KV probe on a schedule (EventBridge), reusing the readiness check's code: the
    integrity probe with the decode engines' NIXL counters around it and, with LIBFABRIC, the
    libfabric provider from the engines' logs. Publishes ``PROBE_METRICS`` in CloudWatch's
    embedded metric format (a log line the Lambda's log group turns into metrics: no
    ``PutMetricData`` call, so no route to CloudWatch and no IAM permission), and returns what
    it saw. Never raises: a failure is a ``ProbeOk`` of 0 with the reason logged.

    ``PROBE_PROPERTIES`` (environment) holds the readiness check's ResourceProperties."""
    settings = read_settings()
    LOG.setLevel(settings.log_level)
    props = Props.from_properties(json.loads(os.environ.get("PROBE_PROPERTIES") or "{}"))
    try:
        outcome = probe_outcome(props, client_factory(props))
    except (ReadinessError, kube.KubeApiError) as exc:
        outcome = {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": _one_line(str(exc))}
    if props.kv_backend != "LIBFABRIC" or props.serving_mode != "pd":
        outcome.pop("ProviderEfa", None)
        outcome.pop("ProviderUnknown", None)
    emit_metrics(props, outcome)
    return outcome


def probe_outcome(props: Props, client: kube.KubeClient) -> dict[str, Any]:
    """What one scheduled probe saw, as metric values plus ``Reason``/``Detail`` text."""
    state = checks.rayservice_state(_get_rayservice(client, props), props.app_name)
    if not state.running:
        return {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": state.summary()}
    ns = props.namespace
    dashboard = kube.RayDashboard(
        client,
        ns,
        props.rayservice,
        port=DASHBOARD_PORT,
        token_secret=props.ray_auth_secret or None,
    )
    serve_json, serve_error = _serve_applications(dashboard)
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{ns}/pods"), props.rayservice, state.cluster_names
    )
    place = checks.placement(pods, serve_json, props.app_name, serve_error=serve_error)
    pd = props.serving_mode == "pd"
    run = kv_probe(
        client, props, decode_metric_pods(place, serve_json, props.app_name) if pd else None
    )
    if run.pending:
        return {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": run.pending}
    stalled = int(
        run.verdict is not None
        and not run.verdict.ok
        and ("did not rise" in run.verdict.failure or "no NIXL transfer" in run.verdict.failure)
    )
    outcome: dict[str, Any] = {
        "ProbeOk": int(not run.failure),
        "KvTransferStalled": stalled,
        "Reason": run.failure,
        "Detail": run.probe.describe() if run.probe else "",
    }
    if run.verdict is not None:
        outcome["Detail"] += f"; {run.verdict.summary}"
    if pd and props.kv_backend == "LIBFABRIC":
        kv = read_nixl_backends(
            dashboard,
            serve_json,
            props.app_name,
            deadline=time.monotonic() + 60.0,
            fi_provider=checks.workers_fi_provider(pods),
        )
        outcome.update(provider_metrics(kv))
        outcome["Detail"] += f"; provider {kv.provider_value(props.kv_backend)}"
    return outcome


def provider_metrics(kv: checks.KvBackendReport) -> dict[str, int]:
    """``ProviderEfa`` and ``ProviderUnknown`` of one scheduled probe (LIBFABRIC).

    ``ProviderEfa`` is 1 only when every engine's own log shows the ``efa`` provider, and 0
    when one shows ``tcp``/``sockets``, instantiated UCX, or lacks the line although its log
    was read from its first line (nothing aged out: the engine never proved EFA). An engine
    whose start-up lines could not be read (its file rotated past them, they lie beyond the
    head read, the log API failed, the budget ran out: ``KvBackendReport.unseen``) is unknown:
    then ``ProviderEfa`` is left out, never 1, and ``ProviderUnknown`` is 1. A process keeps
    the provider it started with, and while its start-up lines were still there earlier probes
    judged them, so the ``ProviderNotEfa`` alarm keeps its state through missing data.
    """
    providers = dict(kv.providers)
    slow = [label for label, p in providers.items() if p in ("tcp", "sockets")]
    missing = [label for label, p in providers.items() if p != "efa" and label not in slow]
    unseen = int(not providers or any(label in kv.unseen for label in missing))
    if slow or kv.fallbacks("LIBFABRIC") or any(label not in kv.unseen for label in missing):
        return {"ProviderEfa": 0, "ProviderUnknown": unseen}
    if unseen:
        return {"ProviderUnknown": 1}
    return {"ProviderEfa": 1, "ProviderUnknown": 0}


def emit_metrics(
    props: Props, outcome: Mapping[str, Any], out: Callable[[str], None] = print
) -> None:
    """One CloudWatch embedded-metric-format line (dimension ``RayService``)."""
    names = [name for name in PROBE_METRICS if name in outcome]
    line = {
        "_aws": {
            "Timestamp": int(clock() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": PROBE_NAMESPACE,
                    "Dimensions": [["RayService"]],
                    "Metrics": [{"Name": name, "Unit": "Count"} for name in names],
                }
            ],
        },
        "RayService": props.rayservice,
        **{name: outcome[name] for name in names},
        "Reason": str(outcome.get("Reason", ""))[:MAX_REASON_CHARS],
        "Detail": str(outcome.get("Detail", ""))[:MAX_REASON_CHARS],
    }
    out(json.dumps(line, sort_keys=True))
