"""One run of the KV integrity probe (``kvproof``) against the deployed app: the decode
engines' NIXL counters read before it, the probe sent through the API server's service proxy,
the counters re-read until the transfer shows. The one implementation behind the readiness
check, the scheduled KV probe and the CLI's ``smoke``, ``efa-check`` and ``drill``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import kube
import kvproof
from placement import Placement, serve_replicas
from properties import SERVE_PORT, Props, ReadinessError
from terminal import efa_privilege_hint

# Ray's workers hand their metrics to the node's metrics agent every metrics_report_interval_ms
# (10 s by default), so a counter can lag the request that moved it: re-read for up to ~30 s.
COUNTER_READS = 6
COUNTER_WAIT_SECONDS = 5.0
# One attempt only: a 503 from a proxy without endpoints just means "next poll", and a single
# 45 s call keeps the poll inside the handler's SLOWEST_CALL_SECONDS.
CHAT_TIMEOUT_SECONDS = 45.0


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

# Waits between re-reads of the NIXL counters (tests replace it with a no-op).
counter_sleep: Callable[[float], None] = time.sleep


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


def decode_metric_pods(place: Placement, serve_json: Any, app_name: str) -> list[str]:
    """The pods whose metrics port carries the decode engines' NIXL counters: the worker pods
    of the RUNNING decode replicas (by node IP), else every running worker pod (prefill's
    engines count no pulls, so the sum is still decode's)."""
    ips = {
        r.node_ip
        for r in serve_replicas(serve_json, app_name)
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
