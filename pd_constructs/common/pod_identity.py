"""EKS Pod Identity roles that only this cluster can hand out.

EKS documents ``aws:SourceAccount`` and ``aws:SourceArn`` (the cluster's ARN) as the trust-policy
conditions that stop another cluster (in this or another account) from assuming a role through
``pods.eks.amazonaws.com``; EKS Pod Identity needs ``sts:AssumeRole`` and ``sts:TagSession``.
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import ArnFormat, Aws, IAspect, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from pd_constructs.common.eks_types import as_icluster

POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"


def trust_conditions(cluster: eks.ICluster | str) -> dict[str, Any]:
    """The conditions for ``cluster``, or for the cluster whose ARN is the string given."""
    arn = cluster if isinstance(cluster, str) else cluster.cluster_arn
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnEquals": {"aws:SourceArn": arn},
    }


def cluster_arn(scope: IConstruct, cluster_name: str) -> str:
    """The ARN of the cluster named ``cluster_name`` in ``scope``'s account and region, built
    from the name: a role trusting it does not wait for the cluster to exist."""
    return Stack.of(scope).format_arn(
        service="eks",
        resource="cluster",
        resource_name=cluster_name,
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


def nodegroup_arn(scope: IConstruct, cluster_name: str, nodegroup_name: str) -> str:
    """The ARN of ``cluster_name``'s node group(s) ``nodegroup_name`` (may end in ``*``): it
    ends in an id EKS assigns at creation, hence the trailing ``/*``."""
    return Stack.of(scope).format_arn(
        service="eks",
        resource="nodegroup",
        resource_name=f"{cluster_name}/{nodegroup_name}/*",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


def auto_scaling_groups_arn(scope: IConstruct) -> str:
    """Every Auto Scaling group of ``scope``'s account and region: EKS names a node group's group
    itself, so a policy narrows it by its tags instead."""
    return Stack.of(scope).format_arn(
        service="autoscaling",
        resource="autoScalingGroup",
        resource_name="*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def pod_identity_principal(cluster: eks.ICluster | str) -> iam.IPrincipal:
    """``pods.eks.amazonaws.com`` for ``cluster`` only (``sts:AssumeRole`` + ``sts:TagSession``);
    ``cluster`` may be the cluster's ARN (:func:`cluster_arn`)."""
    return iam.SessionTagsPrincipal(
        iam.ServicePrincipal(POD_IDENTITY_SERVICE).with_conditions(trust_conditions(cluster))
    )


def pod_identity_service_account(
    scope: Construct,
    *,
    cluster: eks.Cluster,
    name: str,
    namespace: str,
    construct_id: str = "ServiceAccount",
) -> eks.ServiceAccount:
    """Service account ``namespace/name`` with an IAM role of its own through EKS Pod Identity
    (aws-cdk-lib adds the ``eks-pod-identity-agent`` add-on once per cluster), labelled part of
    ray-pd-eks; grant the role (``.role``) what the account's pods call. Its construct ID is
    ``ServiceAccount`` unless given."""
    return eks.ServiceAccount(
        scope,
        construct_id,
        cluster=as_icluster(cluster),
        name=name,
        namespace=namespace,
        identity_type=eks.IdentityType.POD_IDENTITY,
        labels={"app.kubernetes.io/part-of": "ray-pd-eks"},
    )


@jsii.implements(IAspect)
class RestrictPodIdentityTrust:
    """Aspect: every IAM role statement that trusts ``pods.eks.amazonaws.com`` without a
    condition gets :func:`trust_conditions` for ``cluster``. It covers the roles aws-cdk-lib
    creates for ``eks.ServiceAccount(identity_type=POD_IDENTITY)`` (one statement, no
    condition) and any role a construct builds with a bare service principal, so a new Pod
    Identity role cannot be trusted more widely by accident (tests/test_pod_security.py)."""

    def __init__(self, cluster: eks.ICluster) -> None:
        self.cluster = cluster

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, iam.CfnRole):
            return
        document = Stack.of(node).resolve(node.assume_role_policy_document)
        for index, statement in enumerate((document or {}).get("Statement") or []):
            service = (statement.get("Principal") or {}).get("Service")
            services = service if isinstance(service, list) else [service]
            if POD_IDENTITY_SERVICE in services and not statement.get("Condition"):
                node.add_property_override(
                    f"AssumeRolePolicyDocument.Statement.{index}.Condition",
                    trust_conditions(self.cluster),
                )
