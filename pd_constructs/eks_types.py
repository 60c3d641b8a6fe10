"""Typing glue for aws_eks_v2."""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_eks_v2 as eks


def as_icluster(cluster: eks.Cluster) -> eks.ICluster:
    """jsii's Python stubs do not declare that Cluster implements ICluster; it does."""
    return cast(eks.ICluster, cluster)
