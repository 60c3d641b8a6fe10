"""Cluster layer: the EKS control plane and the node warm-up DaemonSets.

Deliberately nothing that waits for a node: the system node group (with the workload that
runs on it) and the GPU node group (with its subnet, capacity watch and device plugins) are in
their own stacks, which deploy side by side once this one is done (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from pd_constructs.cluster import PdCluster
from pd_constructs.vpc_cni import VpcCniAddon
from pd_constructs.warmup import NodeWarmup
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_removal_policy


class ClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: AppConfig,
        vpc: ec2.IVpc,
        **kwargs: Any,
    ):
        super().__init__(scope, construct_id, **kwargs)
        self.eks = PdCluster(
            self,
            "Cluster",
            vpc=vpc,
            cluster_name=config.cluster_name,
            kubernetes_version=config.kubernetes_version,
            admin_principal_arns=config.admin_principal_arns,
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            log_retention_days=config.log_retention_days,
            log_removal_policy=log_removal_policy(config),
        )
        self.cluster = self.eks.cluster
        # Before any node joins (the node groups' stacks deploy after this one): nodes come up
        # with the managed CNI (NetworkPolicy enforcement, its own identity), and on destroy
        # they go before it.
        self.vpc_cni = VpcCniAddon(
            self, "VpcCni", cluster=self.cluster, addon_version=config.vpc_cni_addon_version
        )
        # Needs only the cluster: each node starts pulling the image and the weights as it
        # joins, while the node groups, the device plugins and the workload deploy.
        self.warmup = NodeWarmup(
            self,
            "Warmup",
            cluster=self.cluster,
            config=config,
            image=config.image_uri(Aws.REGION),
            region=Aws.REGION,
        )

        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "Region", value=self.region)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {self.region} --name {config.cluster_name}",
        )
