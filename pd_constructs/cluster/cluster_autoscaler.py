"""The Cluster Autoscaler for the GPU node group, when the group has a range.

Installed from the kubernetes/autoscaler chart (pinned in :mod:`pd_constructs.common.helm`) with an
EKS Pod Identity role that may change the size of, and terminate instances in, only the Auto
Scaling group EKS created for this node group: EKS tags that group with ``eks:cluster-name`` and
``eks:nodegroup-name``, and the policy's conditions require both. Its auto-discovery uses the
same ``eks:nodegroup-name`` tag, so it never touches the system node group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.cluster.cluster import GPU_LABELS
from pd_constructs.common.helm import CLUSTER_AUTOSCALER, CLUSTER_AUTOSCALER_IMAGE_TAGS, HelmAddon
from pd_constructs.common.lambda_functions import function_resource
from pd_constructs.common.nag import acknowledge, nag_flatten
from pd_constructs.common.pod_identity import (
    auto_scaling_groups_arn,
    nodegroup_arn,
    pod_identity_service_account,
)
from pd_constructs.lifecycle.rollback import grant_describe_own_stack
from ray_pd_eks import instance_types
from ray_pd_eks.logs import LogPolicy

# The Cluster Autoscaler's node-template tags on an Auto Scaling group (kubernetes/autoscaler,
# cluster-autoscaler/cloudprovider/aws/README.md at cluster-autoscaler-1.35.2): what a node of
# the group would offer when the group has no Ready node to copy it from.
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template/"
# EC2 Auto Scaling's limits on a tag.
TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256

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


# The node-template label tag that only the GPU node group's Auto Scaling group carries
# (GpuNodeTemplateTags writes it there, from the group's labels): the autoscaler's discovery
# narrows to it, since its own stack (GpuAddons) cannot know the group's name, which follows
# the GPU AZ chosen at deploy time and is never exported (docs/architecture.md).
GPU_GROUP_LABEL = ("role", GPU_LABELS["role"])


def discovery_tags(cluster_name: str) -> list[str]:
    """``--node-group-auto-discovery=asg:tag=...``: the tags EKS puts on a managed node group's
    Auto Scaling group, narrowed to the GPU node group by its node-template label tag
    (:data:`GPU_GROUP_LABEL`)."""
    key, value = GPU_GROUP_LABEL
    return [
        "k8s.io/cluster-autoscaler/enabled",
        f"k8s.io/cluster-autoscaler/{cluster_name}",
        f"{NODE_TEMPLATE}label/{key}={value}",
    ]


class GpuClusterAutoscaler(Construct):
    """Service account with its Pod Identity role (created first), then the pinned chart on the
    system nodes. ``cluster_name`` and ``nodegroup_name_prefix`` must be literals (they are part
    of the IAM conditions and the cdk-nag acknowledgment): the role may resize and describe the
    node groups named ``<nodegroup_name_prefix>-*`` of this cluster only (the GPU group's name
    ends in its AZ and a hash: ``gpu_nodegroup_name``), and discovery finds the one Auto Scaling
    group tagged with the GPU label (:func:`discovery_tags`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        cluster_name: str,
        nodegroup_name_prefix: str,
        kubernetes_version: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        nodegroup_names = f"{nodegroup_name_prefix}-*"
        self.service_account = pod_identity_service_account(
            self, cluster=cluster, name=SERVICE_ACCOUNT, namespace=CLUSTER_AUTOSCALER.namespace
        )
        auto_scaling_groups = auto_scaling_groups_arn(self)
        this_nodegroups = nodegroup_arn(self, cluster_name, nodegroup_names)
        self.statements = [
            iam.PolicyStatement(actions=list(DESCRIBE_ACTIONS), resources=["*"]),
            iam.PolicyStatement(
                actions=list(SCALING_ACTIONS),
                resources=[auto_scaling_groups],
                conditions={
                    "StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster_name},
                    "StringLike": {"aws:ResourceTag/eks:nodegroup-name": nodegroup_names},
                },
            ),
            # Labels and taints of the group when it has no node to copy them from.
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[this_nodegroups]),
        ]
        for statement in self.statements:
            self.service_account.add_to_principal_policy(statement)
        acknowledge(
            self.service_account.role,
            "AwsSolutions-IAM5",
            "Describe calls have no resource-level permissions (read-only); SetDesiredCapacity "
            "and TerminateInstanceInAutoScalingGroup apply only to an Auto Scaling group tagged "
            "with this cluster's name and a GPU node group name (the configured prefix; the "
            "ASG's own name is chosen by EKS); eks:DescribeNodegroup names this cluster's GPU "
            "node groups, whose ARNs end in an id EKS assigns at creation.",
            findings=[
                "Resource::*",
                "Resource::" + nag_flatten(stack, auto_scaling_groups),
                "Resource::" + nag_flatten(stack, this_nodegroups),
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
                    "tags": discovery_tags(cluster_name),
                },
                "awsRegion": stack.region,
                "image": {"tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]},
                "rbac": {"serviceAccount": {"name": SERVICE_ACCOUNT}},
            },
        )
        # Pod Identity injects credentials when a pod starts: the association comes first.
        self.chart.node.add_dependency(self.service_account)


def node_template_tags(
    spec: instance_types.InstanceSpec,
    *,
    labels: Mapping[str, str],
    taints: Sequence[eks.TaintSpec],
) -> dict[str, str]:
    """The tags that tell the Cluster Autoscaler what a new node of the GPU group offers: one
    GPU per ``spec.gpus`` (``nvidia.com/gpu``) and one EFA device per interface
    (``vpc.amazonaws.com/efa``, what the EFA device plugin advertises), the group's labels
    (the workers select ``role=gpu-worker``) and taints (``<value>:<effect>``, which the
    workers tolerate). Raises when a key or value exceeds EC2 Auto Scaling's limits."""
    effects = {
        eks.TaintEffect.NO_SCHEDULE: "NoSchedule",
        eks.TaintEffect.PREFER_NO_SCHEDULE: "PreferNoSchedule",
        eks.TaintEffect.NO_EXECUTE: "NoExecute",
    }
    tags = {
        f"{NODE_TEMPLATE}resources/nvidia.com/gpu": str(spec.gpus),
        f"{NODE_TEMPLATE}resources/vpc.amazonaws.com/efa": str(spec.efa_interfaces),
        **{f"{NODE_TEMPLATE}label/{k}": v for k, v in labels.items()},
        **{
            f"{NODE_TEMPLATE}taint/{t.key}": f"{t.value or ''}:{effects[t.effect]}"
            for t in taints
            if t.key and t.effect
        },
    }
    for key, value in tags.items():
        if len(key) > TAG_KEY_MAX or len(value) > TAG_VALUE_MAX:
            raise ValueError(
                f"Auto Scaling tag {key}={value}: keys take at most {TAG_KEY_MAX} characters, "
                f"values {TAG_VALUE_MAX}"
            )
    return tags


class GpuNodeTemplateTags(Construct):
    """Tags the GPU node group's Auto Scaling group with ``tags`` (:func:`node_template_tags`)
    through a rollback-safe custom resource (handler: ``assets/lambda/asg_tags/``); make it
    depend on the node group. The function may read the one node group (for
    ``resources.autoScalingGroups``) and create or delete node-template tags only on the
    Auto Scaling group EKS tagged with this cluster's and this node group's names.
    ``cluster_name`` must be a literal (IAM conditions, cdk-nag acknowledgment);
    ``nodegroup_name`` may hold tokens of this construct's stack."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        nodegroup_name: str,
        tags: Mapping[str, str],
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        bad = sorted(k for k in tags if not k.startswith(NODE_TEMPLATE))
        if bad:
            raise ValueError(f"GpuNodeTemplateTags: {bad[0]} is not a {NODE_TEMPLATE}* tag")
        stack = Stack.of(self)
        fn, self.resource = function_resource(
            self,
            folder="asg_tags",
            description="Tags the GPU Auto Scaling group for the Cluster Autoscaler",
            log_policy=log_policy,
            resource_type="Custom::GpuNodeTemplateTags",
            properties={
                "ClusterName": cluster_name,
                "NodegroupName": nodegroup_name,
                "Tags": json.dumps(dict(tags), sort_keys=True),
            },
        )
        self.function = fn
        this_nodegroup = nodegroup_arn(self, cluster_name, nodegroup_name)
        auto_scaling_groups = auto_scaling_groups_arn(self)
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[this_nodegroup])
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
                resources=[auto_scaling_groups],
                conditions={
                    "StringEquals": {
                        "aws:ResourceTag/eks:cluster-name": cluster_name,
                        "aws:ResourceTag/eks:nodegroup-name": nodegroup_name,
                    },
                    # Only the autoscaler's hints: never EKS's own tags on the group.
                    "ForAllValues:StringLike": {"aws:TagKeys": [f"{NODE_TEMPLATE}*"]},
                },
            )
        )
        # Tells CloudFormation's rollback Update (best effort, never failed) from a deploy.
        grant_describe_own_stack(fn)
        acknowledge(
            fn,
            "AwsSolutions-IAM5",
            "CreateOrUpdateTags and DeleteTags apply only to the Auto Scaling group EKS tagged "
            "with this cluster's and this node group's names (the group's own name is chosen by "
            "EKS) and only to node-template tag keys; eks:DescribeNodegroup names the one node "
            "group, whose ARN ends in an id EKS assigns at creation.",
            findings=[
                "Resource::" + nag_flatten(stack, auto_scaling_groups),
                "Resource::" + nag_flatten(stack, this_nodegroup),
            ],
        )
