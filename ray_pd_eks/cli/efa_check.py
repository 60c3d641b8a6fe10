"""``efa-check``: does the KV cache really move over EFA, or silently over TCP?

Without ``backends: ["LIBFABRIC"]`` NIXL picks UCX, which runs at TCP speed even on EFA nodes
and logs nothing alarming. The proof is the line ``Backend LIBFABRIC was instantiated`` in each
worker's logs; this command reads it through the Ray dashboard's log API (the readiness
Lambda's reader, so no exec permission is needed) and checks the pieces the fix depends on.
"""

from __future__ import annotations

import argparse
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli import probe
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding, summary
from ray_pd_eks.config import set_hint

NAME = "efa-check"
HELP = "which NIXL backend each worker uses (LIBFABRIC = EFA, UCX = TCP) and EFA per node"
DESCRIPTION = """\
Prove the prefill->decode KV-cache path uses EFA:
  nodes    each GPU node advertises vpc.amazonaws.com/efa (the EFA device plugin runs)
  pods     each Ray worker requests vpc.amazonaws.com/efa and sets FI_PROVIDER=efa
  backend  the NIXL backend each worker instantiated, from its logs via the Ray dashboard
           ("Backend LIBFABRIC was instantiated" vs "Backend UCX ...")
  provider with LIBFABRIC, the libfabric provider NIXL chose: "Discovered <n> EFA devices"
           vs "... tcp devices (TCP fallback)" (logged with NIXL_LOG_LEVEL=INFO), or
           LIBFABRIC instantiated in pods that set FI_PROVIDER=efa (libfabric then offers
           NIXL only EFA, so without an EFA device the backend cannot start)
  probe    the KV integrity probe (a ~2,500-token prompt with a random code at its start,
           temperature 0: the answer must hold the code) and the decode engines' NIXL
           counters around it (transfers rose, none failed, bytes fit the prompt)
Exit 1 when a worker fell back to UCX while kvBackend is LIBFABRIC, when a node or pod lacks
EFA, when the backend or provider could not be read (unknown is not a pass), the provider is
tcp, or the probe fails. --no-probe skips the probe (it sends one request to the model).
An aggregated app (servingMode aggregated) moves no KV cache: only the nodes are shown, and
the command exits 0 saying there is nothing to prove."""

FALLBACK_FIX = (
    'set kv_connector_extra_config.backends: ["LIBFABRIC"] in prefill_config and decode_config '
    f"({set_hint('kvBackend', 'LIBFABRIC')}), check the EFA device plugin runs on the GPU "
    "nodes, that workers request vpc.amazonaws.com/efa and set FI_PROVIDER=efa, then redeploy"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-lines",
        type=int,
        default=3000,
        metavar="N",
        help="read the last N lines of each worker log file (default: 3000)",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="do not send the KV integrity probe (one chat completion) to the model",
    )


def _node_findings(nodes: Any, uses_efa: bool) -> list[Finding]:
    if not nodes.nodes:
        return [
            Finding(FAIL, "nodes", "no nodes labelled role=gpu-worker: is the GPU node group up?")
        ]
    findings = []
    for node in nodes.nodes:
        counts = f"EFA capacity {node.efa_capacity}, allocatable {node.efa_allocatable}"
        if node.efa_allocatable >= 1:
            findings.append(Finding(OK, "nodes", f"{node.name} ({node.zone or '?'}): {counts}"))
        else:
            findings.append(
                Finding(
                    FAIL if uses_efa else WARN,
                    "nodes",
                    f"{node.name}: {counts}: the EFA device plugin does not advertise EFA here; "
                    "check its DaemonSet schedules on this instance type "
                    "(kubectl get ds -n kube-system) and that the node group has EFA enabled",
                )
            )
    zones = {n.zone for n in nodes.nodes if n.zone}
    if len(zones) > 1:
        findings.append(
            Finding(FAIL, "nodes", f"GPU nodes span {', '.join(sorted(zones))}: EFA needs one AZ")
        )
    return findings


def _container_env(container: dict[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if item.get("name") == name:
            return str(item.get("value", "<from a reference>"))
    return None


def _pod_findings(pods: dict[str, Any], uses_efa: bool) -> list[Finding]:
    """With kvBackend=LIBFABRIC each worker must request EFA and select libfabric's EFA provider;
    with UCX (the TCP comparison variant) the manifest leaves both out on purpose."""
    checks = lambda_code.checks()
    workers = [
        p
        for p in pods.get("items", [])
        if (p.get("metadata", {}).get("labels") or {}).get(checks.RAY_NODE_TYPE_LABEL) == "worker"
    ]
    if not workers:
        return [Finding(WARN, "pods", "no Ray worker pods yet: run `status --watch` first")]
    findings = []
    for pod in workers:
        name = pod.get("metadata", {}).get("name", "?")
        containers = pod.get("spec", {}).get("containers") or []
        efa = 0
        providers = set()
        for container in containers:
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                efa = max(
                    efa, checks.quantity((resources.get(kind) or {}).get(checks.EFA_RESOURCE))
                )
            provider = _container_env(container, "FI_PROVIDER")
            if provider is not None:
                providers.add(provider)
        if not uses_efa:
            findings.append(
                Finding(OK, "pods", f"{name}: kvBackend UCX (TCP comparison): EFA not required")
            )
            continue
        problems = []
        if efa < 1:
            problems.append(f"requests no {checks.EFA_RESOURCE}")
        if providers != {"efa"}:
            problems.append(f"FI_PROVIDER is {', '.join(sorted(providers)) or 'unset'}, not efa")
        if problems:
            findings.append(
                Finding(FAIL, "pods", f"{name}: {'; '.join(problems)}: fix the worker group spec")
            )
        else:
            findings.append(Finding(OK, "pods", f"{name}: {efa} EFA interface(s), FI_PROVIDER=efa"))
    return findings


def _backend_findings(report: Any, configured: str) -> list[Finding]:
    if not report.backends:
        return [Finding(FAIL, "backend", f"unknown: {report.reason}")]
    fallbacks = set(report.fallbacks(configured))
    findings = []
    for label, backend in report.backends:
        source = report.sources.get(label, "")
        where = f" (from {source})" if source else ""
        if label in fallbacks:
            findings.append(
                Finding(
                    FAIL,
                    "backend",
                    f"{label}: UCX{where}: the KV cache moves over TCP, not EFA; "
                    f"fix: {FALLBACK_FIX}",
                )
            )
        elif backend.startswith("unknown"):
            findings.append(Finding(FAIL, "backend", f"{label}: {backend}"))
        elif backend == configured:
            findings.append(Finding(OK, "backend", f"{label}: {backend}{where}"))
        else:
            findings.append(
                Finding(
                    WARN, "backend", f"{label}: {backend}{where}, but kvBackend is {configured}"
                )
            )
    return findings


def _provider_findings(report: Any, configured: str) -> list[Finding]:
    """The libfabric provider per LIBFABRIC worker, judged as the readiness check judges it."""
    if configured != "LIBFABRIC":
        return []
    findings = []
    for label, provider in report.providers:
        if provider == "efa":
            findings.append(Finding(OK, "provider", f"{label}: efa"))
        elif provider in ("tcp", "sockets"):
            findings.append(
                Finding(
                    FAIL,
                    "provider",
                    f"{label}: {provider}: NIXL's LIBFABRIC plugin saw no EFA device, the KV "
                    f"cache moves at TCP speed; fix: {FALLBACK_FIX}",
                )
            )
        else:
            findings.append(Finding(FAIL, "provider", f"{label}: {provider}"))
    return findings


def kubectl_commands(app: App) -> list[str]:
    c = app.config
    grep = 'grep -h "Backend .* was instantiated"'
    return [
        "kubectl get nodes -l role=gpu-worker -o custom-columns=NAME:.metadata.name,"
        "EFA:.status.allocatable.vpc\\.amazonaws\\.com/efa",
        f"kubectl logs -n {c.namespace} -l ray.io/node-type=worker --tail=-1 | {grep}",
        f"kubectl exec -n {c.namespace} <worker-pod> -- sh -c "
        f"'{grep} -r /tmp/ray/session_latest/logs'",
    ]


def run(app: App) -> int:
    if app.args.log_lines < 1:
        # Ray's log API reads 0 as its default of 1,000 lines and -1 as the whole file.
        raise UsageError(
            f"--log-lines {app.args.log_lines}: must be at least 1 (the last N lines of each "
            "worker log file; default 3000)"
        )
    config = app.config
    checks = lambda_code.checks()
    nixl_logs = lambda_code.nixl_logs()
    cluster = Cluster(app)
    rayservice = cluster.rayservice()
    state = checks.rayservice_state(rayservice, config.application_name)
    nodes = checks.gpu_nodes(
        cluster.get("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}), config.gpu_node_min
    )
    pods = checks.ray_pods(
        cluster.get(f"/api/v1/namespaces/{config.namespace}/pods"),
        config.ray_service_name,
        state.cluster_names,
    )
    mode = cluster.serving_mode(rayservice)
    if mode == "aggregated":
        app.print(
            f"EFA check of RayService {config.ray_service_name} (servingMode aggregated, "
            f"cluster {config.cluster_name})"
        )
        for finding in _node_findings(nodes, uses_efa=False):
            app.print(finding.line())
        app.print(
            Finding(
                OK,
                "backend",
                "servingMode aggregated: each engine does prefill and decode on its own GPU, "
                "so no KV cache crosses the network and there is no NIXL backend to check "
                "(deploy servingMode=pd to use EFA)",
            ).line()
        )
        return EXIT_OK
    app.print(
        f"EFA check of RayService {config.ray_service_name} (kvBackend {config.kv_backend}, "
        f"cluster {config.cluster_name})"
    )
    uses_efa = config.kv_backend == "LIBFABRIC"
    findings = _node_findings(nodes, uses_efa) + _pod_findings(pods, uses_efa)
    for finding in findings:
        app.print(finding.line())

    dashboard = cluster.dashboard()
    serve_json = None
    with cluster.errors():  # auth failures end here; an unreachable dashboard is "unknown"
        try:
            serve_json = dashboard.serve_applications()
        except cluster.kube.KubeAuthError:
            raise
        except cluster.kube.KubeApiError as err:
            app.debug(f"serve applications unreadable, reading every worker node: {err}")
    with cluster.errors():  # a refused Ray token is an access problem, not "unknown"
        report = nixl_logs.read_nixl_backends(
            dashboard,
            serve_json,
            config.application_name,
            lines=app.args.log_lines,
            fi_provider=checks.workers_fi_provider(pods),
        )
    backend_findings = _backend_findings(report, config.kv_backend)
    backend_findings += _provider_findings(report, config.kv_backend)
    if not app.args.no_probe:
        _, probe_findings = probe.run(cluster, serve_json, pd=True)
        backend_findings += probe_findings
    for finding in backend_findings:
        app.print(finding.line())
    findings += backend_findings
    app.print(
        summary(findings, "the KV cache path uses EFA", "the KV cache path is not proven on EFA"),
        "",
        "With kubectl:",
        *(f"  {line}" for line in kubectl_commands(app)),
    )
    return EXIT_CHECK_FAILED if any(f.level == FAIL for f in findings) else EXIT_OK
