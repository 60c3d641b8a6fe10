"""Bounded GPU node-group creation: a custom resource that fails the deploy with a clear reason
when the GPU node group cannot get instances (handler: ``assets/lambda/capacity/``).

Without it, a node group whose AZ has no capacity for its instance type keeps CloudFormation
waiting 15-35 minutes and then fails with a generic message. The watch is created beside the
node group, with no dependency either way, so both start together; when the watch fails,
CloudFormation rolls the node group back.
"""

from __future__ import annotations

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.nag import acknowledge, nag_flatten
from pd_constructs.common.pod_identity import nodegroup_arn
from pd_constructs.lifecycle.rollback import grant_describe_named_stack, grant_describe_own_stack
from pd_constructs.lifecycle.waiter import Polling, checked_waiter_timeout, function_waiter
from ray_pd_eks.logs import LogPolicy

POLLING = Polling(interval=Duration.seconds(30), handler_timeout=Duration.minutes(1))


class GpuCapacityWatch(Construct):
    """Watches the GPU node group while CloudFormation creates or updates it, and fails the
    deploy when it cannot get capacity; ``Delete`` returns at once.

    * Lack of capacity (``InsufficientInstanceCapacity``, or a full reservation) is tolerated
      for ``capacity_wait``, then fails with the fixes (a capacity reservation, another AZ or
      another instance type).
    * A vCPU quota failure, or any other failed launch, fails at once, quoting EC2.
    * The node group turning ``CREATE_FAILED``/``DEGRADED`` fails at once, quoting EKS.
    * Still waiting after ``timeout`` (at most 55 minutes, ``WAITER_DEADLINE_MINUTES``):
      fails with the last status.
    * While creating, ``cluster_stack_name`` (the stack that creates the cluster, when given)
      rolling back, being deleted or failed in this deploy fails at once, quoting
      CloudFormation: its rollback cannot delete the cluster while the node group exists.

    ``fingerprint`` should change whenever the node group's launch template does, so that an
    update that replaces the nodes is watched again. ``cluster_name`` must be a literal or a
    reference to a resource of this construct's stack (the node group's): it is part of the
    IAM policy's resource and of its cdk-nag acknowledgment. ``resource`` exposes the custom
    resource; its ``Nodes`` attribute is the desired size once the node group is ACTIVE. Its log
    groups keep ``log_policy``'s retention but are retained on delete even when the app's other
    logs are not.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        nodegroup_name: str,
        instance_type: str,
        desired_size: int,
        availability_zone: str,
        capacity_reservation_id: str,
        capacity_wait: Duration,
        timeout: Duration,
        fingerprint: str,
        log_policy: LogPolicy,
        provider_scope: Construct | None = None,
        nodegroup_name_prefix: str = "",
        cluster_stack_name: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        timeout_s = checked_waiter_timeout(
            "GpuCapacityWatch",
            timeout,
            polling=POLLING,
            too_short="too short to watch; use at least 3 minutes",
        )
        wait_s = int(capacity_wait.to_seconds())
        if not 0 < wait_s < timeout_s:
            raise ValueError(
                f"GpuCapacityWatch capacity_wait {capacity_wait.to_human_string()} must be "
                f"positive and shorter than timeout {timeout.to_human_string()}"
            )
        if desired_size < 1:
            raise ValueError(f"GpuCapacityWatch desired_size={desired_size}: needs at least 1")
        if provider_scope is not None and not nodegroup_name_prefix:
            raise ValueError(
                "GpuCapacityWatch: with provider_scope, give nodegroup_name_prefix (the "
                "functions are created before the node group's name is known)"
            )
        # The functions and the Provider: here (the node group's name is then known, and the
        # policy names it), or in another stack (``provider_scope``), where the name is not
        # known yet (it follows the GPU AZ) and the policy names the configured prefix.
        home: Construct = (
            self if provider_scope is None else Construct(provider_scope, construct_id)
        )
        self.provider_home = home
        provider = gpu_capacity_watch_provider(
            home,
            cluster_name=cluster_name,
            watched=nodegroup_name if home is self else f"{nodegroup_name_prefix}-*",
            served_stack_name=None if home is self else Stack.of(self).stack_name,
            cluster_stack_name=cluster_stack_name,
            timeout=timeout,
            # Kept on delete, whatever retainLogs says: a capacity failure on a first deploy
            # rolls the stack back (deletes it), and these logs hold EC2's reason
            # (docs/lifecycle.md).
            log_policy=log_policy.retained(),
        )
        # CloudFormation refuses to change a custom resource's ServiceToken: with its
        # Provider moved to an earlier stack, the resource gets a new logical id (an upgrade
        # creates it anew and deletes the old one; docs/lifecycle.md, "Upgrading").
        self.resource = CustomResource(
            self,
            "Resource" if home is self else "Check",
            service_token=provider.service_token,
            resource_type="Custom::GpuCapacityWatch",
            properties={
                "ClusterName": cluster_name,
                "NodegroupName": nodegroup_name,
                "InstanceType": instance_type,
                "AvailabilityZone": availability_zone,
                "DesiredSize": str(desired_size),
                "CapacityReservationId": capacity_reservation_id,
                "CapacityWaitSeconds": str(wait_s),
                "TimeoutSeconds": str(timeout_s),
                "ClusterStackName": cluster_stack_name,
                "Fingerprint": fingerprint,
            },
        )

    def attribute(self, name: str) -> str:
        return self.resource.get_att_string(name)


def gpu_capacity_watch_provider(
    home: Construct,
    *,
    cluster_name: str,
    watched: str,
    served_stack_name: str | None,
    timeout: Duration,
    log_policy: LogPolicy,
    cluster_stack_name: str = "",
) -> cr.Provider:
    """The watch's functions, log groups and Provider, as children of ``home`` (``Logs``,
    ``OnEvent``, ``IsComplete``, ``Provider``, ``WaiterLogs``). ``watched`` is the node group
    name (or a ``<prefix>-*`` pattern) its policy names; ``served_stack_name`` the stack of
    the custom resource when it is not ``home``'s (None: ``home``'s own), for the rollback
    test's DescribeStacks; ``cluster_stack_name`` (default none) the stack whose status the
    poller may read (``cloudformation:DescribeStacks`` on that one stack). The log groups keep
    ``log_policy``."""
    stack = Stack.of(home)
    waiter = function_waiter(
        home,
        folder="capacity",
        what="GPU capacity watch",
        start="starts the watch",
        poll="one look at the node group and its launches",
        log_policy=log_policy,
        polling=POLLING,
        timeout=timeout,
    )
    on_event, is_complete = waiter.on_event, waiter.is_complete
    # Tells CloudFormation's rollback Update (answered at once) from a deploy.
    describe_findings: list[str] = []
    if served_stack_name is None:
        grant_describe_own_stack(on_event)
    else:
        stack_arn = grant_describe_named_stack(on_event, served_stack_name)
        describe_findings = [f"Resource::{nag_flatten(stack, stack_arn)}"]
    watched_arn = nodegroup_arn(stack, cluster_name, watched)
    is_complete.add_to_role_policy(
        iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[watched_arn])
    )
    is_complete.add_to_role_policy(
        iam.PolicyStatement(actions=["autoscaling:DescribeScalingActivities"], resources=["*"])
    )
    # The Cluster stack's status, while the node group is created (handler: watch_cluster_stack).
    cluster_stack_findings: list[str] = []
    if cluster_stack_name:
        cluster_stack_arn = grant_describe_named_stack(is_complete, cluster_stack_name)
        cluster_stack_findings = [f"Resource::{nag_flatten(stack, cluster_stack_arn)}"]
    acknowledge(
        is_complete,
        "AwsSolutions-IAM5",
        "autoscaling:DescribeScalingActivities has no resource-level permissions (read-only); "
        "eks:DescribeNodegroup is limited to the one node group (or, created before it, to "
        "the GPU node groups of the configured name prefix), whose ARN ends in an id EKS "
        "assigns at creation (hence the trailing *); cloudformation:DescribeStacks (when "
        "given) to the one stack that creates the cluster, whose ARN ends in an id "
        "CloudFormation assigns (hence the trailing *).",
        findings=[
            "Resource::*",
            "Resource::" + nag_flatten(stack, watched_arn),
            *cluster_stack_findings,
        ],
    )
    if describe_findings:
        acknowledge(
            on_event,
            "AwsSolutions-IAM5",
            "cloudformation:DescribeStacks on the one stack that holds the watch's custom "
            "resource (its ARN ends in an id CloudFormation assigns, hence the trailing *).",
            findings=describe_findings,
        )
    return waiter.provider
