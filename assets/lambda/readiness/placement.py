"""Where the engines run: the Serve replicas the Ray dashboard lists, mapped to the Ray pods and
their nodes. Pure, like ``checks`` (JSON in, frozen dataclasses out): prefill and decode must
sit on different nodes (an aggregated app: each engine on a node of its own), and a replica
that cannot be mapped falls back to the weaker proof the worker pods give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checks import RAY_NODE_TYPE_LABEL, as_str, deployment_role, dig, list_items, pod_gpus


@dataclass(frozen=True)
class ServeReplica:
    deployment: str
    role: str
    state: str
    node_id: str
    node_ip: str
    actor_name: str
    worker_id: str
    pid: int | None
    log_file_path: str
    replica_id: str = ""  # Serve's unique id, as its controller's log lines name the replica


def serve_replicas(serve_json: Mapping[str, Any] | None, app_name: str) -> list[ServeReplica]:
    """Replicas of one app from the dashboard's ``GET /api/serve/applications/``."""
    deployments = dig(serve_json, "applications", app_name, "deployments") or {}
    replicas = []
    for dep_name, deployment in sorted(deployments.items()):
        name = as_str(deployment.get("name")) or dep_name
        for replica in deployment.get("replicas") or []:
            if not isinstance(replica, dict):
                continue
            pid = replica.get("pid")
            replicas.append(
                ServeReplica(
                    deployment=name,
                    role=deployment_role(name),
                    state=as_str(replica.get("state")),
                    node_id=as_str(replica.get("node_id")),
                    node_ip=as_str(replica.get("node_ip")),
                    actor_name=as_str(replica.get("actor_name")),
                    worker_id=as_str(replica.get("worker_id")),
                    pid=pid if isinstance(pid, int) else None,
                    log_file_path=as_str(replica.get("log_file_path")),
                    replica_id=as_str(replica.get("replica_id")),
                )
            )
    return replicas


@dataclass(frozen=True)
class PodPlacement:
    name: str
    role: str  # "head" / "worker"
    node: str
    ip: str
    phase: str
    gpus: int


@dataclass(frozen=True)
class Placement:
    """Where prefill and decode run.

    ``method`` is ``serve-replicas`` when read from the Serve replicas' node IPs mapped to pods
    and nodes, or ``worker-pods`` when that was unreadable and the weaker proof was used: two
    worker pods on two distinct nodes, each with exactly one engine replica's GPUs (then Serve
    cannot place both engines on one pod). ``conflict`` means prefill and decode share a node,
    which waiting will not fix.
    """

    method: str
    pods: tuple[PodPlacement, ...]
    prefill_nodes: tuple[str, ...]
    decode_nodes: tuple[str, ...]
    ok: bool
    why: str
    conflict: bool = False
    # Aggregated mode: the nodes running an engine that does both phases.
    engine_nodes: tuple[str, ...] = ()

    @property
    def worker_nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.pods if p.role == "worker" and p.node}))

    @property
    def head_node(self) -> str:
        return next((p.node for p in self.pods if p.role == "head"), "")


def placement(
    pods_json: Mapping[str, Any] | None,
    serve_json: Mapping[str, Any] | None = None,
    app_name: str | None = None,
    *,
    serve_error: str = "",
    mode: str = "pd",
    gpus_per_worker: int = 1,
) -> Placement:
    """Decide whether prefill and decode run on different nodes (``mode`` "pd"), or, for an
    aggregated app (``mode`` "aggregated"), whether each engine has a GPU node of its own.

    Pass ``serve_json`` (dashboard ``/api/serve/applications/``) and ``app_name`` for the strong
    check; without them, or when replicas cannot be mapped to pods, fall back to the pod-level
    check and say why in ``why``. ``serve_error`` is the reason the caller could not fetch it.
    """
    pods = []
    for pod in list_items(pods_json):
        role = as_str(dig(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL))
        if role not in ("head", "worker") or dig(pod, "metadata", "deletionTimestamp"):
            continue
        pods.append(
            PodPlacement(
                name=as_str(dig(pod, "metadata", "name")),
                role=role,
                node=as_str(dig(pod, "spec", "nodeName")),
                ip=as_str(dig(pod, "status", "podIP")),
                phase=as_str(dig(pod, "status", "phase")),
                gpus=pod_gpus(pod),
            )
        )
    pods.sort(key=lambda p: (p.role != "head", p.name))
    fallback_reason = serve_error or "Serve replica details not available"
    if mode == "aggregated" and serve_json is not None and app_name:
        found = _engine_placement(pods, serve_json, app_name)
        if isinstance(found, Placement):
            return found
        fallback_reason = found
    elif serve_json is not None and app_name:
        by_ip = {p.ip: p for p in pods if p.ip}
        replicas = [
            r
            for r in serve_replicas(serve_json, app_name)
            if r.role in ("prefill", "decode") and r.state == "RUNNING"
        ]
        unmapped = [r for r in replicas if r.node_ip not in by_ip or not by_ip[r.node_ip].node]
        prefill = tuple(
            sorted(
                {
                    by_ip[r.node_ip].node
                    for r in replicas
                    if r.role == "prefill" and r not in unmapped
                }
            )
        )
        decode = tuple(
            sorted(
                {
                    by_ip[r.node_ip].node
                    for r in replicas
                    if r.role == "decode" and r not in unmapped
                }
            )
        )
        if unmapped:
            fallback_reason = "replica node IPs not found among Ray pods: " + ", ".join(
                f"{r.deployment}@{r.node_ip or '?'}" for r in unmapped
            )
        elif not prefill or not decode:
            fallback_reason = (
                f"no RUNNING prefill and decode replicas in app {app_name} "
                f"(prefill {len(prefill)}, decode {len(decode)})"
            )
        else:
            shared = sorted(set(prefill) & set(decode))
            return _by_replicas(
                pods,
                shared,
                prefill=prefill,
                decode=decode,
                conflict_why=(
                    f"prefill and decode replicas share node(s) {', '.join(shared)}; give "
                    "each worker pod exactly one replica's GPUs (tensorParallelSize) so "
                    "Serve must place them apart"
                ),
                ok_why=f"prefill on {', '.join(prefill)}, decode on {', '.join(decode)}",
            )
    workers = [p for p in pods if p.role == "worker" and p.phase == "Running" and p.node]
    nodes = {p.node for p in workers}
    # A worker with exactly one replica's GPUs cannot hold a second engine.
    one_replica_each = all(p.gpus == gpus_per_worker for p in workers)
    ok = len(workers) >= 2 and len(nodes) >= 2 and one_replica_each
    detail = f"{len(workers)} running worker pod(s) on {len(nodes)} distinct node(s)" + (
        ""
        if one_replica_each
        else f" (not exactly {gpus_per_worker} GPU(s) each, one engine replica's)"
    )
    return Placement(
        method="worker-pods",
        pods=tuple(pods),
        prefill_nodes=(),
        decode_nodes=(),
        ok=ok,
        why=f"{detail}; replica placement unread: {fallback_reason}",
    )


def _engine_placement(
    pods: list[PodPlacement], serve_json: Mapping[str, Any], app_name: str
) -> Placement | str:
    """The aggregated app's placement from its engine replicas, or why it cannot be read."""
    by_ip = {p.ip: p for p in pods if p.ip}
    replicas = [
        r
        for r in serve_replicas(serve_json, app_name)
        if r.role == "engine" and r.state == "RUNNING"
    ]
    unmapped = [r for r in replicas if r.node_ip not in by_ip or not by_ip[r.node_ip].node]
    if unmapped:
        return "replica node IPs not found among Ray pods: " + ", ".join(
            f"{r.deployment}@{r.node_ip or '?'}" for r in unmapped
        )
    if not replicas:
        return f"no RUNNING engine replicas in app {app_name}"
    per_node: dict[str, int] = {}
    for r in replicas:
        node = by_ip[r.node_ip].node
        per_node[node] = per_node.get(node, 0) + 1
    nodes = tuple(sorted(per_node))
    shared = [n for n, count in sorted(per_node.items()) if count > 1]
    return _by_replicas(
        pods,
        shared,
        engines=nodes,
        conflict_why=(
            f"several engine replicas share node(s) {', '.join(shared)}; give each worker "
            "pod exactly one GPU so each engine gets a GPU node of its own"
        ),
        ok_why=f"aggregated: {len(replicas)} engine(s), each on its own node: {', '.join(nodes)}",
    )


def _by_replicas(
    pods: list[PodPlacement],
    shared: list[str],
    *,
    conflict_why: str,
    ok_why: str,
    prefill: tuple[str, ...] = (),
    decode: tuple[str, ...] = (),
    engines: tuple[str, ...] = (),
) -> Placement:
    """The placement read from the Serve replicas' nodes: a conflict (``conflict_why``) when
    replicas that must run apart share the nodes ``shared``, else proven (``ok_why``)."""
    return Placement(
        method="serve-replicas",
        pods=tuple(pods),
        prefill_nodes=prefill,
        decode_nodes=decode,
        engine_nodes=engines,
        ok=not shared,
        conflict=bool(shared),
        why=conflict_why if shared else ok_why,
    )
