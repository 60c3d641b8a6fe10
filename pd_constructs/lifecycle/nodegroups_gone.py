"""The Cluster stack's delete-time guard: a custom resource that refers to the cluster, so
CloudFormation deletes it before the cluster, and whose Delete waits until the cluster has no
node group left (handler: ``assets/lambda/nodegroups_gone/``).

The GPU node group is in the GpuNodes stack, which deploys beside the Cluster stack (no stack
dependency either way: docs/deploy-timeline.md, change 14). EKS refuses to delete a cluster
with node groups, so a Cluster stack that rolls back its first create while the GPU node group
is being created, or that ``cdk destroy`` deletes beside the GpuNodes stack, would end
``ROLLBACK_FAILED`` / ``DELETE_FAILED``. With the guard its cluster's delete waits for that
node group's delete (docs/teardown.md, docs/lifecycle.md).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.nag import acknowledge, nag_flatten
from pd_constructs.common.pod_identity import cluster_arn
from pd_constructs.lifecycle.rollback import grant_describe_own_stack
from pd_constructs.lifecycle.waiter import MAX_TIMEOUT, Polling, function_waiter
from ray_pd_eks.config import WAITER_DEADLINE_MINUTES
from ray_pd_eks.logs import LogPolicy

POLLING = Polling(interval=Duration.seconds(30), handler_timeout=Duration.minutes(1))
# How long a Delete waits for node groups that are CREATING or DELETING. EKS deletes a managed
# node group by scaling its Auto Scaling group to zero, draining each node for at most 5
# minutes before Auto Scaling terminates it, then deleting the group (Amazon EKS User Guide,
# "Delete a managed node group from your cluster"); the GPU node group's delete typically
# takes 5-15 minutes (docs/teardown.md). On a rollback the group may still be CREATING first
# (a GPU node joins about 4.5 minutes after its group starts). 40 minutes covers both, with
# the Provider's margin, within CloudFormation's one hour for a custom resource.
DEFAULT_WAIT = Duration.minutes(40)
# How long a node group may sit in another state (ACTIVE, DEGRADED, ...) before the delete
# fails: `cdk destroy` starts the GpuNodes stack no later than this one (both wait for
# GpuAddons; docs/teardown.md), and its node group's DeleteNodegroup comes within a minute or
# two of that stack's start (after the node-template tags' Delete).
DEFAULT_GRACE = Duration.minutes(5)
# The Provider's total timeout is the wait plus this: the handler raises its own message at
# the wait, at most one interval and one Lambda run after it; the Provider's bare "Operation
# timed out" must come after that.
PROVIDER_MARGIN = Duration.minutes(3)


class NodegroupsGone(Construct):
    """Delete-time guard of EKS cluster ``cluster``: Create and Update return at once (the
    first poll, seconds); a Delete while the stack deletes the cluster (``DELETE_IN_PROGRESS``,
    or ``ROLLBACK_IN_PROGRESS`` after a failed first create) completes once the cluster has no
    node group, waits while any is ``CREATING``/``DELETING`` (up to ``wait``, default 40
    minutes), and fails, naming them and the fix (destroy ``gpu_nodes_stack_path`` first),
    when one stays in another state for ``grace`` (default 5 minutes). A missing cluster has
    no node group. A Delete in any other stack state (an update's cleanup) returns at once.

    ``cluster_name`` is the configured name, a literal: the IAM policy names that cluster's
    node groups only (``eks:ListNodegroups`` on the cluster, ``eks:DescribeNodegroup`` on
    ``nodegroup/<cluster>/*``). The custom resource refers to ``cluster`` (its ``Ref``), so it
    is created after the cluster and deleted before it. Its log group keeps ``log_policy``.
    ``resource`` is the custom resource.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        gpu_nodes_stack_path: str,
        log_policy: LogPolicy,
        wait: Duration = DEFAULT_WAIT,
        grace: Duration = DEFAULT_GRACE,
    ) -> None:
        super().__init__(scope, construct_id)
        wait_s = int(wait.to_seconds())
        grace_s = int(grace.to_seconds())
        timeout = Duration.seconds(wait_s + PROVIDER_MARGIN.to_seconds())
        if timeout.to_seconds() > MAX_TIMEOUT.to_seconds():
            raise ValueError(
                f"NodegroupsGone wait {wait.to_human_string()}: with the Provider's "
                f"{PROVIDER_MARGIN.to_human_string()} margin it ends after "
                f"{WAITER_DEADLINE_MINUTES} minutes, the most any waiter of the app may take "
                "inside CloudFormation's hour; use at most "
                f"{WAITER_DEADLINE_MINUTES - int(PROVIDER_MARGIN.to_minutes())} minutes"
            )
        if not POLLING.interval.to_seconds() <= grace_s < wait_s:
            raise ValueError(
                f"NodegroupsGone grace {grace.to_human_string()} must be at least one poll "
                f"({POLLING.interval.to_human_string()}) and shorter than wait "
                f"{wait.to_human_string()}"
            )
        waiter = function_waiter(
            self,
            folder="nodegroups_gone",
            what="Holds the cluster's delete until no node group is left",
            start="starts",
            poll="one look",
            log_policy=log_policy,
            polling=POLLING,
            timeout=timeout,
        )
        self.resource = waiter.resource(
            self,
            resource_type="Custom::NodegroupsGone",
            properties={
                # The cluster's Ref: created after the cluster, deleted before it.
                "ClusterName": cluster.cluster_name,
                "WaitSeconds": str(wait_s),
                "GraceSeconds": str(grace_s),
                "GpuNodesStack": gpu_nodes_stack_path,
            },
        )
        stack = Stack.of(self)
        # Tells the stack's delete (or create rollback) from an update's cleanup.
        on_event, is_complete = waiter.on_event, waiter.is_complete
        grant_describe_own_stack(on_event)
        this_cluster = cluster_arn(self, cluster_name)
        nodegroups_arn = stack.format_arn(
            service="eks",
            resource="nodegroup",
            # nodegroup/<cluster>/<node group>/<id EKS assigns at creation>
            resource_name=f"{cluster_name}/*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        is_complete.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:ListNodegroups"], resources=[this_cluster])
        )
        is_complete.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroups_arn])
        )
        acknowledge(
            is_complete,
            "AwsSolutions-IAM5",
            "eks:DescribeNodegroup on the node groups of this one cluster: the guard must see "
            "every node group that blocks the cluster's delete, whichever stack made it, and "
            "a node group's ARN ends in its name and an id EKS assigns (hence the trailing *).",
            findings=[f"Resource::{nag_flatten(stack, nodegroups_arn)}"],
        )
