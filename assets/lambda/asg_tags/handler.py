"""Tags the GPU node group's Auto Scaling group with the Cluster Autoscaler's node-template
hints, so the autoscaler can add a GPU node when none is Ready.

With no Ready node of a group, the Cluster Autoscaler builds the node it would add from the
Auto Scaling group: extended resources only from ``k8s.io/cluster-autoscaler/node-template/
resources/<name>`` tags, labels from ``.../node-template/label/<name>`` and taints from
``.../node-template/taint/<name>`` (value ``<value>:<effect>``) (kubernetes/autoscaler,
``cluster-autoscaler/cloudprovider/aws/README.md``, "Auto-Discovery Setup"/scaling a node group
to and from 0, at cluster-autoscaler-1.35.2). A managed node group's own tags and labels do not
reach the group EKS creates for it, so this handler puts them there: it reads the group's name
from ``DescribeNodegroup`` (``resources.autoScalingGroups``) and calls ``CreateOrUpdateTags``
(not propagated to instances: they are hints for the autoscaler only).

* Create/Update: tags the group with ``Tags``; an Update also removes the keys the previous
  properties had and these do not (on the same node group).
* An Update while the stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (pd_lambda.rollback) is the
  rollback putting the previous tags back: it tries, and never fails the rollback.
* Delete removes the tags, and succeeds when the node group or its group is already gone.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3
and the shared layer (``pd_lambda``). Properties (strings): ``ClusterName``, ``NodegroupName``,
``Tags`` (a JSON object of tag key to value).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import props as props_helpers
from pd_lambda import rollback

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
MAX_REASON_CHARS = 900


class TagError(RuntimeError):
    """A failure CloudFormation shows as the reason (one line)."""


def _client(name: str) -> Any:
    return boto3.client(name)


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: _client("cloudformation")
)


def read_tags(properties: Mapping[str, Any]) -> dict[str, str]:
    """``Tags`` as a dict; every key must be one of the autoscaler's node-template tags."""
    try:
        tags = json.loads(str(properties.get("Tags") or "{}"))
    except json.JSONDecodeError as exc:
        raise TagError(f"Tags is not a JSON object: {exc}") from exc
    if not isinstance(tags, dict):
        raise TagError(f"Tags is not a JSON object: {tags!r}")
    for key in tags:
        if not str(key).startswith(TAG_PREFIX):
            raise TagError(f"tag {key!r} is not a Cluster Autoscaler node-template tag")
    return {str(k): str(v) for k, v in tags.items()}


def auto_scaling_groups(eks: Any, cluster: str, nodegroup: str) -> list[str]:
    """The Auto Scaling groups EKS created for the node group (``[]`` when it is gone)."""
    try:
        found = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return []
        raise
    groups = found.get("nodegroup", {}).get("resources", {}).get("autoScalingGroups") or []
    return [str(g["name"]) for g in groups if g.get("name")]


def _tag_specs(group: str, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "ResourceId": group,
            "ResourceType": "auto-scaling-group",
            "Key": key,
            "Value": value,
            "PropagateAtLaunch": False,
        }
        for key, value in sorted(tags.items())
    ]


def apply(autoscaling: Any, groups: list[str], tags: Mapping[str, str], stale: set[str]) -> None:
    """Put ``tags`` on every group and remove the ``stale`` keys."""
    for group in groups:
        if tags:
            autoscaling.create_or_update_tags(Tags=_tag_specs(group, tags))
        gone = sorted(stale - set(tags))
        if gone:
            autoscaling.delete_tags(Tags=_tag_specs(group, dict.fromkeys(gone, "")))
        LOG.info("Auto Scaling group %s: %d tags set, %d removed", group, len(tags), len(gone))


def on_event(
    event: Mapping[str, Any],
    context: Any = None,
    eks: Any = None,
    autoscaling: Any = None,
    cloudformation: Any = None,
) -> dict[str, Any]:
    request = str(event.get("RequestType"))
    properties = event.get("ResourceProperties") or {}
    cluster = str(properties.get("ClusterName") or "")
    nodegroup = str(properties.get("NodegroupName") or "")
    physical_id = f"{cluster}/{nodegroup}"
    eks = eks or _client("eks")
    autoscaling = autoscaling or _client("autoscaling")
    if request == "Delete":
        try:
            groups = auto_scaling_groups(eks, cluster, nodegroup)
            apply(autoscaling, groups, {}, set(read_tags(properties)))
        except (ClientError, BotoCoreError, TagError) as exc:
            # The node group (and its tags) usually goes in the same delete; never block it.
            LOG.warning("Delete of %s: tags left as they are: %s", physical_id, exc)
        return {"PhysicalResourceId": str(event.get("PhysicalResourceId") or physical_id)}
    rolling_back = request == "Update" and stack_rolling_back(event, cloudformation)
    try:
        tags = read_tags(properties)
        old = event.get("OldResourceProperties") or {}
        same_group = (old.get("ClusterName"), old.get("NodegroupName")) == (cluster, nodegroup)
        stale = set(read_tags(old)) if request == "Update" and same_group else set()
        groups = auto_scaling_groups(eks, cluster, nodegroup)
        if not groups:
            raise TagError(
                f"node group {nodegroup} of cluster {cluster} has no Auto Scaling group "
                "(DescribeNodegroup resources.autoScalingGroups is empty)"
            )
        apply(autoscaling, groups, tags, stale)
    except (ClientError, BotoCoreError, TagError) as exc:
        if rolling_back:
            LOG.warning("Rollback of %s: previous tags not restored: %s", physical_id, exc)
            return {"PhysicalResourceId": str(event.get("PhysicalResourceId") or physical_id)}
        raise TagError(
            props_helpers.one_line(f"tagging {physical_id} failed: {exc}", MAX_REASON_CHARS)
        ) from exc
    return {
        "PhysicalResourceId": physical_id,
        "Data": {"AutoScalingGroups": ",".join(groups), "Tags": str(len(tags))},
    }
