"""The KV integrity probe as the CLI runs it: the readiness Lambda's own ``kv_probe`` (one
implementation), printed as findings. ``efa-check``, ``smoke`` and ``drill`` call it.

Through the API server: the probe goes to the Serve service's proxy, and in P/D the decode
engines' NIXL counters are read before and after it from their metrics port through the pod
proxy (RBAC ``get`` on ``pods/proxy``; the NetworkPolicy ``ray-metrics-from-api-server``).
"""

from __future__ import annotations

from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding


def metric_pods(cluster: Cluster, serve_json: Any, pd: bool) -> list[str] | None:
    """The pods whose counters prove the transfer (decode's), None for an aggregated app."""
    if not pd:
        return None
    config = cluster.app.config
    placement = lambda_code.placement()
    kv_probe = lambda_code.kv_probe()
    pods = cluster.get(f"/api/v1/namespaces/{config.namespace}/pods")
    place = placement.placement(pods, serve_json, config.application_name)
    found: list[str] = kv_probe.decode_metric_pods(place, serve_json, config.application_name)
    return found


def run(cluster: Cluster, serve_json: Any, *, pd: bool) -> tuple[Any, list[Finding]]:
    """Send one probe; return the run (the readiness Lambda's ``kv_probe.KvProbeRun``) and what
    it showed."""
    kv_probe = lambda_code.kv_probe()
    props = cluster.readiness_props()
    pods = metric_pods(cluster, serve_json, pd)
    with cluster.errors():
        result = kv_probe.kv_probe(cluster.client, props, pods)
    return result, findings(result, pd=pd)


def findings(result: Any, *, pd: bool) -> list[Finding]:
    """The probe's integrity line and, in P/D, its transfer line."""
    out: list[Finding] = []
    if result.pending:
        out.append(Finding(WARN, "probe", f"not judged yet: {result.pending}"))
        return out
    probe = result.probe
    if probe is not None:
        level = OK if probe.ok and not (result.failure and result.verdict is None) else FAIL
        out.append(Finding(level, "integrity", probe.describe()))
    if result.verdict is not None:
        level = OK if result.verdict.ok else FAIL
        out.append(Finding(level, "transfer", result.verdict.summary))
    elif pd and probe is not None and probe.ok and not result.failure:
        out.append(Finding(WARN, "transfer", "NIXL counters not read"))
    if result.failure:
        out.append(Finding(FAIL, "kv", result.failure))
    return out
