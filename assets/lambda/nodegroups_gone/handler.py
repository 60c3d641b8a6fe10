"""Holds the EKS cluster's deletion until it has no node group left (``Custom::NodegroupsGone``).

EKS refuses to delete a cluster that still has managed node groups (``DeleteCluster``:
``ResourceInUseException``, "Cluster has nodegroups attached"), and the GPU node group lives in
the GpuNodes stack, which no stack dependency orders against the Cluster stack (it deploys
beside it). When the Cluster stack rolls back its first create while that node group is being
created, or ``cdk destroy`` deletes both stacks at once, the cluster's delete would fail and
leave the stack ``ROLLBACK_FAILED`` / ``DELETE_FAILED``. This custom resource refers to the
cluster, so CloudFormation deletes it before the cluster, and its Delete waits:

* no node group left (or no cluster: never created, already gone): done at once;
* a node group ``CREATING`` or ``DELETING`` (the GpuNodes stack rolling back or being
  destroyed): wait, up to ``WaitSeconds`` from the start of the Delete;
* a node group in any other state (``ACTIVE``, ``DEGRADED``, ...) for ``GraceSeconds``
  (since the Delete began, or since EKS last changed it, whichever is later: a concurrent
  destroy deletes it within that time): fail, naming it and the fix (destroy the GpuNodes
  stack first, then delete this stack again). The same rule holds for node groups of any
  other stack (the system node group's Workload stack is deleted before this one).

It only guards a delete of the cluster: the Delete CloudFormation sends while the stack is
``DELETE_IN_PROGRESS`` (destroy) or ``ROLLBACK_IN_PROGRESS`` (a failed first create). A Delete
in any other state (an update's cleanup) returns at once: the cluster stays. Create and Update
change nothing and return at once (the Provider's first ``is_complete``, seconds).

CDK ``custom_resources.Provider`` user handler (``on_event`` + ``is_complete``); standard
library + boto3 only. Resource properties (strings): ``ClusterName``, ``WaitSeconds``,
``GraceSeconds``, ``GpuNodesStack`` (the GpuNodes stack's CDK path, for the fix).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import props as props_helpers
from pd_lambda import rollback
from pd_lambda.clients import CLIENT_CONFIG, SLOWEST_CALL_SECONDS

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

STARTED_AT_KEY = "NodegroupsGoneStartedAt"  # top level: never part of the resource's Data
GUARD_KEY = "NodegroupsGoneGuard"  # top level: "true" when this Delete deletes the cluster
# Must match the construct's query interval and Lambda timeout
# (pd_constructs/lifecycle/nodegroups_gone.py).
QUERY_INTERVAL_SECONDS = 30
LAMBDA_TIMEOUT_SECONDS = 60
# ListNodegroups returns at most 100 per page; EKS allows 30 managed node groups per cluster
# (Amazon EKS service quotas), so one page is the norm and a few are plenty.
LIST_PAGE_SIZE = 100
MAX_LIST_PAGES = 3
MAX_REASON_CHARS = 1000
# The stack statuses in which a Delete of this resource precedes the cluster's own delete.
CLUSTER_DELETED_WITH = ("DELETE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS")
# Someone is creating or deleting the node group: wait for it (up to WaitSeconds).
MOVING = ("CREATING", "DELETING")
UNKNOWN = "UNKNOWN"  # DescribeNodegroup failed on this poll: neither moving nor stuck
REQUIRED_PROPERTIES = ("ClusterName", "WaitSeconds", "GraceSeconds", "GpuNodesStack")


class GuardError(RuntimeError):
    """A terminal failure: the delete stops now, with this message as the reason."""


@dataclass(frozen=True)
class Props:
    cluster_name: str
    wait_seconds: int
    grace_seconds: int
    gpu_nodes_stack: str

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        props_helpers.require(
            properties, REQUIRED_PROPERTIES, construct="NodegroupsGone", error=GuardError
        )
        return cls(
            cluster_name=str(properties["ClusterName"]),
            wait_seconds=props_helpers.positive_int(properties, "WaitSeconds", error=GuardError),
            grace_seconds=props_helpers.positive_int(properties, "GraceSeconds", error=GuardError),
            gpu_nodes_stack=str(properties["GpuNodesStack"]),
        )


@dataclass(frozen=True)
class Nodegroup:
    """One node group of the cluster as this poll saw it; ``modified`` is EKS's ``modifiedAt``
    (epoch seconds), None when unknown."""

    name: str
    status: str
    modified: float | None = None


# --- dependencies (replaced in tests) ------------------------------------------------------

clock: Callable[[], float] = time.time


def _client(name: str) -> Any:
    return boto3.client(name, config=CLIENT_CONFIG)


# --- the Provider contract -----------------------------------------------------------------


def on_event(event: Mapping[str, Any], context: Any, cloudformation: Any = None) -> dict[str, Any]:
    """Create: the cluster's name is the physical id. Update: the physical id stays (the Delete
    then carries the current properties). Delete: guard (and start the clock) only when the
    stack is deleting the cluster (:func:`guards_this_delete`)."""
    request = event.get("RequestType")
    current = str(event.get("PhysicalResourceId") or "")
    if request == "Delete":
        guard = guards_this_delete(event, cloudformation)
        LOG.info("Delete %s: %s", current, "waits for the node groups" if guard else "no guard")
        answer: dict[str, Any] = {"PhysicalResourceId": current}
        if guard:
            answer[GUARD_KEY] = "true"
            answer[STARTED_AT_KEY] = str(int(clock()))
        return answer
    props = Props.from_properties(event.get("ResourceProperties") or {})
    LOG.info("%s %s: nothing to do until the cluster is deleted", request, props.cluster_name)
    return {
        "PhysicalResourceId": current if request == "Update" and current else props.cluster_name
    }


def is_complete(event: Mapping[str, Any], context: Any, eks: Any = None) -> dict[str, Any]:
    """One poll: complete at once for Create, Update and an unguarded Delete; for a guarded
    Delete, complete when no node group is left, pending while one is moving, raising
    :class:`GuardError` when one is stuck or the wait is over."""
    if event.get("RequestType") != "Delete" or event.get(GUARD_KEY) != "true":
        return {"IsComplete": True}
    props = Props.from_properties(event.get("ResourceProperties") or {})
    now = clock()
    started = props_helpers.started_at(event, STARTED_AT_KEY, now)
    time_left = props_helpers.time_left(context)
    try:
        seen, note = look(props, eks or _client("eks"), time_left=time_left)
        waiting = None if seen is None else decide(props, seen, started=started, now=now)
    except GuardError as exc:
        raise props_helpers.poll_failed(
            GuardError,
            f"EKS cluster {props.cluster_name} cannot be deleted yet: {exc}",
            MAX_REASON_CHARS,
        ) from None
    if waiting is None:
        LOG.info("poll: COMPLETE: %s", note or f"cluster {props.cluster_name} has no node group")
        return {"IsComplete": True}
    LOG.info(
        "poll: pending (%.0f s of %d s): %s%s",
        now - started,
        props.wait_seconds,
        waiting,
        f"; {note}" if note else "",
    )
    return {"IsComplete": False}


def guards_this_delete(event: Mapping[str, Any], cloudformation: Any = None) -> bool:
    """Whether this Delete precedes the cluster's own: the event's stack (``StackId``, the one
    stack the role may describe) is ``DELETE_IN_PROGRESS`` or ``ROLLBACK_IN_PROGRESS``. When
    CloudFormation cannot say (an API error, no stack id: ``pd_lambda.rollback.stack_status``
    answers ""), guard: waiting for node groups that are not there costs one poll, deleting a
    cluster that has some fails the stack."""
    status = rollback.stack_status(
        event, cloudformation, make_client=lambda: _client("cloudformation")
    )
    return status == "" or status in CLUSTER_DELETED_WITH


# --- one poll ------------------------------------------------------------------------------


def look(
    props: Props, eks: Any, *, time_left: Callable[[], float] | None = None
) -> tuple[list[Nodegroup] | None, str]:
    """(the cluster's node groups, a note): ``(None, why)`` when the cluster is gone or was never
    created (nothing to wait for); ``([], "")`` when it has none. An API error other than a
    missing permission (which raises) counts as a node group of unknown state for this poll,
    so a blip never fails the delete, nor lets it through."""
    names: list[str] = []
    request: dict[str, Any] = {"clusterName": props.cluster_name, "maxResults": LIST_PAGE_SIZE}
    try:
        for _ in range(MAX_LIST_PAGES):
            page = eks.list_nodegroups(**request)
            names += [str(n) for n in page.get("nodegroups") or []]
            token = page.get("nextToken")
            if not token:
                break
            request["nextToken"] = token
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None, f"cluster {props.cluster_name} does not exist: no node group to wait for"
        _raise_if_denied(exc, "eks:ListNodegroups")
        return [Nodegroup("(list failed)", UNKNOWN)], f"eks:ListNodegroups failed: {_code(exc)}"
    except BotoCoreError as exc:
        return [Nodegroup("(list failed)", UNKNOWN)], f"eks:ListNodegroups failed: {exc}"
    seen: list[Nodegroup] = []
    for name in names:
        if time_left is not None and time_left() < SLOWEST_CALL_SECONDS:
            seen.append(Nodegroup(name, UNKNOWN))  # not read on this poll
            continue
        found = describe(props, eks, name)
        if found is not None:
            seen.append(found)
    return seen, ""


def describe(props: Props, eks: Any, name: str) -> Nodegroup | None:
    """One node group's state; None when it is gone since the list."""
    try:
        nodegroup = (
            eks.describe_nodegroup(clusterName=props.cluster_name, nodegroupName=name).get(
                "nodegroup"
            )
            or {}
        )
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None
        _raise_if_denied(exc, "eks:DescribeNodegroup")
        return Nodegroup(name, UNKNOWN)
    except BotoCoreError:
        return Nodegroup(name, UNKNOWN)
    return Nodegroup(
        name, str(nodegroup.get("status") or UNKNOWN), _epoch(nodegroup.get("modifiedAt"))
    )


def decide(props: Props, seen: Sequence[Nodegroup], *, started: float, now: float) -> str | None:
    """None when no node group is left (the cluster may go); else what the delete waits for.

    Raises :class:`GuardError` when a node group has been neither ``CREATING`` nor
    ``DELETING`` for ``GraceSeconds`` (counted from the later of the Delete's start and the
    node group's ``modifiedAt``: a group that just finished creating gets the whole grace
    before its deletion must have begun), or when ``WaitSeconds`` have passed since the start.
    """
    if not seen:
        return None
    stuck = [
        n
        for n in seen
        if n.status not in MOVING
        and n.status != UNKNOWN
        and now - max(started, n.modified or started) >= props.grace_seconds
    ]
    if stuck:
        raise GuardError(
            f"{_listed(stuck)} {'is' if len(stuck) == 1 else 'are'} not being deleted (EKS "
            "refuses to delete a cluster with node groups). Destroy "
            f"{props.gpu_nodes_stack} first (npx cdk destroy '{props.gpu_nodes_stack}'; "
            "a node group of another stack or made by hand: delete it), then delete this "
            "stack again."
        )
    waiting = f"waiting for {_listed(seen)}"
    if now - started >= props.wait_seconds:
        raise GuardError(
            f"gave up after {(now - started) / 60:.0f} min {waiting}. Check the node groups "
            "in the EKS console; once they are gone, delete this stack again."
        )
    return waiting


def _listed(nodegroups: Sequence[Nodegroup]) -> str:
    return "node group " + ", ".join(f"{n.name} ({n.status})" for n in nodegroups)


def _epoch(value: Any) -> float | None:
    # botocore parses every timestamp member into a datetime (parsers.DEFAULT_TIMESTAMP_PARSER,
    # utils.parse_timestamp, botocore 1.44); a missing one is None.
    return value.timestamp() if isinstance(value, datetime) else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _raise_if_denied(exc: ClientError, action: str) -> None:
    """Retrying cannot fix a missing permission: say so now rather than at the end."""
    if _code(exc).startswith("AccessDenied") or _code(exc) == "UnauthorizedOperation":
        message = str(exc.response.get("Error", {}).get("Message", ""))
        raise GuardError(
            f"the guard may not call {action} ({_code(exc)}: {message}); its role's policy "
            "comes from the NodegroupsGone construct"
        )
