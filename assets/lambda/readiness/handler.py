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

This module holds the Lambda's entry points (``on_event``, ``is_complete``, and
``scheduled_probe`` for the scheduled KV probe), the environment and the clients they use. The
steps live beside it: ``steps`` (one poll's checks, in order), ``properties`` (the resource's
properties), ``terminal`` (what waiting cannot fix), ``placement`` (where the engines run),
``kv_probe`` (the integrity probe with the NIXL counters), ``nixl_logs`` (the backend and
provider from the engines' logs), ``report`` (the Data and the rollback answer); ``checks``,
``kvproof`` and ``kube`` are the pure verdicts, the probe's text and the Kubernetes client.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import checks
import kube
import ray_dashboard
from kv_probe import decode_metric_pods, kv_probe
from nixl_logs import KvBackendReport, read_nixl_backends
from pd_lambda import props as props_helpers
from pd_lambda import rollback
from placement import placement
from properties import DASHBOARD_PORT, Props, ReadinessError
from report import ROLLBACK_KEY, base_id, physical_id_with_data, rollback_response
from steps import check, get_rayservice, serve_applications

LOG = logging.getLogger("readiness")

STARTED_AT_KEY = "ReadinessStartedAt"  # top-level, so it never leaks into the resource's Data
DEFAULT_POLL_BUDGET_SECONDS = 180.0
# Worst case for one API call: 4 attempts x 10 s timeout + 7 s backoff. The poll reserves it so
# a call started just inside the budget still ends well before the Lambda timeout.
SLOWEST_CALL_SECONDS = 60
# The polling function's timeout (pd_constructs/readiness/readiness.py HANDLER_TIMEOUT): no poll
# lasts longer, whatever it does.
MAX_POLL_SECONDS = 300
MAX_REASON_CHARS = 1500


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
    physical_id = current if base_id(current) == props.physical_id else props.physical_id
    return {"PhysicalResourceId": physical_id, STARTED_AT_KEY: str(int(clock()))}


def is_complete(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """One poll: ``IsComplete`` False while pending, Data when done; raises on failure.

    When done, the physical id becomes ``<cluster>/<namespace>/<rayservice>?<Data>`` (see
    :func:`physical_id_with_data`): a changed id makes CloudFormation treat the update as a
    replacement, so a later rollback keeps the previous resource with its previous Data, and a
    rollback Update can still read the previous Data back from the id it is sent.
    """
    if settled := rollback.settled(event, ROLLBACK_KEY):
        return settled
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
    except (ReadinessError, kube.KubeAuthError, kube.KubeTlsError) as exc:
        raise props_helpers.poll_failed(
            ReadinessError,
            f"Readiness check failed for {props.physical_id}: {exc}",
            MAX_REASON_CHARS,
        ) from None

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
        raise props_helpers.poll_failed(
            ReadinessError,
            f"Readiness check timed out for {props.physical_id} after {elapsed / 60:.0f} min: "
            f"still failing: {outcome.pending_check}; last status: {outcome.status}",
            MAX_REASON_CHARS,
        )
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


def cloudformation_client() -> Any:
    """boto3's CloudFormation client (imported here: the project CLI imports this module)."""
    boto3 = importlib.import_module("boto3")
    config = importlib.import_module("botocore.config").Config(
        connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"}
    )
    return boto3.client("cloudformation", config=config)


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: cloudformation_client()
)


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
    state = checks.rayservice_state(get_rayservice(client, props), props.app_name)
    if not state.running:
        return {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": state.summary()}
    ns = props.namespace
    dashboard = ray_dashboard.RayDashboard(
        client,
        ns,
        props.rayservice,
        port=DASHBOARD_PORT,
        token_secret=props.ray_auth_secret or None,
    )
    serve_json, serve_error = serve_applications(dashboard)
    pods = checks.ray_pods(
        client.get_json(f"/api/v1/namespaces/{ns}/pods"), props.rayservice, state.cluster_names
    )
    place = placement(pods, serve_json, props.app_name, serve_error=serve_error)
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


def provider_metrics(kv: KvBackendReport) -> dict[str, int]:
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
