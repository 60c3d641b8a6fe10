"""Questions asked of a local plane directly (no Kubernetes in between), answered with the
readiness check's own parsing and verdict code (``assets/lambda/readiness``, loaded by
``ray_pd_eks.lambda_code``): which replica runs where, the engines' NIXL counters, the NIXL
backend line, a chat completion. ``rehearse`` and the GPU run use them; the serving tier's
tests ask the same through the API server's proxy path.

Standard library only (the readiness modules are too), so it runs with any Python.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_pd_eks import lambda_code

kvproof = lambda_code.kvproof()
nixl_logs = lambda_code.nixl_logs()
placement = lambda_code.placement()

NIXL_BACKEND_RE = nixl_logs.NIXL_BACKEND_RE


def http(
    url: str,
    *,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> tuple[int, str]:
    """(status, text) of one request; an HTTP error's status and body, not an exception."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def chat(base: str, model: str, prompt: str, max_tokens: int = 16) -> dict[str, Any]:
    """One greedy chat completion; ``status`` and the body (or its text) in a dict."""
    status, text = http(
        f"{base}/v1/chat/completions",
        body={
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    )
    try:
        payload = json.loads(text)
    except ValueError:
        payload = {"text": text}
    return {"status": status, "payload": payload}


def answer_text(result: Mapping[str, Any]) -> str:
    choices = (result.get("payload") or {}).get("choices") or [{}]
    return str((choices[0].get("message") or {}).get("content") or "")


def prompt_tokens(result: Mapping[str, Any]) -> int | None:
    usage = (result.get("payload") or {}).get("usage") or {}
    value = usage.get("prompt_tokens")
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Engines:
    """Where the app's engines run, from Serve's own applications API."""

    replicas: tuple[Any, ...]  # placement.ServeReplica

    def ips(self, role: str) -> set[str]:
        return {r.node_ip for r in self.replicas if r.role == role}


def engines(serve_json: Mapping[str, Any], app_name: str) -> Engines:
    return Engines(tuple(placement.serve_replicas(serve_json, app_name)))


def counters(metrics_texts: Mapping[str, str]) -> Any:  # kvproof.NixlCounters
    return kvproof.NixlCounters.from_texts(metrics_texts)


def backends_in(texts: Iterable[str]) -> set[str]:
    """Every NIXL backend a log says was instantiated (``Backend UCX was instantiated``)."""
    found: set[str] = set()
    for text in texts:
        found.update(NIXL_BACKEND_RE.findall(text))
    return found


def log_texts(logs_dir: Path, pattern: str = "worker-*.out") -> dict[str, str]:
    """The Ray session's worker stdout files (where NIXL's Python logger writes), by name."""
    return {
        p.name: p.read_text("utf-8", "replace")
        for p in sorted(logs_dir.glob(pattern))
        if p.is_file()
    }


def wait_for(predicate: Any, timeout_s: float, every_s: float = 2.0) -> Any:
    """The first truthy value of ``predicate()`` within ``timeout_s``, else the last value."""
    deadline = time.monotonic() + timeout_s
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(every_s)
        value = predicate()
    return value


ENGINE_ID_RE = re.compile(r"engine_id['\"]?\s*[:=]\s*['\"]?([A-Za-z0-9_.:-]+)")
