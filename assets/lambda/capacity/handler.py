"""GPU capacity watch: fails the deploy early when the GPU node group cannot get instances.

A fixed-size EFA node group in one AZ waits, when that AZ has no capacity for its instance type,
until CloudFormation gives up on it (15-35 minutes, with a generic message). This custom
resource is created beside the node group (no dependency either way) and watches it:

* the node group's own status: ``ACTIVE`` completes the watch; ``CREATE_FAILED``, ``DEGRADED``,
  ``DELETING`` and ``DELETE_FAILED`` fail it, quoting EKS's health issues;
* while it is ``CREATING``/``UPDATING``, the failed launches of its Auto Scaling group since the
  watch started: lack of capacity is tolerated for ``CapacityWaitSeconds`` (EC2 often finds
  capacity on a retry), a vCPU quota or any other launch failure fails the deploy at once.

While the node group is being created (``Create``), the watch also looks at the stack that
creates the cluster (``ClusterStackName``, optional): when it is rolling back, being deleted, or
its operation of this deploy failed, the watch fails at once with that stack's status and
reason. Otherwise that stack's rollback would try to delete the cluster while this node group
exists (EKS refuses: "Cluster has nodegroups attached") and end ``ROLLBACK_FAILED`` while the
GPU nodes keep billing.

CloudFormation then rolls the node group back. CDK ``custom_resources.Provider`` user handler
(``on_event`` + ``is_complete``); standard library + boto3 only. Nothing survives between polls
except the event, so the start time ``on_event`` returns (top level, merged by the Provider into
the event it passes to ``is_complete``) anchors every judgement of time.

Resource properties (CloudFormation sends strings): ``ClusterName``, ``NodegroupName``,
``InstanceType``, ``AvailabilityZone``, ``DesiredSize``, ``CapacityReservationId`` ("" = none),
``CapacityWaitSeconds``, ``TimeoutSeconds``, ``ClusterStackName`` ("" = not watched) and
``Fingerprint`` (only there so that a new launch template makes CloudFormation update, and so
rerun, the watch).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import cluster_stack, rollback
from pd_lambda import props as props_helpers
from pd_lambda.clients import CLIENT_CONFIG, SLOWEST_CALL_SECONDS
from pd_lambda.rollback import ROLLBACK_STATUS
from pd_lambda.settings_hint import set_hint

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

STARTED_AT_KEY = "CapacityWatchStartedAt"  # top-level, so it never leaks into the resource's Data
ROLLBACK_KEY = "CapacityWatchRollback"  # top-level too: marks a rollback Update for is_complete
# Data keys a rollback answer reproduces (from the previous properties): all of them.
DATA_KEYS = ("Nodes",)
# Must match the construct's query interval and Lambda timeout: a poll starts at most one
# interval after the previous one and may run one Lambda timeout.
QUERY_INTERVAL_SECONDS = 30
LAMBDA_TIMEOUT_SECONDS = 60
ACTIVITY_PAGE_SIZE = 20
MAX_ACTIVITY_PAGES = 5
# On Update the node group may still show the old ACTIVE state before EKS starts the update
# that CloudFormation issues at the same time; ACTIVE counts only after this grace.
UPDATE_GRACE_SECONDS = 90
MAX_REASON_CHARS = 1000
MAX_QUOTED_CHARS = 300

FAILED_STATES = ("CREATE_FAILED", "DEGRADED", "DELETING", "DELETE_FAILED")
# How the Cluster stack's failure in this deploy is told from an earlier one's.
CLUSTER_STACK_LEAD_SECONDS = cluster_stack.LEAD_SECONDS
CAPACITY = re.compile(
    r"InsufficientInstanceCapacity|InsufficientCapacity|insufficient capacity"
    r"|not have sufficient\b.*\bcapacity|ReservationCapacityExceeded|no available capacity",
    re.IGNORECASE,
)
QUOTA = re.compile(r"VcpuLimitExceeded|vCPU limit", re.IGNORECASE)
# Service Quotas: the On-Demand vCPU quota that covers an instance family.
QUOTAS = (
    (("g", "vt"), "Running On-Demand G and VT instances", "L-DB2E81BA"),
    (("p",), "Running On-Demand P instances", "L-417A185B"),
)

REQUIRED_PROPERTIES = (
    "ClusterName",
    "NodegroupName",
    "InstanceType",
    "AvailabilityZone",
    "DesiredSize",
    "CapacityWaitSeconds",
    "TimeoutSeconds",
)


class CapacityError(RuntimeError):
    """A terminal failure: the deploy should stop now, with this message as the reason."""


@dataclass(frozen=True)
class Props:
    cluster_name: str
    nodegroup_name: str
    instance_type: str
    availability_zone: str
    desired_size: int
    capacity_reservation_id: str
    capacity_wait_seconds: int
    timeout_seconds: int
    cluster_stack_name: str = ""

    @property
    def physical_id(self) -> str:
        return f"{self.cluster_name}/{self.nodegroup_name}"

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        props_helpers.require(
            properties, REQUIRED_PROPERTIES, construct="GpuCapacityWatch", error=CapacityError
        )
        return cls(
            cluster_name=str(properties["ClusterName"]),
            nodegroup_name=str(properties["NodegroupName"]),
            instance_type=str(properties["InstanceType"]),
            availability_zone=str(properties["AvailabilityZone"]),
            desired_size=_positive_int(properties, "DesiredSize"),
            capacity_reservation_id=str(properties.get("CapacityReservationId") or ""),
            capacity_wait_seconds=_positive_int(properties, "CapacityWaitSeconds"),
            timeout_seconds=_positive_int(properties, "TimeoutSeconds"),
            cluster_stack_name=str(properties.get("ClusterStackName") or ""),
        )


def _positive_int(properties: Mapping[str, Any], key: str) -> int:
    return props_helpers.positive_int(properties, key, error=CapacityError)


# --- dependencies (replaced in tests) ------------------------------------------------------

clock: Callable[[], float] = time.time


def _client(name: str) -> Any:
    return boto3.client(name, config=CLIENT_CONFIG)


# --- the Provider contract -----------------------------------------------------------------


def on_event(event: Mapping[str, Any], context: Any, cloudformation: Any = None) -> dict[str, Any]:
    """Start (Create/Update) or end (Delete) the watch.

    The only AWS call is, on an Update, ``DescribeStacks`` on the event's stack: while it is
    ``UPDATE_ROLLBACK_IN_PROGRESS`` the Update is CloudFormation rolling back, and the watch
    answers at once with the current physical id and the previous ``Data`` (``Nodes``, the
    previous properties' ``DesiredSize``), without looking at EKS or Auto Scaling: a
    ``DEGRADED`` node group or failing launches are usually why the stack rolls back.
    """
    if event.get("RequestType") == "Delete":
        # Never block a rollback or `cdk destroy`; never change the id on Delete.
        LOG.info("Delete %s: nothing to watch", event.get("PhysicalResourceId"))
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "")}
    if event.get("RequestType") == "Update" and stack_rolling_back(event, cloudformation):
        properties = event.get("ResourceProperties") or {}
        data = {"Nodes": str(properties.get("DesiredSize", ""))}
        LOG.info("Update during %s: answering at once with %s", ROLLBACK_STATUS, data)
        return {
            "PhysicalResourceId": event.get("PhysicalResourceId", ""),
            "Data": data,
            ROLLBACK_KEY: "true",
        }
    props = Props.from_properties(event.get("ResourceProperties") or {})
    LOG.info("%s %s: capacity watch starts", event.get("RequestType"), props.physical_id)
    return {"PhysicalResourceId": props.physical_id, STARTED_AT_KEY: str(int(clock()))}


def is_complete(
    event: Mapping[str, Any],
    context: Any,
    eks: Any = None,
    autoscaling: Any = None,
    cloudformation: Any = None,
) -> dict[str, Any]:
    """One poll: ``IsComplete`` False while pending, ``Data`` when ACTIVE; raises on failure.
    A rollback Update (marked by ``on_event``) completes at once with ``on_event``'s Data. On
    Create, the Cluster stack is looked at first (:func:`watch_cluster_stack`)."""
    if settled := rollback.settled(event, ROLLBACK_KEY):
        return settled
    props = Props.from_properties(event.get("ResourceProperties") or {})
    now = clock()
    started = _started_at(event, now)
    elapsed = now - started
    stack_note = ""
    try:
        if event.get("RequestType") == "Create" and props.cluster_stack_name:
            stack_note = watch_cluster_stack(
                props, cloudformation or _client("cloudformation"), started=started
            )
        status, note = poll(
            props,
            eks or _client("eks"),
            autoscaling or _client("autoscaling"),
            started=started,
            now=now,
            updating=event.get("RequestType") == "Update",
            time_left=props_helpers.time_left(context),
        )
    except CapacityError as exc:
        raise props_helpers.poll_failed(
            CapacityError, f"GPU node group {props.physical_id}: {exc}", MAX_REASON_CHARS
        ) from None
    if status == "ACTIVE":
        LOG.info(
            "poll: COMPLETE: %s is ACTIVE with %d nodes", props.physical_id, props.desired_size
        )
        return {"IsComplete": True, "Data": {"Nodes": str(props.desired_size)}}
    if stack_note:
        note = f"{note}; {stack_note}"
    LOG.info("poll: pending (%.0f s of %d s): %s; %s", elapsed, props.timeout_seconds, status, note)
    if elapsed >= _give_up_after(props):
        raise props_helpers.poll_failed(
            CapacityError,
            f"GPU capacity watch gave up on node group {props.physical_id} after "
            f"{elapsed / 60:.0f} min: status {status}; {note}. Check the node group's "
            "health and its Auto Scaling group's activity in the console, then redeploy.",
            MAX_REASON_CHARS,
        )
    return {"IsComplete": False}


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: _client("cloudformation")
)


def watch_cluster_stack(props: Props, cloudformation: Any, *, started: float) -> str:
    """What the Cluster stack (``ClusterStackName``) is doing, for the log; raises
    :class:`CapacityError` when it is rolling back or being deleted, or its operation of this
    deploy failed (pd_lambda.cluster_stack): its rollback deletes the cluster, which EKS
    refuses while this node group exists. An API error (or no such stack yet) is noted, never
    fatal, except a missing permission."""
    name = props.cluster_stack_name
    try:
        stack = cluster_stack.read(cloudformation, name)
    except ClientError as exc:
        _raise_if_denied(exc, f"cloudformation:DescribeStacks on {name}")
        return f"cloudformation:DescribeStacks {name} failed: {_code(exc)}"
    except BotoCoreError as exc:
        return f"cloudformation:DescribeStacks {name} failed: {exc}"
    if stack is None:
        return f"stack {name} does not exist"
    if stack.failing(started=started, also=("DELETE_IN_PROGRESS",)):
        raise CapacityError(
            f"the Cluster stack {name} is {stack.status} ({stack.reason}); its cluster cannot "
            "be deleted while this node group exists, so the GPU node stack stops creating it "
            "and rolls it back. Fix the Cluster stack's failure, then redeploy."
        )
    if stack.failed_earlier:
        return f"stack {name} is {stack.status} from an earlier deploy"
    return f"stack {name} is {stack.status}"


def _started_at(event: Mapping[str, Any], now: float) -> float:
    return props_helpers.started_at(event, STARTED_AT_KEY, now)


def _give_up_after(props: Props) -> float:
    """Seconds after the start at which a still-pending poll raises with our own message.

    The Provider's total timeout would end the wait with a bare "Operation timed out", so we
    stop first: polls are at most one query interval plus one Lambda run apart.
    """
    margin = QUERY_INTERVAL_SECONDS + LAMBDA_TIMEOUT_SECONDS
    return max(props.timeout_seconds / 2, props.timeout_seconds - margin)


def _one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    return props_helpers.one_line(text, limit)


# --- one poll ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failed (or cancelled) launch of the node group's Auto Scaling group."""

    kind: str  # "capacity", "quota" or "other"
    started: float
    message: str


def poll(
    props: Props,
    eks: Any,
    autoscaling: Any,
    *,
    started: float,
    now: float,
    updating: bool = False,
    time_left: Callable[[], float] | None = None,
) -> tuple[str, str]:
    """(node group status, what we are waiting for); raises :class:`CapacityError`.

    API errors (throttling, a network blip) make the poll pending, so a blip never fails a
    deploy, but a persistent one shows up in the timeout message.
    """
    try:
        found = eks.describe_nodegroup(
            clusterName=props.cluster_name, nodegroupName=props.nodegroup_name
        )
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return "NOT_FOUND", "the node group does not exist yet"
        _raise_if_denied(exc, "eks:DescribeNodegroup")
        return "UNKNOWN", f"eks:DescribeNodegroup failed: {_code(exc)}: {_error_message(exc)}"
    except BotoCoreError as exc:
        return "UNKNOWN", f"eks:DescribeNodegroup failed: {exc}"
    nodegroup = found.get("nodegroup") or {}
    status = str(nodegroup.get("status", "UNKNOWN"))
    if status in FAILED_STATES:
        raise CapacityError(
            f"status {status}: {_health_issues(nodegroup) or 'EKS reports no health issue'}"
        )
    if status == "ACTIVE":
        modified = _epoch(nodegroup.get("modifiedAt"))
        before_update = updating and modified is not None and modified < started
        if before_update and now - started < UPDATE_GRACE_SECONDS:
            return "ACTIVE_BEFORE_UPDATE", "waiting for the node group update to start"
        return status, ""
    groups = [
        g["name"]
        for g in (nodegroup.get("resources") or {}).get("autoScalingGroups") or []
        if g.get("name")
    ]
    if not groups:
        return status, "no Auto Scaling group yet"
    failures: list[Failure] = []
    notes: list[str] = []
    for group in groups:
        if time_left is not None and time_left() < SLOWEST_CALL_SECONDS:
            notes.append("activities not read: this poll ran out of time")
            break
        try:
            failures += failed_launches(autoscaling, group, started, time_left)
        except ClientError as exc:
            _raise_if_denied(exc, "autoscaling:DescribeScalingActivities")
            notes.append(f"autoscaling:DescribeScalingActivities failed for {group}: {exc}")
        except BotoCoreError as exc:
            notes.append(f"autoscaling:DescribeScalingActivities failed for {group}: {exc}")
    judge(props, failures, now)
    if failures:
        last = max(failures, key=lambda f: f.started)
        notes.append(
            f"{len(failures)} launches failed for lack of capacity since "
            f"{_clock_time(min(f.started for f in failures))}; last: "
            f"{_quote(last)}"
        )
    else:
        notes.append("no failed launch since the watch started")
    return status, "; ".join(notes)


def failed_launches(
    autoscaling: Any,
    group: str,
    started: float,
    time_left: Callable[[], float] | None = None,
) -> list[Failure]:
    """The group's failed launches since ``started``, newest first (a few pages at most)."""
    failures: list[Failure] = []
    request: dict[str, Any] = {"AutoScalingGroupName": group, "MaxRecords": ACTIVITY_PAGE_SIZE}
    for _ in range(MAX_ACTIVITY_PAGES):
        page = autoscaling.describe_scaling_activities(**request)
        activities = page.get("Activities") or []
        reached_older = False
        for activity in activities:
            when = _epoch(activity.get("StartTime"))
            if when is None or when < started:
                reached_older = True  # from before this deploy: not ours to judge
                continue
            failure = classify(activity, when)
            if failure:
                failures.append(failure)
        token = page.get("NextToken")
        if reached_older or not token or not activities:
            break
        if time_left is not None and time_left() < SLOWEST_CALL_SECONDS:
            break
        request["NextToken"] = token
    return failures


def classify(activity: Mapping[str, Any], when: float) -> Failure | None:
    """A failed launch and its kind, or None for an activity that is not a failure.

    A ``Cancelled`` activity counts only when its message says why (capacity or quota); an
    unexplained cancellation is the group changing its mind, not a failure.
    """
    code = activity.get("StatusCode")
    if code not in ("Failed", "Cancelled"):
        return None
    message = _one_line(activity.get("StatusMessage") or activity.get("Description") or "")
    if QUOTA.search(message):
        kind = "quota"
    elif CAPACITY.search(message):
        kind = "capacity"
    elif code == "Failed":
        kind = "other"
    else:
        return None
    return Failure(kind=kind, started=when, message=message or "(no status message)")


def judge(props: Props, failures: list[Failure], now: float) -> None:
    """Raise for a quota or other launch failure at once, and for lack of capacity once it has
    lasted ``CapacityWaitSeconds``; return while waiting is still worth it."""
    by_kind: dict[str, list[Failure]] = {"quota": [], "other": [], "capacity": []}
    for failure in failures:
        by_kind[failure.kind].append(failure)
    if by_kind["quota"]:
        last = max(by_kind["quota"], key=lambda f: f.started)
        raise CapacityError(
            f"launching {props.instance_type} failed on the vCPU quota: {_quote(last)}. "
            f"Fix: raise the Service Quotas quota {quota_for(props.instance_type)} in this "
            f"region to cover {props.desired_size} x {props.instance_type}, then redeploy."
        )
    if by_kind["other"]:
        last = max(by_kind["other"], key=lambda f: f.started)
        raise CapacityError(
            f"launching {props.instance_type} in {props.availability_zone} failed: "
            f"{_quote(last)}. Fix the cause, then redeploy."
        )
    capacity = by_kind["capacity"]
    if not capacity:
        return
    first = min(f.started for f in capacity)
    if now - first < props.capacity_wait_seconds:
        return
    last = max(capacity, key=lambda f: f.started)
    rid = props.capacity_reservation_id
    lasted = (
        f"for {(now - first) / 60:.0f} min ({len(capacity)} failed launches; last: {_quote(last)})"
    )
    if rid:
        # The launch template targets the reservation by id: EC2 fails a launch beyond its
        # free instances rather than fall back to On-Demand, so another AZ or type is no fix.
        # Launches past the reservation come from other instances holding it, or from Cluster
        # Autoscaler scale-ups (node updates terminate before they launch: EKS's MINIMAL
        # strategy, set on the node group whenever a reservation is).
        raise CapacityError(
            f"No {props.instance_type} capacity in {props.availability_zone} (reservation "
            f"{rid} has no free instance) {lasted}. The launch template targets only that "
            f"reservation, so every launch needs a free instance in it: the {props.desired_size}"
            " nodes and each node the Cluster Autoscaler adds (up to gpuNodeMaxCount). Fixes: "
            f"enlarge it (aws ec2 modify-capacity-reservation --capacity-reservation-id {rid} "
            "--instance-count N) or stop other instances that use it; then redeploy."
        )
    raise CapacityError(
        f"No {props.instance_type} capacity in {props.availability_zone} {lasted}. "
        f"Fixes: {set_hint('gpuCapacityReservationId', 'cr-...')} (an On-Demand Capacity "
        f"Reservation in that AZ), another AZ ({set_hint('gpuAz')}) or another type "
        f"({set_hint('gpuNodeType')}); then redeploy."
    )


def quota_for(instance_type: str) -> str:
    """The Service Quotas quota (name and code) that caps ``instance_type``'s vCPUs."""
    family = instance_type.split(".", 1)[0].lower()
    for prefixes, name, code in QUOTAS:
        if family.startswith(prefixes):
            return f"'{name}' ({code})"
    return f"'Running On-Demand ... instances' that covers the {family} family"


def _quote(failure: Failure) -> str:
    """EC2's message, shortened so the fix after it survives; its final period dropped (our
    sentence goes on)."""
    text = _one_line(failure.message, MAX_QUOTED_CHARS)
    return text[:-1] if text.endswith(".") and not text.endswith("...") else text


def _health_issues(nodegroup: Mapping[str, Any]) -> str:
    issues = (nodegroup.get("health") or {}).get("issues") or []
    return "; ".join(
        f"{i.get('code', '?')}: {i.get('message', '')} "
        f"(resources: {', '.join(i.get('resourceIds') or []) or 'none'})"
        for i in issues
    )


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return None


def _clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))


def _raise_if_denied(exc: ClientError, action: str) -> None:
    """Retrying cannot fix a missing permission: say so now rather than at the timeout."""
    if _code(exc).startswith("AccessDenied") or _code(exc) == "UnauthorizedOperation":
        raise CapacityError(
            f"the capacity watch may not call {action} ({_code(exc)}: {_error_message(exc)}); "
            "its role's policy comes from the GpuCapacityWatch construct"
        )
