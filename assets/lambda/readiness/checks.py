"""Pure evaluations of Kubernetes and Ray JSON: dicts in, frozen dataclasses out, no I/O.

Shared by the readiness Lambda (which decides pending / done / failed from them) and the
project CLI's ``status`` and ``efa-check`` commands (which print them), so a verdict shown to a
person and the verdict that fails a deploy come from the same code.

Time-dependent judgements (how long has a pod been unschedulable?) take ``now`` explicitly
rather than reading the clock, so they stay deterministic in tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
GPU_NODE_LABEL_KEY = "role"
GPU_NODE_LABEL_VALUE = "gpu-worker"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_CLUSTER_LABEL = "ray.io/cluster"

APP_STATUSES = ("NOT_STARTED", "DEPLOYING", "RUNNING", "DEPLOY_FAILED", "DELETING", "UNHEALTHY")
# KubeRay condition reasons that no amount of waiting fixes: the operator gave up initialising
# the cluster, or rejected the spec. Either needs a change to the RayService.
TERMINAL_CONDITION_REASONS = {
    "InitializingTimeout": (
        "KubeRay gave up initialising the RayService (InitializingTimeout); look at the head and "
        "worker pods' events and logs, fix the cause, then update the RayService"
    ),
    "ValidationFailed": (
        "KubeRay rejected the RayService spec (ValidationFailed); fix the manifest"
    ),
}
STUCK_WAITING_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
)
IMAGE_PULL_REASONS = ("ImagePullBackOff", "ErrImagePull")
# Warning events KubeRay records on the RayCluster / RayService when the API server refuses what
# it creates (Pod Security admission, a ResourceQuota, an admission webhook) or the spec is
# invalid (KubeRay ray-operator/controllers/ray/utils/constant.go, v1.7). ``FailedCreate`` is the
# generic controller reason, kept for the same refusals reported by other controllers.
OBJECT_FAILURE_REASONS = (
    "FailedToCreateHeadPod",
    "FailedToCreateWorkerPod",
    "FailedToCreateRayCluster",
    "FailedToCreateService",
    "FailedToCreateServiceAccount",
    "FailedCreate",
    "InvalidRayClusterSpec",
    "InvalidRayClusterMetadata",
    "InvalidRayServiceSpec",
    "InvalidRayServiceMetadata",
)
RAY_OBJECT_KINDS = ("RayCluster", "RayService")
NIXL_BACKEND_RE = re.compile(r"Backend\s+([A-Za-z0-9_]+)\s+was instantiated")


def parse_time(value: Any) -> datetime | None:
    """Kubernetes RFC 3339 timestamps (``2026-11-30T01:02:03Z``, optional fraction) → aware UTC."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def quantity(value: Any) -> int:
    """Integer device counts as the API reports them ("1", 1, "0"); anything else counts 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def _items(list_json: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    items = (list_json or {}).get("items")
    return [item for item in items or [] if isinstance(item, dict)]


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --- GPU nodes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuNode:
    """One node labelled ``role=gpu-worker`` and what it advertises to the scheduler."""

    name: str
    ready: bool
    ready_since: datetime | None
    gpu_allocatable: int
    gpu_capacity: int
    efa_allocatable: int
    efa_capacity: int
    instance_type: str
    zone: str

    @property
    def usable(self) -> bool:
        """Can host a worker pod: Ready, and both device plugins have advertised a device."""
        return self.ready and self.gpu_allocatable >= 1 and self.efa_allocatable >= 1

    def problem(self) -> str:
        """Why the node cannot host a worker yet, naming the component that is missing."""
        problems = []
        if not self.ready:
            problems.append("not Ready")
        if self.gpu_allocatable < 1:
            problems.append(f"{GPU_RESOURCE} allocatable 0 (NVIDIA device plugin not running?)")
        if self.efa_allocatable < 1:
            problems.append(f"{EFA_RESOURCE} allocatable 0 (EFA device plugin not running?)")
        return ", ".join(problems)


@dataclass(frozen=True)
class GpuNodes:
    nodes: tuple[GpuNode, ...]
    expected: int
    ok: bool
    why: str

    @property
    def usable(self) -> tuple[GpuNode, ...]:
        return tuple(node for node in self.nodes if node.usable)

    @property
    def ready_since(self) -> datetime | None:
        """When the last usable node turned Ready: the point after which GPU scheduling
        failures can no longer be blamed on nodes still joining."""
        times = [node.ready_since for node in self.usable if node.ready_since]
        return max(times) if times else None


def gpu_nodes(nodes_json: Mapping[str, Any] | None, expected: int) -> GpuNodes:
    """Evaluate the GPU node group as the walkthrough's node-group step does."""
    nodes = []
    for item in _items(nodes_json):
        labels = _get(item, "metadata", "labels") or {}
        if labels.get(GPU_NODE_LABEL_KEY) != GPU_NODE_LABEL_VALUE:
            continue
        ready_condition: dict[str, Any] = next(
            (c for c in _get(item, "status", "conditions") or [] if c.get("type") == "Ready"),
            {},
        )
        allocatable = _get(item, "status", "allocatable") or {}
        capacity = _get(item, "status", "capacity") or {}
        nodes.append(
            GpuNode(
                name=_str(_get(item, "metadata", "name")),
                ready=ready_condition.get("status") == "True",
                ready_since=parse_time(ready_condition.get("lastTransitionTime")),
                gpu_allocatable=quantity(allocatable.get(GPU_RESOURCE)),
                gpu_capacity=quantity(capacity.get(GPU_RESOURCE)),
                efa_allocatable=quantity(allocatable.get(EFA_RESOURCE)),
                efa_capacity=quantity(capacity.get(EFA_RESOURCE)),
                instance_type=_str(labels.get(INSTANCE_TYPE_LABEL)),
                zone=_str(labels.get(ZONE_LABEL)),
            )
        )
    nodes.sort(key=lambda node: node.name)
    usable = [node for node in nodes if node.usable]
    ok = len(usable) >= expected
    if not nodes:
        label = f"{GPU_NODE_LABEL_KEY}={GPU_NODE_LABEL_VALUE}"
        why = f"no nodes labelled {label} yet (expected {expected})"
    else:
        why = f"{len(usable)}/{expected} GPU nodes Ready with {GPU_RESOURCE} and {EFA_RESOURCE}"
        waiting = [f"{node.name}: {node.problem()}" for node in nodes if not node.usable]
        if waiting:
            why += "; " + "; ".join(waiting)
        zones = sorted({node.zone for node in usable if node.zone})
        if len(zones) > 1:
            why += f"; WARNING GPU nodes span zones {', '.join(zones)} (EFA cannot cross AZs)"
    return GpuNodes(nodes=tuple(nodes), expected=expected, ok=ok, why=why)


# --- RayService ----------------------------------------------------------------------------


SERVING_MODES = ("pd", "aggregated")


def deployment_role(name: str) -> str:
    """ "prefill" / "decode" / "engine" / "other" from a Serve deployment name.

    Ray Serve LLM's PD builder prefixes the LLM server deployments with ``Prefill:`` and
    ``Decode:``; older releases named classes ``PDPrefillServer``/``PDDecodeServer``. The
    ordinary (aggregated) builder names its engine deployment after the server class,
    ``LLMServer:<model>`` (Ray 2.58 ``build_llm_deployment``): an "engine" doing both phases.
    The proxy and ingress deployments match none of these.
    """
    lowered = name.lower()
    if "prefill" in lowered:
        return "prefill"
    if "decode" in lowered:
        return "decode"
    if lowered.startswith("llmserver"):
        return "engine"
    return "other"


def serving_mode(rs_json: Mapping[str, Any] | None) -> str | None:
    """ "pd" / "aggregated" from the RayService's ``serveConfigV2`` import path, None when it
    names neither builder (a text search: the Lambda has no YAML parser)."""
    text = _str(_get(rs_json, "spec", "serveConfigV2"))
    if "ray.serve.llm:build_pd_openai_app" in text:
        return "pd"
    if "ray.serve.llm:build_openai_app" in text:
        return "aggregated"
    return None


@dataclass(frozen=True)
class DeploymentState:
    name: str
    status: str
    message: str
    role: str


@dataclass(frozen=True)
class RayServiceState:
    """What KubeRay reports; never the deprecated ``status.serviceStatus``."""

    exists: bool
    app_name: str
    ready_status: str | None = None  # "True" / "False" / "Unknown" / None (no condition yet)
    ready_reason: str = ""
    ready_message: str = ""
    ready_since: datetime | None = None
    app_status: str | None = None
    app_message: str = ""
    deployments: tuple[DeploymentState, ...] = ()
    terminal_reason: str | None = None
    terminal_message: str = ""
    upgrade_in_progress: bool = False
    generation_current: bool = True
    generation: int | None = None
    observed_generation: int | None = None
    active_cluster: str = ""
    pending_cluster: str = ""

    @property
    def running(self) -> bool:
        """Ready, app RUNNING, and the status describes the current spec (not a previous one
        still serving while an update rolls out)."""
        return (
            self.ready_status == "True"
            and self.app_status == "RUNNING"
            and self.generation_current
            and not self.upgrade_in_progress
        )

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(name for name in (self.active_cluster, self.pending_cluster) if name)

    def summary(self) -> str:
        """One line for logs and timeout messages."""
        if not self.exists:
            return "RayService not found"
        ready = self.ready_status or "none"
        if self.ready_reason:
            ready += f"/{self.ready_reason}"
        parts = [f"Ready={ready}", f"app {self.app_name}={self.app_status or 'absent'}"]
        if self.app_message:
            parts.append(f"message: {self.app_message[:200]}")
        unhealthy = [f"{d.name}={d.status}" for d in self.deployments if d.status != "HEALTHY"]
        if unhealthy:
            parts.append("deployments " + ", ".join(unhealthy))
        if self.upgrade_in_progress:
            parts.append("upgrade in progress")
        if not self.generation_current:
            parts.append(
                f"status describes generation {self.observed_generation}, not the latest "
                f"{self.generation} (KubeRay has not reconciled the update yet)"
            )
        return "; ".join(parts)


def rayservice_state(rs_json: Mapping[str, Any] | None, app_name: str) -> RayServiceState:
    """Read the RayService status the way current KubeRay documents it."""
    if not rs_json:
        return RayServiceState(exists=False, app_name=app_name)
    status = rs_json.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), {})
    generation = _get(rs_json, "metadata", "generation")
    generation = generation if isinstance(generation, int) else None

    def current(condition: Mapping[str, Any]) -> bool:
        # Conditions carry the generation they were computed for (KubeRay v1.7 sets
        # conditions[].observedGeneration); one about an older spec says nothing of this one.
        seen = condition.get("observedGeneration")
        return not (isinstance(seen, int) and generation is not None and seen < generation)

    terminal = next(
        (c for c in conditions if c.get("reason") in TERMINAL_CONDITION_REASONS and current(c)),
        None,
    )
    upgrade = any(
        c.get("type") == "UpgradeInProgress" and c.get("status") == "True" for c in conditions
    )
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    # KubeRay creates every Ray cluster as the pending one and promotes it once Serve on it is
    # ready (v1.7.0 rayservice_controller.go, reconcilePromotionAndServingStatus): until the
    # first promotion the app's status (DEPLOYING, DEPLOY_FAILED...) is the pending cluster's.
    # Once a cluster is active, its app is the one that serves.
    serving = active if active.get("rayClusterName") else pending
    app = _get(serving, "applicationStatuses", app_name) or {}
    deployments = tuple(
        DeploymentState(
            name=name,
            status=_str(value.get("status")),
            message=_str(value.get("message")),
            role=deployment_role(name),
        )
        for name, value in sorted((app.get("serveDeploymentStatuses") or {}).items())
        if isinstance(value, dict)
    )
    observed = status.get("observedGeneration")
    observed = observed if isinstance(observed, int) else None
    generation_current = not (
        generation is not None and observed is not None and observed < generation
    )
    terminal_reason = _str(terminal.get("reason")) if terminal else None
    terminal_message = ""
    if terminal is not None and terminal_reason:
        terminal_message = TERMINAL_CONDITION_REASONS[terminal_reason]
        if terminal.get("message"):
            terminal_message += f" (condition {terminal.get('type')}: {terminal['message']})"
    return RayServiceState(
        exists=True,
        app_name=app_name,
        ready_status=_str(ready.get("status")) or None,
        ready_reason=_str(ready.get("reason")),
        ready_message=_str(ready.get("message")),
        ready_since=parse_time(ready.get("lastTransitionTime")),
        app_status=_str(app.get("status")) or None,
        app_message=_str(app.get("message")),
        deployments=deployments,
        terminal_reason=terminal_reason,
        terminal_message=terminal_message,
        upgrade_in_progress=upgrade,
        generation_current=generation_current,
        generation=generation,
        observed_generation=observed,
        active_cluster=_str(active.get("rayClusterName")),
        pending_cluster=_str(_get(status, "pendingServiceStatus", "rayClusterName")),
    )


# --- pods ----------------------------------------------------------------------------------


def ray_pods(
    pods_json: Mapping[str, Any] | None, rayservice: str, cluster_names: Iterable[str] = ()
) -> dict[str, Any]:
    """The RayService's Ray pods (head and workers) out of a namespace-wide pod list.

    Matches KubeRay's ``ray.io/cluster`` label against the RayService's current cluster names,
    or — before KubeRay has reported them — against the ``<rayservice>-`` prefix it uses.
    """
    names = set(cluster_names)
    selected = []
    for pod in _items(pods_json):
        cluster = _str(_get(pod, "metadata", "labels", RAY_CLUSTER_LABEL))
        if not cluster:
            continue
        if cluster in names or (not names and cluster.startswith(f"{rayservice}-")):
            selected.append(pod)
    return {"items": selected}


def workers_fi_provider(pods_json: Mapping[str, Any] | None) -> str:
    """The ``FI_PROVIDER`` every Ray worker pod sets (a literal value in one of its containers),
    or "" when there is no worker, one sets none (or only through a reference), or they
    differ. With ``efa`` an instantiated LIBFABRIC backend proves EFA
    (``kvproof.implied_provider``)."""
    values: set[str] = set()
    workers = 0
    for pod in _items(pods_json):
        if _str(_get(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL)) != "worker":
            continue
        workers += 1
        found = ""
        for container in _get(pod, "spec", "containers") or []:
            for item in container.get("env") or []:
                if item.get("name") == "FI_PROVIDER" and isinstance(item.get("value"), str):
                    found = item["value"]
        values.add(found)
    return values.pop() if workers and len(values) == 1 else ""


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for container in _get(pod, "spec", "containers") or []:
        resources = container.get("resources") or {}
        limit = quantity((resources.get("limits") or {}).get(GPU_RESOURCE))
        request = quantity((resources.get("requests") or {}).get(GPU_RESOURCE))
        total += max(limit, request)
    return total


def event_time(event: Mapping[str, Any]) -> datetime | None:
    candidates = [
        parse_time(_get(event, "series", "lastObservedTime")),
        parse_time(event.get("lastTimestamp")),
        parse_time(event.get("eventTime")),
        parse_time(event.get("firstTimestamp")),
        parse_time(_get(event, "metadata", "creationTimestamp")),
    ]
    times = [t for t in candidates if t is not None]
    return max(times) if times else None


def event_first_time(event: Mapping[str, Any]) -> datetime | None:
    """When the (possibly aggregated) event was first seen: core/v1 ``firstTimestamp``, or the
    ``eventTime`` of an events.k8s.io-style series, else the Event object's creation."""
    candidates = [
        parse_time(event.get("firstTimestamp")),
        parse_time(event.get("eventTime")),
        parse_time(_get(event, "metadata", "creationTimestamp")),
    ]
    times = [t for t in candidates if t is not None]
    return min(times) if times else None


def event_count(event: Mapping[str, Any]) -> int:
    """How many times the event was seen (core/v1 ``count`` or ``series.count``), at least 1."""
    counts = [quantity(event.get("count")), quantity(_get(event, "series", "count"))]
    return max(1, *counts)


def _is_pull_failure(event: Mapping[str, Any]) -> bool:
    """Kubelet's image-pull failures: reason ``Failed`` with "Failed to pull image ..." or
    "Error: ErrImagePull"/"Error: ImagePullBackOff", and ``BackOff`` "Back-off pulling image"."""
    reason = event.get("reason")
    message = _str(event.get("message") or event.get("note"))
    if reason == "Failed":
        return "pull" in message.lower() or any(r in message for r in IMAGE_PULL_REASONS)
    return reason == "BackOff" and "pulling image" in message.lower()


@dataclass(frozen=True)
class PodProblem:
    """A pod that will not make progress without someone changing something."""

    pod: str
    reason: str
    message: str
    container: str = ""
    event: str = ""
    observed_at: datetime | None = None  # latest sighting (event time), for "still failing?"
    since: datetime | None = None  # when the condition began, for "failing how long?"
    requests_gpu: bool = False
    role: str = ""

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" container {self.container}" if self.container else "")
        text = f"{where}: {self.reason}"
        if self.message:
            text += f": {self.message}"
        event_reason, _, event_message = self.event.partition(": ")
        if event_message and event_message.strip() in self.message:
            text += f" (event {event_reason})"
        elif self.event:
            text += f" (event {self.event})"
        return text


_EVENT_REASONS_FOR = {
    "Unschedulable": ("FailedScheduling",),
    "ImagePullBackOff": ("Failed", "BackOff", "ErrImagePull"),
    "ErrImagePull": ("Failed", "BackOff", "ErrImagePull"),
    "CrashLoopBackOff": ("BackOff",),
    "CreateContainerConfigError": ("Failed",),
}


def pod_problems(
    pods_json: Mapping[str, Any] | None, events_json: Mapping[str, Any] | None
) -> list[PodProblem]:
    """Stuck pods, each quoting the scheduler's or kubelet's own words and the latest event."""
    events_by_pod: dict[str, list[dict[str, Any]]] = {}
    for item in _items(events_json):
        involved = item.get("involvedObject") or item.get("regarding") or {}
        if involved.get("kind", "Pod") != "Pod":
            continue
        events_by_pod.setdefault(_str(involved.get("name")), []).append(item)

    def latest_event(pod: str, reasons: Sequence[str]) -> tuple[str, datetime | None]:
        matching = [e for e in events_by_pod.get(pod, []) if e.get("reason") in reasons]
        if not matching:
            return "", None
        event = max(matching, key=lambda e: event_time(e) or datetime.min.replace(tzinfo=UTC))
        text = f"{event.get('reason')}: {_str(event.get('message') or event.get('note'))}"
        return text.strip(), event_time(event)

    problems: list[PodProblem] = []
    for pod in _items(pods_json):
        if _get(pod, "metadata", "deletionTimestamp"):
            continue  # on its way out (e.g. the old cluster after an upgrade)
        name = _str(_get(pod, "metadata", "name"))
        role = _str(_get(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL))
        gpu = _pod_gpus(pod) > 0
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                event, event_at = latest_event(name, _EVENT_REASONS_FOR["Unschedulable"])
                problems.append(
                    PodProblem(
                        pod=name,
                        reason="Unschedulable",
                        message=_str(condition.get("message")),
                        event=event,
                        observed_at=event_at or parse_time(condition.get("lastTransitionTime")),
                        since=parse_time(condition.get("lastTransitionTime")),
                        requests_gpu=gpu,
                        role=role,
                    )
                )
        statuses = list(status.get("initContainerStatuses") or []) + list(
            status.get("containerStatuses") or []
        )
        for container in statuses:
            waiting = _get(container, "state", "waiting") or {}
            reason = _str(waiting.get("reason"))
            if reason not in STUCK_WAITING_REASONS:
                continue
            message = _str(waiting.get("message"))
            terminated = _get(container, "lastState", "terminated") or {}
            if reason == "CrashLoopBackOff" and terminated:
                exit_code = terminated.get("exitCode")
                detail = _str(terminated.get("message")) or _str(terminated.get("reason"))
                message = (
                    f"restarted {container.get('restartCount', 0)} times, last exit code "
                    f"{exit_code}" + (f": {detail[:300]}" if detail else "")
                )
            event, event_at = latest_event(name, _EVENT_REASONS_FOR[reason])
            since = None
            if reason in IMAGE_PULL_REASONS:
                # Kubelet retries pulls with a backoff; how long they have been failing is the
                # first pull-failure event of this pod (a waiting state has no timestamp).
                firsts = [
                    t
                    for e in events_by_pod.get(name, [])
                    if _is_pull_failure(e) and (t := event_first_time(e)) is not None
                ]
                since = min(firsts) if firsts else None
            problems.append(
                PodProblem(
                    pod=name,
                    reason=reason,
                    message=message,
                    container=_str(container.get("name")),
                    event=event,
                    observed_at=event_at,
                    since=since,
                    requests_gpu=gpu,
                    role=role,
                )
            )
    return problems


@dataclass(frozen=True)
class ObjectWarning:
    """A Warning event recorded on the RayService or one of its RayClusters."""

    kind: str
    name: str
    reason: str
    message: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None

    def describe(self) -> str:
        times = f" x{self.count}" if self.count > 1 else ""
        return f"{self.kind} {self.name}: {self.reason}{times}: {self.message}"


def ray_object_warnings(
    events_json: Mapping[str, Any] | None, rayservice: str, cluster_names: Iterable[str] = ()
) -> list[ObjectWarning]:
    """Warning events whose ``involvedObject`` is the RayService or one of its RayClusters
    (the current cluster names, or before KubeRay reports them, ``<rayservice>-*``), newest
    first. Pod creation refused by the API server shows up only here: there is no pod."""
    names = set(cluster_names)
    found = []
    for item in _items(events_json):
        if item.get("type") != "Warning":
            continue
        involved = item.get("involvedObject") or item.get("regarding") or {}
        kind, name = _str(involved.get("kind")), _str(involved.get("name"))
        if kind == "RayService" and name != rayservice:
            continue
        if kind == "RayCluster" and not (
            name in names or (not names and name.startswith(f"{rayservice}-"))
        ):
            continue
        if kind not in RAY_OBJECT_KINDS:
            continue
        found.append(
            ObjectWarning(
                kind=kind,
                name=name,
                reason=_str(item.get("reason")),
                message=" ".join(_str(item.get("message") or item.get("note")).split()),
                count=event_count(item),
                first_seen=event_first_time(item),
                last_seen=event_time(item),
            )
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    found.sort(key=lambda w: w.last_seen or oldest, reverse=True)
    return found


# --- Serve replicas and placement ----------------------------------------------------------


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
    deployments = _get(serve_json, "applications", app_name, "deployments") or {}
    replicas = []
    for dep_name, deployment in sorted(deployments.items()):
        name = _str(deployment.get("name")) or dep_name
        for replica in deployment.get("replicas") or []:
            if not isinstance(replica, dict):
                continue
            pid = replica.get("pid")
            replicas.append(
                ServeReplica(
                    deployment=name,
                    role=deployment_role(name),
                    state=_str(replica.get("state")),
                    node_id=_str(replica.get("node_id")),
                    node_ip=_str(replica.get("node_ip")),
                    actor_name=_str(replica.get("actor_name")),
                    worker_id=_str(replica.get("worker_id")),
                    pid=pid if isinstance(pid, int) else None,
                    log_file_path=_str(replica.get("log_file_path")),
                    replica_id=_str(replica.get("replica_id")),
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
    for pod in _items(pods_json):
        role = _str(_get(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL))
        if role not in ("head", "worker") or _get(pod, "metadata", "deletionTimestamp"):
            continue
        pods.append(
            PodPlacement(
                name=_str(_get(pod, "metadata", "name")),
                role=role,
                node=_str(_get(pod, "spec", "nodeName")),
                ip=_str(_get(pod, "status", "podIP")),
                phase=_str(_get(pod, "status", "phase")),
                gpus=_pod_gpus(pod),
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
            if shared:
                return Placement(
                    method="serve-replicas",
                    pods=tuple(pods),
                    prefill_nodes=prefill,
                    decode_nodes=decode,
                    ok=False,
                    conflict=True,
                    why=(
                        f"prefill and decode replicas share node(s) {', '.join(shared)}; give "
                        "each worker pod exactly one replica's GPUs (tensorParallelSize) so "
                        "Serve must place them apart"
                    ),
                )
            return Placement(
                method="serve-replicas",
                pods=tuple(pods),
                prefill_nodes=prefill,
                decode_nodes=decode,
                ok=True,
                why=f"prefill on {', '.join(prefill)}, decode on {', '.join(decode)}",
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
    if shared:
        return Placement(
            method="serve-replicas",
            pods=tuple(pods),
            prefill_nodes=(),
            decode_nodes=(),
            engine_nodes=nodes,
            ok=False,
            conflict=True,
            why=(
                f"several engine replicas share node(s) {', '.join(shared)}; give each worker "
                "pod exactly one GPU so each engine gets a GPU node of its own"
            ),
        )
    return Placement(
        method="serve-replicas",
        pods=tuple(pods),
        prefill_nodes=(),
        decode_nodes=(),
        engine_nodes=nodes,
        ok=True,
        why=f"aggregated: {len(replicas)} engine(s), each on its own node: {', '.join(nodes)}",
    )


# --- NIXL backend from logs ----------------------------------------------------------------


def nixl_backend(log_text: str) -> str | None:
    """The NIXL backend a process instantiated ("LIBFABRIC" / "UCX"), the last one if several."""
    matches = NIXL_BACKEND_RE.findall(log_text or "")
    return matches[-1].upper() if matches else None


@dataclass(frozen=True)
class NixlTarget:
    """One Ray worker node whose logs should show which NIXL backend its engine created."""

    label: str  # e.g. "prefill@10.0.1.5", or "node@10.0.1.5" when roles are unknown
    node_id: str
    worker_ids: tuple[str, ...] = ()
    role: str = ""
    replica_log: str = ""


def nixl_targets(
    serve_json: Mapping[str, Any] | None,
    app_name: str,
    ray_nodes: Sequence[Mapping[str, Any]] = (),
) -> list[NixlTarget]:
    """Nodes to read, prefill first then decode; from Serve replicas when known, else every
    alive non-head Ray node from the state API's node list."""
    targets: dict[str, NixlTarget] = {}
    replicas = [r for r in serve_replicas(serve_json, app_name) if r.role in ("prefill", "decode")]
    for replica in sorted(replicas, key=lambda r: (r.role != "prefill", r.node_ip)):
        if not replica.node_id:
            continue
        key = f"{replica.role}:{replica.node_id}"
        existing = targets.get(key)
        workers = (existing.worker_ids if existing else ()) + (
            (replica.worker_id,) if replica.worker_id else ()
        )
        targets[key] = NixlTarget(
            label=f"{replica.role}@{replica.node_ip or replica.node_id[:8]}",
            node_id=replica.node_id,
            worker_ids=workers,
            role=replica.role,
            replica_log=(existing.replica_log if existing else "")
            or replica.log_file_path.lstrip("/"),
        )
    if targets:
        return list(targets.values())
    result = []
    for node in ray_nodes:
        if node.get("is_head_node") or _str(node.get("state")) not in ("", "ALIVE"):
            continue
        node_id = _str(node.get("node_id"))
        if node_id:
            ip = _str(node.get("node_ip"))
            result.append(NixlTarget(label=f"node@{ip or node_id[:8]}", node_id=node_id))
    return sorted(result, key=lambda t: t.label)


_SKIP_LOG_PREFIXES = (
    "raylet",
    "gcs_server",
    "dashboard",
    "log_monitor",
    "monitor",
    "runtime_env",
    "python-core-worker",
    "python-core-driver",
    "events/",
    "debug_state",
    "ray_client_server",
)


# Ray 2.58 names a worker process's stdout/stderr ``worker-<worker id>-<job id>-<pid>.out`` /
# ``.err`` (``ray_logging.get_worker_log_file_name``). With ``RAY_ROTATION_MAX_BYTES`` in the
# worker's environment the C++ core worker rotates them (``core_worker_process.cc``: the
# stdout/stderr redirection takes ``GetRayLogRotationMaxBytesOrDefault``, 0 = never rotate when
# the variable is unset, and ``RAY_ROTATION_BACKUP_COUNT``, ``src/ray/util/logging.cc``) through
# spdlog's rotating sink, which Ray patches to append the index
# (``thirdparty/patches/spdlog-rotation-file-format.patch``): ``.out.1`` is the newest rotated
# piece, the highest index the oldest, and a piece past the backup count is deleted.
_WORKER_LOG_RE = re.compile(r"^worker-([0-9a-f]+)-([0-9a-f]+)-(\d+)\.(out|err)(?:\.(\d+))?$")


def _job_number(job_hex: str) -> int | None:
    """A Ray job id as the GCS counted it (``JobID::FromInt`` copies the int's bytes, little
    endian on x86); None for the nil id (all ``ff``: a worker started for no job yet)."""
    try:
        raw = bytes.fromhex(job_hex)
    except ValueError:
        return None
    if not raw or raw == b"\xff" * len(raw):
        return None
    return int.from_bytes(raw, "little")


def oldest_piece(files: Iterable[str], name: str) -> str:
    """The oldest part of ``name``'s log: its rotated piece with the highest index, or ``name``
    itself when it never rotated. Only there can the lines a process logs at start-up be."""
    best, best_index = name, 0
    prefix = name + "."
    for other in files:
        index = other[len(prefix) :] if other.startswith(prefix) else ""
        if index.isdigit() and int(index) > best_index:
            best, best_index = other, int(index)
    return best


def log_files_to_read(
    files: Iterable[str],
    target: NixlTarget,
    max_files: int,
    alive_pids: Iterable[int] | None = None,
) -> list[str]:
    """Choose the log files most likely to hold NIXL's line, most likely first.

    NIXL logs "Backend ... was instantiated" to stdout, so the line lands in a ``worker-*.out``
    (Ray names them ``worker-<worker id>-<job id>-<pid>.out``): the Serve replica's own, or that
    of a vLLM GPU worker actor the engine starts beside it (another worker id). So: the
    replica's ``.out``, the ``.out`` files of its job, any other ``.out``; only then the
    ``.err`` files and the Serve replica log, which would hold the line only if logging were
    redirected. NIXL's LIBFABRIC plugin logs the libfabric provider it chose on stderr, so the
    ``.err`` files of the replica's job come next. Files of other processes (raylet, GCS,
    dashboard...) are never read. Rotated pieces (``.out.1``...) are not listed: they belong to
    the file they rotated from (``oldest_piece``).

    Evidence must come from the engine that serves now, not from a dead one whose files stay
    on the node. ``alive_pids`` (the pids of the node's ALIVE actors: the replica and its
    engine's GPU workers) drops every worker file of another pid, as long as one listed worker
    file is alive (None: liveness unknown). A worker of a job older than the replica's own is
    dropped too: Ray counts job ids up, and the replica's engine runs in the replica's job or
    one started after it. Within each rank the newest file (latest job, then highest pid)
    comes first.
    """
    unique = list(dict.fromkeys(files))

    def base(name: str) -> str:
        return name.rsplit("/", 1)[-1]

    workers = {
        name: match.groups()
        for name in unique
        if (match := _WORKER_LOG_RE.match(base(name))) and match.group(5) is None
    }
    own_jobs = {job for worker, job, *_ in workers.values() if worker in target.worker_ids}
    own_numbers = [n for job in own_jobs if (n := _job_number(job)) is not None]
    alive = set(alive_pids) if alive_pids is not None else set()
    any_alive = any(int(pid) in alive for _, _, pid, *_ in workers.values())

    def stale(job: str, pid: str) -> bool:
        if any_alive and int(pid) not in alive:
            return True
        number = _job_number(job)
        return bool(own_numbers) and number is not None and number < min(own_numbers)

    def rank(name: str) -> int | None:
        b = base(name)
        if any(name.startswith(p) or b.startswith(p) for p in _SKIP_LOG_PREFIXES):
            return None
        parts = workers.get(name)
        if parts:
            worker, job, pid, stream, _ = parts
            if stale(job, pid):
                return None
            own = worker in target.worker_ids
            if stream == "out":
                return 0 if own else 1 if job in own_jobs else 2
            # NIXL's C++ plugins log to stderr (the libfabric provider line), so the .err of
            # the engine's own job comes before other processes' .err files.
            return 3 if own else 4 if job in own_jobs else 5
        if _WORKER_LOG_RE.match(b):
            return None  # a rotated piece: read through the file it rotated from
        if target.replica_log and base(target.replica_log) == b:
            return 4
        if b.startswith("worker-") and b.endswith(".out"):
            return 2
        if b.startswith("worker-") and b.endswith(".err"):
            return 5
        if (
            b.startswith("replica_")
            and b.endswith(".log")
            and (not target.role or target.role in b.lower())
        ):
            return 6
        return None

    def newest_first(name: str) -> tuple[int, int]:
        parts = workers.get(name)
        if not parts:
            return (0, 0)
        number = _job_number(parts[1])
        return (-(number if number is not None else -1), -int(parts[2]))

    ranked = [(r, newest_first(name), name) for name in unique if (r := rank(name)) is not None]
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [name for _, _, name in ranked[:max_files]]


@dataclass(frozen=True)
class KvBackendReport:
    """NIXL backend per worker: "LIBFABRIC"/"UCX", or "unknown: <reason>"."""

    backends: tuple[tuple[str, str], ...] = ()
    reason: str = ""  # set when nothing could be read at all
    sources: Mapping[str, str] = field(default_factory=dict)
    # The libfabric provider per LIBFABRIC worker ("efa"/"tcp"/"sockets"/"unknown: <why>").
    providers: tuple[tuple[str, str], ...] = ()
    files_read: int = 0
    out_of_budget: bool = False
    # Engines whose start-up lines could not be read in full (the file rotated past them,
    # they lie beyond the head read, a read failed or the budget ran out): for these an
    # "unknown" provider says nothing about the engine, only about its logs.
    unseen: tuple[str, ...] = ()

    def looked_at(self) -> str:
        """What was read, for a message that says where the evidence was sought."""
        if not self.backends:
            return f"the Ray dashboard's log API ({self.reason or 'no worker logs read'})"
        labels = ", ".join(label for label, _ in self.backends)
        return (
            f"{self.files_read} worker log file(s) of {labels} through the Ray dashboard's log "
            "API (worker-*.out and .err of the engine's Ray job)"
        )

    def provider_value(self, configured: str) -> str:
        """The ``KvProvider`` Data value: the libfabric provider per worker, prefill first."""
        if configured.upper() != "LIBFABRIC":
            return "none (UCX: no libfabric provider)"
        if not self.providers:
            return f"unknown: {self.reason or 'no worker logs read'}"
        return ",".join(provider for _, provider in self.providers)

    def value(self) -> str:
        """The ``KvBackend`` Data value: comma-joined per worker, prefill first."""
        if not self.backends:
            return f"unknown: {self.reason or 'no worker logs read'}"
        return ",".join(backend for _, backend in self.backends)

    def fallbacks(self, configured: str) -> list[str]:
        """Workers that instantiated UCX although LIBFABRIC was configured."""
        if configured.upper() != "LIBFABRIC":
            return []
        return [label for label, backend in self.backends if backend == "UCX"]
