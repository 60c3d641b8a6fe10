"""The readiness checks on a running rehearsal plane, and what the rehearsal changes in the app.

``rehearse_checks(plane)`` asks a plane whose Serve app is up what the readiness check asks the
deployed one, with the readiness check's own parsing and verdict code (``probe``):

* ``serve``     the app is RUNNING (else Serve's own message, and the error line it holds);
* ``placement`` PD: one prefill and one decode replica, RUNNING, on two distinct worker nodes;
                aggregated: every engine replica RUNNING on a worker node;
* ``models``    ``GET /v1/models`` lists the app's model id;
* ``probe``     one chat completion with the readiness probe's prompt answers 200 with usage;
* ``kv``        PD: the decode node's NIXL transfer count rose during the probe and no
                transfer failed (``kvproof.transfer_verdict``, without the byte floor: a dummy
                model's KV is far smaller than the deployed model's);
* ``backend``   PD: the NIXL backend the workers' logs name is the adapted config's (UCX).

``rehearsal_serve_config`` is the rendered config as the plane serves it: ``plane``'s
``adapt_serve_config`` (the model, the KV backend and buffer, the GPU share), with a user's own
model loaded with its real weights, and the replicas capped to the plane's two worker nodes.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_pd_eks.cli.output import FAIL, OK, Finding
from ray_pd_eks.rehearse import probe
from ray_pd_eks.rehearse.plane import (
    HEAD_IP,
    SERVE_PORT,
    WORKER_IPS,
    ServingPlane,
    adapt_serve_config,
    engine_configs,
    metrics_port,
)

# Ray exports a node's metrics every 5 to 10 s: the counters are read again this many times,
# this far apart, until the probe's transfer shows.
METRICS_READS = 8
METRICS_EVERY_S = 3.0
# The probe's completion length (the readiness check's answer is judged elsewhere; dummy
# weights answer nonsense).
PROBE_MAX_TOKENS = 16
# An error line in Serve's message: ``ValueError: User-specified max_model_len ...``.
_VALIDATION_RE = re.compile(r"\d+ validation errors? for \w+$")
_ERROR_LINE_RE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*?:\s*\S")


def is_pd(serve: Mapping[str, Any]) -> bool:
    return "prefill_config" in serve["applications"][0]["args"]


# --- what the plane serves ----------------------------------------------------------------


@dataclass(frozen=True)
class Rehearsal:
    """The Serve config the plane deploys and each change beyond ``adapt_serve_config``."""

    serve_config: dict[str, Any]
    notes: tuple[str, ...]


def rehearsal_serve_config(
    serve: Mapping[str, Any],
    *,
    model_dir: Path,
    device: str,
    engines_per_gpu: int = 1,
    dummy_weights: bool = True,
) -> Rehearsal:
    """``adapt_serve_config``, then: with ``dummy_weights`` False (the user's own model
    directory) the rendered ``load_format`` back (real weights; a local directory has no
    Hugging Face revision, so none is pinned); each role's replicas capped so the engines fit
    the two worker nodes (PD: one prefill, one decode; aggregated: two engines)."""
    adapted = adapt_serve_config(
        serve, model_dir=model_dir, device=device, engines_per_gpu=engines_per_gpu
    )
    notes = []
    rendered = engine_configs(serve)
    for engine, original in zip(engine_configs(adapted), rendered, strict=True):
        kwargs = engine["engine_kwargs"]
        if not dummy_weights:
            load_format = original["engine_kwargs"].get("load_format")
            if load_format is None:
                kwargs.pop("load_format", None)
            else:
                kwargs["load_format"] = load_format
    if not dummy_weights and any("revision" in e["engine_kwargs"] for e in rendered):
        notes.append("modelRevision not pinned: a local model directory has no revision")
    pd = is_pd(serve)
    cap = 1 if pd else len(WORKER_IPS)
    engines = engine_configs(adapted)
    roles = ("prefill", "decode") if pd else ("engine",) * len(engines)
    for role, engine in zip(roles, engines, strict=True):
        deployment = engine.setdefault("deployment_config", {})
        autoscaling = deployment.get("autoscaling_config") or {}
        places = [("num_replicas", deployment)]
        places += [(k, autoscaling) for k in ("min_replicas", "initial_replicas", "max_replicas")]
        for key, where in places:
            value = where.get(key)
            if isinstance(value, int) and value > cap:
                where[key] = cap
                notes.append(f"{role} {key} {value} -> {cap} (two worker nodes here)")
    return Rehearsal(adapted, tuple(dict.fromkeys(notes)))


def kv_backends(serve: Mapping[str, Any]) -> set[str]:
    """The NIXL backends a (adapted) Serve config names."""
    found: set[str] = set()
    for engine in engine_configs(serve):
        kv = engine.get("engine_kwargs", {}).get("kv_transfer_config") or {}
        found.update(
            str(b) for b in (kv.get("kv_connector_extra_config") or {}).get("backends", [])
        )
    return found


# --- Serve's state --------------------------------------------------------------------------


def app_report(serve_json: Mapping[str, Any] | None, app_name: str) -> tuple[str | None, str]:
    """(status, message) of the app: Serve's application message, then the message of each
    deployment that is not HEALTHY (where a replica's constructor error, vLLM's, lands)."""
    app = ((serve_json or {}).get("applications") or {}).get(app_name) or {}
    parts = [str(app.get("message") or "").strip()]
    for name, deployment in sorted((app.get("deployments") or {}).items()):
        message = str(deployment.get("message") or "").strip()
        if message and deployment.get("status") != "HEALTHY":
            parts.append(f"{name} ({deployment.get('status')}): {message}")
    return app.get("status"), "\n".join(p for p in parts if p)


def failure_cause(message: str) -> str:
    """The line of Serve's message that says what went wrong: the last ``...Error: ...`` line
    (vLLM's exception, at the end of the traceback Serve keeps), else the last line. A
    pydantic ``validation error for ModelConfig`` line gets its first error's sentence (vLLM's
    ``User-specified max_model_len (65536) is greater than the derived max_model_len ...``)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if _ERROR_LINE_RE.match(line)]
    if not lines:
        return ""
    index = errors[-1] if errors else len(lines) - 1
    cause = lines[index]
    if _VALIDATION_RE.search(cause) and index + 1 < len(lines):
        detail = lines[index + 1].removeprefix("Value error, ")
        cause = f"{cause}: {detail.split('. ', 1)[0].rstrip('.')}"
    return cause[:600]


def wait_for_app(
    plane: ServingPlane,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_status: Callable[[str], None] = lambda _: None,
    every_s: float = 3.0,
) -> tuple[str | None, str]:
    """Serve's (status, message) once the app is RUNNING or DEPLOY_FAILED, or when
    ``timeout_s`` has passed (the last answer then)."""
    deadline = clock() + timeout_s
    status: str | None = None
    message = ""
    while True:
        try:
            status, message = app_report(
                plane.dashboard("api/serve/applications/"), plane.app.app_name
            )
        except (urllib.error.URLError, OSError, ValueError) as exc:
            status, message = None, f"the dashboard did not answer: {exc}"
        on_status(status or "not deployed yet")
        if status in ("RUNNING", "DEPLOY_FAILED") or clock() >= deadline:
            return status, message
        sleep(every_s)


# --- the checks -----------------------------------------------------------------------------


def _placement(engines: probe.Engines, pd: bool) -> Finding:
    def where(role: str) -> str:
        return ", ".join(sorted(engines.ips(role))) or "nowhere"

    not_running = [
        f"{r.deployment} {r.state}"
        for r in engines.replicas
        if r.role in ("prefill", "decode", "engine") and r.state != "RUNNING"
    ]
    if not_running:
        return Finding(FAIL, "placement", f"replicas not RUNNING: {', '.join(not_running)}")
    if pd:
        prefill, decode = engines.ips("prefill"), engines.ips("decode")
        if not prefill or not decode:
            return Finding(
                FAIL,
                "placement",
                f"prefill on {where('prefill')}, decode on {where('decode')}: the PD app needs "
                "both engines",
            )
        if prefill & decode:
            return Finding(
                FAIL,
                "placement",
                f"prefill and decode share {', '.join(sorted(prefill & decode))}: the KV cache "
                "would not cross nodes (on EKS: GPU nodes)",
            )
        return Finding(
            OK, "placement", f"prefill on {where('prefill')}, decode on {where('decode')}"
        )
    if not engines.ips("engine"):
        return Finding(FAIL, "placement", "no engine replica in Serve's applications API")
    count = sum(r.role == "engine" for r in engines.replicas)
    return Finding(OK, "placement", f"{count} engine replica(s) on {where('engine')}")


def _models(base: str, model_id: str) -> Finding:
    try:
        status, text = probe.http(f"{base}/v1/models", timeout=60)
    except (urllib.error.URLError, OSError) as exc:
        return Finding(FAIL, "models", f"GET /v1/models: {exc}")
    try:
        ids = [str(m.get("id")) for m in json.loads(text).get("data") or []]
    except (ValueError, AttributeError):
        ids = []
    if status == 200 and model_id in ids:
        return Finding(OK, "models", f"/v1/models lists {model_id}")
    return Finding(
        FAIL, "models", f"GET /v1/models: HTTP {status}, lists {ids or 'nothing'}, not {model_id}"
    )


def _probe(result: Mapping[str, Any], pd: bool) -> Finding:
    status = result["status"]
    payload = result.get("payload") or {}
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if status == 200 and isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        return Finding(
            OK,
            "probe",
            f"HTTP 200: {usage['prompt_tokens']} prompt tokens, "
            f"{usage.get('completion_tokens')} completion tokens",
        )
    body = json.dumps(payload)[:800]
    hint = ""
    if pd and isinstance(status, int) and status >= 500:
        hint = (
            ": a 5xx from a RUNNING PD app is most often a failed KV transfer (vLLM ends the "
            "request when decode cannot load prefill's KV cache); read the decode worker's log"
        )
    elif status == 200:
        hint = ": the answer has no usage"
    return Finding(FAIL, "probe", f"HTTP {status} {body}{hint}")


def _read_counters(urls: Mapping[str, str]) -> Any:
    texts = {}
    for ip, url in urls.items():
        try:
            status, text = probe.http(url, timeout=30)
        except (urllib.error.URLError, OSError):
            status, text = 0, ""
        texts[ip] = text if status == 200 else ""
    return probe.counters(texts)


def _kv(urls: Mapping[str, str], before: Any, sleep: Callable[[float], None]) -> Finding:
    after = before
    for _ in range(METRICS_READS):
        sleep(METRICS_EVERY_S)
        after = _read_counters(urls)
        if (after.transfers or 0) > (before.transfers or 0):
            break
    verdict = probe.kvproof.transfer_verdict(before, after, None)
    where = ", ".join(sorted(urls))
    if verdict.ok:
        return Finding(OK, "kv", f"decode ({where}): {verdict.summary}, 0 failed")
    return Finding(FAIL, "kv", verdict.failure)


def _backend(plane: ServingPlane, expected: set[str]) -> Finding:
    found = probe.backends_in(probe.log_texts(plane.logs_dir()).values())
    want = ", ".join(sorted(expected)) or "none"
    if found and found == expected:
        return Finding(OK, "backend", f"NIXL backend {want} (workers' logs)")
    if not found:
        return Finding(
            FAIL,
            "backend",
            f"no 'Backend ... was instantiated' line in the workers' logs ({plane.logs_dir()}); "
            f"expected {want}",
        )
    return Finding(
        FAIL, "backend", f"the workers instantiated {', '.join(sorted(found))}, not {want}"
    )


def _metrics_url(plane: ServingPlane, ip: str) -> str:
    return f"http://{ip}:{metrics_port(plane.app, 1 + WORKER_IPS.index(ip))}/metrics"


def rehearse_checks(
    plane: ServingPlane,
    *,
    serve_base: str | None = None,
    metrics_url: Callable[[str], str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Finding]:
    """The readiness checks (module docstring) on ``plane``, whose app was deployed; one
    finding each, in order. ``serve_base`` and ``metrics_url`` (node IP -> URL) default to the
    plane's own addresses."""
    base = serve_base or f"http://{HEAD_IP}:{SERVE_PORT}"
    url_of = metrics_url or (lambda ip: _metrics_url(plane, ip))
    app = plane.app
    serve_json = plane.dashboard("api/serve/applications/")
    status, message = app_report(serve_json, app.app_name)
    if status != "RUNNING":
        return [Finding(FAIL, "serve", f"app {app.app_name} is {status}: {failure_cause(message)}")]
    findings = [Finding(OK, "serve", f"app {app.app_name} RUNNING")]
    pd = is_pd(app.serve_config)
    engines = probe.engines(serve_json, app.app_name)
    findings.append(_placement(engines, pd))
    findings.append(_models(base, app.model_id))
    urls = {ip: url_of(ip) for ip in sorted(engines.ips("decode"))} if pd else {}
    before = _read_counters(urls) if urls else None
    prompt = probe.kvproof.probe_prompt(probe.kvproof.new_code())
    try:
        result = probe.chat(base, app.model_id, prompt, PROBE_MAX_TOKENS)
    except (urllib.error.URLError, OSError) as exc:
        result = {"status": None, "payload": {"error": str(exc)}}
    findings.append(_probe(result, pd))
    if not pd:
        return findings
    if result["status"] == 200 and urls:
        findings.append(_kv(urls, before, sleep))
    elif not urls:
        findings.append(Finding(FAIL, "kv", "no decode replica to read NIXL counters from"))
    else:
        findings.append(Finding(FAIL, "kv", "not checked: the probe got no answer"))
    expected = kv_backends(
        adapt_serve_config(app.serve_config, model_dir=plane.model_dir, device=plane.device)
    )
    findings.append(_backend(plane, expected))
    return findings
