"""Typing glue for aws_eks_v2."""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks


def as_icluster(cluster: eks.Cluster) -> eks.ICluster:
    """jsii's Python stubs do not declare that Cluster implements ICluster; it does."""
    return cast(eks.ICluster, cluster)


def control_plane_security_group(cluster: eks.Cluster) -> ec2.ISecurityGroup:
    """The security group aws-cdk-lib creates beside the cluster (``ControlPlaneSecurityGroup``)
    and passes as ``ResourcesVpcConfig.SecurityGroupIds``: EKS attaches it to the control
    plane's cross-account network interfaces only, not to nodes (the CloudFormation reference of
    ``AWS::EKS::Cluster ResourcesVpcConfig``: "security groups for the cross-account elastic
    network interfaces"; aws-cdk-lib 2.275 aws-eks-v2/lib/cluster.js). An ingress rule here
    opens the API server's private endpoint, and nothing else. (The cluster security group, by
    contrast, is on every node and so every pod: a rule there opens them all.)"""
    group = cluster.node.find_child("ControlPlaneSecurityGroup")
    assert isinstance(group, ec2.SecurityGroup)
    return group
