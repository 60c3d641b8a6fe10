"""The GPU node stack's wait for the control plane: a custom resource that completes when the
EKS cluster is ACTIVE at the Kubernetes version the nodes need (handler:
``assets/lambda/cluster_active/``), instead of a stack dependency on the whole Cluster stack.

With no import from the Cluster stack, CloudFormation deploys the GPU node stack beside it;
its node group starts one poll after the control plane is ACTIVE, not after the Cluster
stack's add-ons and kubectl provider (docs/deploy-timeline.md). The cluster is named by its
configured name (a literal), and the waiter returns the cluster security group that EKS
created with it, so nothing here refers to the Cluster stack's resources.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.nag import acknowledge, nag_flatten
from pd_constructs.common.pod_identity import cluster_arn
from pd_constructs.lifecycle.rollback import grant_describe_named_stack, grant_describe_own_stack
from pd_constructs.lifecycle.waiter import Polling, checked_waiter_timeout, function_waiter
from ray_pd_eks.logs import LogPolicy

# A short interval: the wait is on the deploy's critical path (the node group starts one poll
# after ACTIVE).
POLLING = Polling(interval=Duration.seconds(15), handler_timeout=Duration.minutes(1))
# EKS creates a control plane in about 10 minutes (published averages up to 15) and a version
# update takes as long; three times that, within CloudFormation's one hour for a custom
# resource, before the wait fails with what it saw.
DEFAULT_TIMEOUT = Duration.minutes(45)


class ClusterActive(Construct):
    """Waits (Create and Update) until EKS cluster ``cluster_name`` is ACTIVE at
    ``kubernetes_version`` or later; Delete returns at once. ``cluster_security_group_id`` is
    the cluster security group (``resourcesVpcConfig.clusterSecurityGroupId``) once ready.

    Fails at once when the cluster is ``FAILED`` or ``cluster_stack_name`` (the stack that
    creates the cluster) is rolling back or failed in this deploy, and after ``timeout``
    (default 45 minutes, at most 60) with what it saw. The functions may describe that one
    cluster and two stacks (this one, to tell its rollback from a deploy, and the cluster's);
    their log group keeps ``log_policy``.
    ``resource`` is the custom resource: make what needs the cluster depend on it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        kubernetes_version: str,
        cluster_stack_name: str,
        log_policy: LogPolicy,
        timeout: Duration = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(scope, construct_id)
        timeout_s = checked_waiter_timeout(
            "ClusterActive",
            timeout,
            polling=POLLING,
            too_short="too short to wait; use at least 2 minutes",
        )
        waiter = function_waiter(
            self,
            folder="cluster_active",
            what="Waits for the EKS control plane",
            start="starts the wait",
            poll="one look at the cluster",
            log_policy=log_policy,
            polling=POLLING,
            timeout=timeout,
        )
        self.resource = waiter.resource(
            self,
            resource_type="Custom::ClusterActive",
            properties={
                "ClusterName": cluster_name,
                "KubernetesVersion": kubernetes_version,
                "ClusterStackName": cluster_stack_name,
                "TimeoutSeconds": str(timeout_s),
            },
        )
        self.cluster_security_group_id = self.resource.get_att_string("ClusterSecurityGroupId")
        on_event, is_complete = waiter.on_event, waiter.is_complete
        grant_describe_own_stack(on_event)
        this_cluster = cluster_arn(self, cluster_name)
        is_complete.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[this_cluster])
        )
        cluster_stack_arn = grant_describe_named_stack(is_complete, cluster_stack_name)
        acknowledge(
            is_complete,
            "AwsSolutions-IAM5",
            "cloudformation:DescribeStacks on the one stack that creates the cluster (its ARN "
            "ends in an id CloudFormation assigns, hence the trailing *).",
            findings=[f"Resource::{nag_flatten(Stack.of(self), cluster_stack_arn)}"],
        )


def imported_cluster(
    scope: Construct,
    construct_id: str,
    *,
    cluster_name: str,
    vpc: ec2.IVpc,
    waiter: ClusterActive,
) -> eks.ICluster:
    """The cluster as the GPU node stack sees it: the configured name (a literal: the node
    group's ``ClusterName`` and the nodes' tags), the network stack's VPC, and the cluster
    security group from ``waiter``. No reference to the Cluster stack."""
    return eks.Cluster.from_cluster_attributes(
        scope,
        construct_id,
        cluster_name=cluster_name,
        vpc=vpc,
        cluster_security_group_id=waiter.cluster_security_group_id,
    )
