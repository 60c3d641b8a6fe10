"""EKS Pod Identity roles that only this cluster can hand out.

EKS documents ``aws:SourceAccount`` and ``aws:SourceArn`` (the cluster's ARN) as the trust-policy
conditions that stop another cluster (in this or another account) from assuming a role through
``pods.eks.amazonaws.com``; EKS Pod Identity needs ``sts:AssumeRole`` and ``sts:TagSession``.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"


def pod_identity_principal(cluster: eks.ICluster) -> iam.IPrincipal:
    """``pods.eks.amazonaws.com`` for ``cluster`` only (``sts:AssumeRole`` + ``sts:TagSession``)."""
    return iam.SessionTagsPrincipal(
        iam.ServicePrincipal(POD_IDENTITY_SERVICE).with_conditions(
            {
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnEquals": {"aws:SourceArn": cluster.cluster_arn},
            }
        )
    )
