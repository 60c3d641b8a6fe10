"""The Cluster Autoscaler for the GPU node group, when the group has a range.

Installed from the kubernetes/autoscaler chart (pinned in :mod:`pd_constructs.helm`) with an
EKS Pod Identity role that may change the size of, and terminate instances in, only the Auto
Scaling group EKS created for this node group: EKS tags that group with ``eks:cluster-name`` and
``eks:nodegroup-name``, and the policy's conditions require both. Its auto-discovery uses the
same ``eks:nodegroup-name`` tag, so it never touches the system node group.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.eks_types import as_icluster
from pd_constructs.helm import CLUSTER_AUTOSCALER, CLUSTER_AUTOSCALER_IMAGE_TAGS, HelmAddon
from pd_constructs.nag import acknowledge, nag_flatten

SERVICE_ACCOUNT = "cluster-autoscaler"
# Read-only calls the autoscaler makes (its AWS README's policy); none of them has
# resource-level permissions.
DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
SCALING_ACTIONS = (
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
)


def discovery_tags(cluster_name: str, nodegroup_name: str) -> list[str]:
    """``--node-group-auto-discovery=asg:tag=...``: the tags EKS puts on a managed node group's
    Auto Scaling group, narrowed to this node group by ``eks:nodegroup-name=<name>``."""
    return [
        "k8s.io/cluster-autoscaler/enabled",
        f"k8s.io/cluster-autoscaler/{cluster_name}",
        f"eks:nodegroup-name={nodegroup_name}",
    ]


class GpuClusterAutoscaler(Construct):
    """Service account with its Pod Identity role (created first), then the pinned chart on the
    system nodes. ``cluster_name`` must be a literal (it is part of the IAM conditions and the
    cdk-nag acknowledgment); ``nodegroup_name`` may hold tokens of this construct's stack."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        cluster_name: str,
        nodegroup_name: str,
        kubernetes_version: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.service_account = eks.ServiceAccount(
            self,
            "ServiceAccount",
            cluster=as_icluster(cluster),
            name=SERVICE_ACCOUNT,
            namespace=CLUSTER_AUTOSCALER.namespace,
            identity_type=eks.IdentityType.POD_IDENTITY,
            labels={"app.kubernetes.io/part-of": "ray-pd-eks"},
        )
        auto_scaling_groups = stack.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        nodegroup_arn = stack.format_arn(
            service="eks",
            resource="nodegroup",
            # The node group ARN ends in an id EKS assigns at creation.
            resource_name=f"{cluster_name}/{nodegroup_name}/*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        self.statements = [
            iam.PolicyStatement(actions=list(DESCRIBE_ACTIONS), resources=["*"]),
            iam.PolicyStatement(
                actions=list(SCALING_ACTIONS),
                resources=[auto_scaling_groups],
                conditions={
                    "StringEquals": {
                        "aws:ResourceTag/eks:cluster-name": cluster_name,
                        "aws:ResourceTag/eks:nodegroup-name": nodegroup_name,
                    }
                },
            ),
            # Labels and taints of the group when it has no node to copy them from.
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroup_arn]),
        ]
        for statement in self.statements:
            self.service_account.add_to_principal_policy(statement)
        acknowledge(
            self.service_account.role,
            "AwsSolutions-IAM5",
            "Describe calls have no resource-level permissions (read-only); SetDesiredCapacity "
            "and TerminateInstanceInAutoScalingGroup apply only to an Auto Scaling group tagged "
            "with this cluster's and this node group's names (the ASG's own name is chosen by "
            "EKS); eks:DescribeNodegroup names the one node group, whose ARN ends in an id EKS "
            "assigns at creation.",
            findings=[
                "Resource::*",
                "Resource::" + nag_flatten(stack, auto_scaling_groups),
                "Resource::" + nag_flatten(stack, nodegroup_arn),
            ],
        )
        self.chart = HelmAddon(
            self,
            "Chart",
            cluster=cluster,
            release=CLUSTER_AUTOSCALER,
            overrides={
                "autoDiscovery": {
                    "clusterName": cluster_name,
                    "tags": discovery_tags(cluster_name, nodegroup_name),
                },
                "awsRegion": stack.region,
                "image": {"tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]},
                "rbac": {"serviceAccount": {"name": SERVICE_ACCOUNT}},
            },
        )
        # Pod Identity injects credentials when a pod starts: the association comes first.
        self.chart.node.add_dependency(self.service_account)
