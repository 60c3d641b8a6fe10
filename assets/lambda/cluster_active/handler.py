"""Waits until the EKS control plane is ACTIVE at the Kubernetes version the GPU node group
needs, and returns its cluster security group: the GPU node stack's one link to the cluster.

The GPU node stack does not import anything from the Cluster stack, so CloudFormation deploys
both side by side; this custom resource is what the node group (and everything else of that
stack that needs the cluster) waits for instead of the whole Cluster stack (its add-ons and
kubectl provider finish a minute or more after the control plane: docs/deploy-timeline.md).

* ``eks:DescribeCluster`` on ``ClusterName``: ``ACTIVE`` at ``KubernetesVersion`` or later
  completes the wait, with ``ClusterSecurityGroupId`` (``resourcesVpcConfig.
  clusterSecurityGroupId``, the group EKS creates with the cluster and the launch template
  lists). Not found yet (the Cluster stack creates the KMS key first), ``CREATING``,
  ``UPDATING`` (a version upgrade: on an Update the node group so waits for the control
  plane's new version) or an older version: keep waiting. ``FAILED``: fail at once, quoting
  EKS's health issues.
* While waiting, ``cloudformation:DescribeStacks`` on ``ClusterStackName``: a stack rolling
  back, or one whose last operation (since shortly before this wait began) failed, fails the
  wait at once with the stack's status and CloudFormation's reason. An older failure is a
  previous deploy's, left behind until the CDK CLI updates or recreates the stack: waited out.
* Still not ready after ``TimeoutSeconds`` (less one poll): fails with what it saw last.

CDK ``custom_resources.Provider`` user handler (``on_event`` + ``is_complete``); standard
library + boto3 only. On an Update CloudFormation sends while rolling this stack back, it
answers at once with the security group its physical id (``<cluster>/<group id>``) holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import cluster_stack, rollback
from pd_lambda import props as props_helpers
from pd_lambda.clients import CLIENT_CONFIG
from pd_lambda.rollback import ROLLBACK_STATUS

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

STARTED_AT_KEY = "ClusterActiveStartedAt"  # top level: never part of the resource's Data
ROLLBACK_KEY = "ClusterActiveRollback"  # top level too: marks a rollback Update for is_complete
DATA_KEYS = ("ClusterSecurityGroupId",)
# Must match the construct's query interval and Lambda timeout
# (pd_constructs/lifecycle/cluster_active.py).
QUERY_INTERVAL_SECONDS = 15
LAMBDA_TIMEOUT_SECONDS = 60
MAX_REASON_CHARS = 1000
# How long a Cluster stack may not exist yet, and how its failure in this deploy is told from an
# earlier one's.
CLUSTER_STACK_LEAD_SECONDS = cluster_stack.LEAD_SECONDS
REQUIRED_PROPERTIES = ("ClusterName", "KubernetesVersion", "ClusterStackName", "TimeoutSeconds")


class WaitError(RuntimeError):
    """A terminal failure: the deploy stops now, with this message as the reason."""


@dataclass(frozen=True)
class Props:
    cluster_name: str
    kubernetes_version: str
    cluster_stack_name: str
    timeout_seconds: int

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        props_helpers.require(
            properties, REQUIRED_PROPERTIES, construct="ClusterActive", error=WaitError
        )
        if version_tuple(str(properties["KubernetesVersion"])) is None:
            raise WaitError(
                f"KubernetesVersion must read <major>.<minor>, got "
                f"{properties['KubernetesVersion']!r}"
            )
        return cls(
            cluster_name=str(properties["ClusterName"]),
            kubernetes_version=str(properties["KubernetesVersion"]),
            cluster_stack_name=str(properties["ClusterStackName"]),
            timeout_seconds=props_helpers.positive_int(
                properties, "TimeoutSeconds", error=WaitError
            ),
        )


# --- dependencies (replaced in tests) ------------------------------------------------------

clock: Callable[[], float] = time.time


def _client(name: str) -> Any:
    return boto3.client(name, config=CLIENT_CONFIG)


# --- the Provider contract -----------------------------------------------------------------


def on_event(event: Mapping[str, Any], context: Any, cloudformation: Any = None) -> dict[str, Any]:
    """Start (Create/Update) or end (Delete) the wait. On an Update sent while this stack is
    ``UPDATE_ROLLBACK_IN_PROGRESS``, answer at once with the group of the current physical id
    (no EKS call: a control plane that never became ready is a likely reason for the
    rollback)."""
    if event.get("RequestType") == "Delete":
        LOG.info("Delete %s: nothing to wait for", event.get("PhysicalResourceId"))
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "")}
    current = str(event.get("PhysicalResourceId") or "")
    if event.get("RequestType") == "Update" and stack_rolling_back(event, cloudformation):
        data = {"ClusterSecurityGroupId": current.partition("/")[2]}
        LOG.info("Update during %s: answering at once with %s", ROLLBACK_STATUS, data)
        return {"PhysicalResourceId": current, "Data": data, ROLLBACK_KEY: "true"}
    props = Props.from_properties(event.get("ResourceProperties") or {})
    LOG.info(
        "%s: waiting for cluster %s ACTIVE at Kubernetes %s",
        event.get("RequestType"),
        props.cluster_name,
        props.kubernetes_version,
    )
    physical_id = current if current.partition("/")[0] == props.cluster_name else ""
    return {
        "PhysicalResourceId": physical_id or props.cluster_name,
        STARTED_AT_KEY: str(int(clock())),
    }


def is_complete(
    event: Mapping[str, Any], context: Any, eks: Any = None, cloudformation: Any = None
) -> dict[str, Any]:
    """One poll: ``IsComplete`` False while waiting; the group as ``Data`` when ready (and the
    physical id ``<cluster>/<group id>``); raises :class:`WaitError` on a terminal failure."""
    if settled := rollback.settled(event, ROLLBACK_KEY):
        return settled
    props = Props.from_properties(event.get("ResourceProperties") or {})
    now = clock()
    started = props_helpers.started_at(event, STARTED_AT_KEY, now)
    try:
        ready, seen = look_at_cluster(props, eks or _client("eks"))
        if ready:
            LOG.info("poll: COMPLETE: %s", seen)
            return {
                "IsComplete": True,
                "PhysicalResourceId": f"{props.cluster_name}/{ready}",
                "Data": {"ClusterSecurityGroupId": ready},
            }
        stack = look_at_stack(
            props, cloudformation or _client("cloudformation"), started=started, now=now
        )
    except WaitError as exc:
        raise props_helpers.poll_failed(
            WaitError, f"waiting for EKS cluster {props.cluster_name}: {exc}", MAX_REASON_CHARS
        ) from None
    elapsed = now - started
    LOG.info("poll: pending (%.0f s of %d s): %s; %s", elapsed, props.timeout_seconds, seen, stack)
    if elapsed >= give_up_after(props):
        raise props_helpers.poll_failed(
            WaitError,
            f"EKS cluster {props.cluster_name} was not ACTIVE at Kubernetes "
            f"{props.kubernetes_version} after {elapsed / 60:.0f} min: {seen}; {stack}. "
            "Check the cluster in the EKS console and the Cluster stack's events, then "
            "redeploy.",
            MAX_REASON_CHARS,
        )
    return {"IsComplete": False}


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: _client("cloudformation")
)


def give_up_after(props: Props) -> float:
    """Seconds after the start at which a still-pending poll fails with our own message,
    before the Provider's total timeout would end the wait with a bare "Operation timed out"
    (polls are at most one interval plus one Lambda run apart)."""
    margin = QUERY_INTERVAL_SECONDS + LAMBDA_TIMEOUT_SECONDS
    return max(props.timeout_seconds / 2, props.timeout_seconds - margin)


# --- one poll ------------------------------------------------------------------------------


def version_tuple(version: str) -> tuple[int, int] | None:
    """``"1.36"`` -> ``(1, 36)``; None when it is not ``<major>.<minor>``."""
    major, _, minor = version.strip().partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def look_at_cluster(props: Props, eks: Any) -> tuple[str, str]:
    """(the cluster security group when the cluster is ready, else "", what was seen)."""
    try:
        cluster = eks.describe_cluster(name=props.cluster_name).get("cluster") or {}
    except ClientError as exc:
        code = _code(exc)
        if code == "ResourceNotFoundException":
            return "", "the cluster does not exist yet"
        if code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
            raise WaitError(f"eks:DescribeCluster is denied: {_message(exc)}") from None
        return "", f"eks:DescribeCluster failed: {code}: {_message(exc)}"
    except BotoCoreError as exc:
        return "", f"eks:DescribeCluster failed: {exc}"
    status = str(cluster.get("status") or "UNKNOWN")
    version = str(cluster.get("version") or "")
    seen = f"cluster {status} at Kubernetes {version or 'unknown'}"
    if status == "FAILED":
        issues = [
            f"{i.get('code', '')}: {i.get('message', '')}"
            for i in (cluster.get("health") or {}).get("issues") or []
        ]
        raise WaitError(f"{seen}: {'; '.join(issues) or 'EKS reports no health issue'}")
    group = str((cluster.get("resourcesVpcConfig") or {}).get("clusterSecurityGroupId") or "")
    have, need = version_tuple(version), version_tuple(props.kubernetes_version)
    if status != "ACTIVE":
        return "", seen
    if have is None or need is None or have < need:
        return "", f"{seen}, the GPU nodes need {props.kubernetes_version}"
    if not group:
        return "", f"{seen} without a cluster security group yet"
    return group, f"{seen}, security group {group}"


def look_at_stack(props: Props, cloudformation: Any, *, started: float, now: float) -> str:
    """What the Cluster stack is doing (for the log and the timeout message); raises
    :class:`WaitError` when it is rolling back, its operation of this deploy failed
    (pd_lambda.cluster_stack), or it still does not exist ``CLUSTER_STACK_LEAD_SECONDS`` after
    the wait began (it is not being deployed: this stack alone, e.g.
    ``cdk deploy 'RayPdEks/GpuNodes'`` on a new account)."""
    name = props.cluster_stack_name
    try:
        stack = cluster_stack.read(cloudformation, name)
    except ClientError as exc:
        if _code(exc) in ("AccessDenied", "AccessDeniedException"):
            raise WaitError(f"cloudformation:DescribeStacks on {name} is denied") from None
        return f"cloudformation:DescribeStacks {name} failed: {_code(exc)}: {_message(exc)}"
    except BotoCoreError as exc:
        return f"cloudformation:DescribeStacks {name} failed: {exc}"
    if stack is None:
        missing_for = now - started
        if missing_for >= CLUSTER_STACK_LEAD_SECONDS:
            raise WaitError(
                f"the Cluster stack {name} still does not exist after "
                f"{missing_for / 60:.0f} min, so no control plane is coming; deploy every "
                "stack of the app (npx cdk deploy 'RayPdEks/*' --concurrency 4)"
            )
        return f"stack {name} does not exist yet"
    if stack.failing(started=started):
        raise WaitError(
            f"the Cluster stack {name} is {stack.status} ({stack.reason}); the GPU node stack "
            "stops waiting for its control plane. Fix the Cluster stack's failure, then "
            "redeploy."
        )
    if stack.failed_earlier:
        return f"stack {name} is {stack.status} from an earlier deploy"
    return f"stack {name} is {stack.status}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", exc))
