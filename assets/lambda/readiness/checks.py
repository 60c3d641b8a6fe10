"""Pure evaluations of Kubernetes and Ray JSON: dicts in, frozen dataclasses out, no I/O.

Shared by the readiness Lambda (which decides pending / done / failed from them) and the
project CLI's ``status`` and ``efa-check`` commands (which print them), so a verdict shown to a
person and the verdict that fails a deploy come from the same code.

Time-dependent judgements (how long has a pod been unschedulable?) take ``now`` explicitly
rather than reading the clock, so they stay deterministic in tests.

Here: the GPU nodes, the RayService, the pods and the Warning events; where the engines run is
``placement``'s, which NIXL log files to read ``nixl_logs``'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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


def list_items(list_json: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    items = (list_json or {}).get("items")
    return [item for item in items or [] if isinstance(item, dict)]


def dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def as_str(value: Any) -> str:
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
    for item in list_items(nodes_json):
        labels = dig(item, "metadata", "labels") or {}
        if labels.get(GPU_NODE_LABEL_KEY) != GPU_NODE_LABEL_VALUE:
            continue
        ready_condition: dict[str, Any] = next(
            (c for c in dig(item, "status", "conditions") or [] if c.get("type") == "Ready"),
            {},
        )
        allocatable = dig(item, "status", "allocatable") or {}
        capacity = dig(item, "status", "capacity") or {}
        nodes.append(
            GpuNode(
                name=as_str(dig(item, "metadata", "name")),
                ready=ready_condition.get("status") == "True",
                ready_since=parse_time(ready_condition.get("lastTransitionTime")),
                gpu_allocatable=quantity(allocatable.get(GPU_RESOURCE)),
                gpu_capacity=quantity(capacity.get(GPU_RESOURCE)),
                efa_allocatable=quantity(allocatable.get(EFA_RESOURCE)),
                efa_capacity=quantity(capacity.get(EFA_RESOURCE)),
                instance_type=as_str(labels.get(INSTANCE_TYPE_LABEL)),
                zone=as_str(labels.get(ZONE_LABEL)),
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
    text = as_str(dig(rs_json, "spec", "serveConfigV2"))
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
    generation = dig(rs_json, "metadata", "generation")
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
    app = dig(serving, "applicationStatuses", app_name) or {}
    deployments = tuple(
        DeploymentState(
            name=name,
            status=as_str(value.get("status")),
            message=as_str(value.get("message")),
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
    terminal_reason = as_str(terminal.get("reason")) if terminal else None
    terminal_message = ""
    if terminal is not None and terminal_reason:
        terminal_message = TERMINAL_CONDITION_REASONS[terminal_reason]
        if terminal.get("message"):
            terminal_message += f" (condition {terminal.get('type')}: {terminal['message']})"
    return RayServiceState(
        exists=True,
        app_name=app_name,
        ready_status=as_str(ready.get("status")) or None,
        ready_reason=as_str(ready.get("reason")),
        ready_message=as_str(ready.get("message")),
        ready_since=parse_time(ready.get("lastTransitionTime")),
        app_status=as_str(app.get("status")) or None,
        app_message=as_str(app.get("message")),
        deployments=deployments,
        terminal_reason=terminal_reason,
        terminal_message=terminal_message,
        upgrade_in_progress=upgrade,
        generation_current=generation_current,
        generation=generation,
        observed_generation=observed,
        active_cluster=as_str(active.get("rayClusterName")),
        pending_cluster=as_str(dig(status, "pendingServiceStatus", "rayClusterName")),
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
    for pod in list_items(pods_json):
        cluster = as_str(dig(pod, "metadata", "labels", RAY_CLUSTER_LABEL))
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
    for pod in list_items(pods_json):
        if as_str(dig(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL)) != "worker":
            continue
        workers += 1
        found = ""
        for container in dig(pod, "spec", "containers") or []:
            for item in container.get("env") or []:
                if item.get("name") == "FI_PROVIDER" and isinstance(item.get("value"), str):
                    found = item["value"]
        values.add(found)
    return values.pop() if workers and len(values) == 1 else ""


def pod_gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for container in dig(pod, "spec", "containers") or []:
        resources = container.get("resources") or {}
        limit = quantity((resources.get("limits") or {}).get(GPU_RESOURCE))
        request = quantity((resources.get("requests") or {}).get(GPU_RESOURCE))
        total += max(limit, request)
    return total


def event_time(event: Mapping[str, Any]) -> datetime | None:
    candidates = [
        parse_time(dig(event, "series", "lastObservedTime")),
        parse_time(event.get("lastTimestamp")),
        parse_time(event.get("eventTime")),
        parse_time(event.get("firstTimestamp")),
        parse_time(dig(event, "metadata", "creationTimestamp")),
    ]
    times = [t for t in candidates if t is not None]
    return max(times) if times else None


def event_first_time(event: Mapping[str, Any]) -> datetime | None:
    """When the (possibly aggregated) event was first seen: core/v1 ``firstTimestamp``, or the
    ``eventTime`` of an events.k8s.io-style series, else the Event object's creation."""
    candidates = [
        parse_time(event.get("firstTimestamp")),
        parse_time(event.get("eventTime")),
        parse_time(dig(event, "metadata", "creationTimestamp")),
    ]
    times = [t for t in candidates if t is not None]
    return min(times) if times else None


def event_count(event: Mapping[str, Any]) -> int:
    """How many times the event was seen (core/v1 ``count`` or ``series.count``), at least 1."""
    counts = [quantity(event.get("count")), quantity(dig(event, "series", "count"))]
    return max(1, *counts)


def _is_pull_failure(event: Mapping[str, Any]) -> bool:
    """Kubelet's image-pull failures: reason ``Failed`` with "Failed to pull image ..." or
    "Error: ErrImagePull"/"Error: ImagePullBackOff", and ``BackOff`` "Back-off pulling image"."""
    reason = event.get("reason")
    message = as_str(event.get("message") or event.get("note"))
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
    for item in list_items(events_json):
        involved = item.get("involvedObject") or item.get("regarding") or {}
        if involved.get("kind", "Pod") != "Pod":
            continue
        events_by_pod.setdefault(as_str(involved.get("name")), []).append(item)

    def latest_event(pod: str, reasons: Sequence[str]) -> tuple[str, datetime | None]:
        matching = [e for e in events_by_pod.get(pod, []) if e.get("reason") in reasons]
        if not matching:
            return "", None
        event = max(matching, key=lambda e: event_time(e) or datetime.min.replace(tzinfo=UTC))
        text = f"{event.get('reason')}: {as_str(event.get('message') or event.get('note'))}"
        return text.strip(), event_time(event)

    problems: list[PodProblem] = []
    for pod in list_items(pods_json):
        if dig(pod, "metadata", "deletionTimestamp"):
            continue  # on its way out (e.g. the old cluster after an upgrade)
        name = as_str(dig(pod, "metadata", "name"))
        role = as_str(dig(pod, "metadata", "labels", RAY_NODE_TYPE_LABEL))
        gpu = pod_gpus(pod) > 0
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
                        message=as_str(condition.get("message")),
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
            waiting = dig(container, "state", "waiting") or {}
            reason = as_str(waiting.get("reason"))
            if reason not in STUCK_WAITING_REASONS:
                continue
            message = as_str(waiting.get("message"))
            terminated = dig(container, "lastState", "terminated") or {}
            if reason == "CrashLoopBackOff" and terminated:
                exit_code = terminated.get("exitCode")
                detail = as_str(terminated.get("message")) or as_str(terminated.get("reason"))
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
                    container=as_str(container.get("name")),
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
    for item in list_items(events_json):
        if item.get("type") != "Warning":
            continue
        involved = item.get("involvedObject") or item.get("regarding") or {}
        kind, name = as_str(involved.get("kind")), as_str(involved.get("name"))
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
                reason=as_str(item.get("reason")),
                message=" ".join(as_str(item.get("message") or item.get("note")).split()),
                count=event_count(item),
                first_seen=event_first_time(item),
                last_seen=event_time(item),
            )
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    found.sort(key=lambda w: w.last_seen or oldest, reverse=True)
    return found
