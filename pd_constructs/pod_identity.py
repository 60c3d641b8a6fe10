"""EKS Pod Identity roles that only this cluster can hand out.

EKS documents ``aws:SourceAccount`` and ``aws:SourceArn`` (the cluster's ARN) as the trust-policy
conditions that stop another cluster (in this or another account) from assuming a role through
``pods.eks.amazonaws.com``; EKS Pod Identity needs ``sts:AssumeRole`` and ``sts:TagSession``.
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Aws, IAspect, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import IConstruct

POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"


def trust_conditions(cluster: eks.ICluster) -> dict[str, Any]:
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnEquals": {"aws:SourceArn": cluster.cluster_arn},
    }


def pod_identity_principal(cluster: eks.ICluster) -> iam.IPrincipal:
    """``pods.eks.amazonaws.com`` for ``cluster`` only (``sts:AssumeRole`` + ``sts:TagSession``)."""
    return iam.SessionTagsPrincipal(
        iam.ServicePrincipal(POD_IDENTITY_SERVICE).with_conditions(trust_conditions(cluster))
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
