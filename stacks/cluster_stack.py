"""Cluster layer: EKS, the system and EFA GPU node groups, and the GPU device plugins."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from pd_constructs.capacity import GpuCapacityWatch
from pd_constructs.cluster import (
    EfaGpuNodeGroup,
    GpuDevicePlugins,
    PdCluster,
    SystemNodeGroup,
    gpu_node_config,
)
from pd_constructs.warmup import NodeWarmup
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_removal_policy, log_retention


class ClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: AppConfig,
        vpc: ec2.IVpc,
        gpu_subnet: ec2.ISubnet,
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
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=self.cluster,
            instance_type=config.system_node_type,
            node_count=config.system_node_count,
            root_volume_gib=config.system_root_volume_gib,
        )
        self.gpu_nodes = EfaGpuNodeGroup(
            self,
            "GpuNodes",
            cluster=self.cluster,
            subnet=gpu_subnet,
            nodegroup_name=config.gpu_nodegroup_name,
            instance_type=config.gpu_node_type,
            node_count=config.gpu_node_count,
            root_volume_gib=config.gpu_root_gib,
            node_config=gpu_node_config(config.uses_local_nvme),
            root_volume_iops=config.gpu_root_volume_iops,
            root_volume_throughput=config.gpu_root_volume_throughput,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            placement_group_name=config.gpu_placement_group_name,
        )
        # Beside the GPU node group, not after it: fails the deploy with EC2's reason when the
        # launches keep failing, instead of CloudFormation waiting out the node group.
        self.capacity_watch = GpuCapacityWatch(
            self,
            "GpuCapacityWatch",
            cluster_name=self.cluster.cluster_name,
            nodegroup_name=config.gpu_nodegroup_name,
            instance_type=config.gpu_node_type,
            desired_size=config.gpu_node_count,
            availability_zone=gpu_subnet.availability_zone,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            capacity_wait=Duration.minutes(config.gpu_capacity_wait_minutes),
            timeout=Duration.minutes(min(60, config.gpu_capacity_wait_minutes + 20)),
            fingerprint=self.gpu_nodes.launch_template.attr_latest_version_number,
            log_retention=log_retention(config),
        )
        self.device_plugins = GpuDevicePlugins(
            self, "DevicePlugins", cluster=self.cluster, gpu_instance_type=config.gpu_node_type
        )
        self.device_plugins.node.add_dependency(self.gpu_nodes)
        # Needs only the cluster: each node starts pulling the image and the weights as it
        # joins, while the rest of this stack and the workload stack deploy.
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
