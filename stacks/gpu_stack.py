"""GPU layer: the GPU AZ, the GPU subnet, the EFA GPU node group, its capacity watch, the
GPU device plugins and, when the group has a range, the Cluster Autoscaler, all in one stack.

Everything that changes when the GPU AZ moves is here and nothing here is imported by another
stack, so a new ``gpuAz`` (or a reservation in another AZ) replaces subnet and node group in
one stack update. The stack needs the network and the cluster only; it deploys beside the
workload stack, not before it.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.capacity import GpuCapacityWatch
from pd_constructs.cluster import (
    GPU_AMI_TYPE,
    GPU_TAINT,
    EfaGpuNodeGroup,
    GpuDevicePlugins,
    gpu_node_config,
    gpu_nodegroup_name,
)
from pd_constructs.cluster_autoscaler import (
    GpuClusterAutoscaler,
    GpuNodeTemplateTags,
    node_template_tags,
)
from pd_constructs.network import (
    GpuAvailabilityZone,
    GpuAvailabilityZoneProvider,
    GpuSubnet,
    gpu_subnet_blocks,
)
from pd_constructs.vpc_cni import CniSubnetAccess
from stacks.app_stack import InClusterStack, InClusterStackProps


class GpuNodesStack(InClusterStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        gpu_route_table_id: str,
        gpu_az_chooser: GpuAvailabilityZoneProvider,
        cni_role: iam.IRole,
        **props: Unpack[InClusterStackProps],
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config, cluster = self.config, self.cluster
        self.gpu_az = GpuAvailabilityZone(
            self,
            "GpuAz",
            instance_type=config.gpu_node_type,
            requested_az=config.gpu_az,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            placement_group_name=config.gpu_placement_group_name,
            instance_count=config.gpu_node_count,
            subnet_cidrs=gpu_subnet_blocks(config.vpc_cidr),
            log_retention=self.log_retention,
            log_removal_policy=self.log_removal_policy,
            provider=gpu_az_chooser,
        )
        self.gpu_subnet = GpuSubnet(
            self,
            "GpuSubnet",
            vpc=vpc,
            availability_zone=self.gpu_az.az_name,
            cidr_block=self.gpu_az.subnet_cidr,
            route_table_id=gpu_route_table_id,
        )
        # The VPC CNI's role may create interfaces in the node subnets only: this one is known
        # here (pd_constructs/vpc_cni.py). Not a dependency of the node group (half a minute on
        # the deploy's critical path): the policy exists seconds after the subnet, minutes
        # before a node of the group boots, and aws-node's first pods take addresses of the
        # primary interface (AssignPrivateIpAddresses), its extra interfaces come later.
        self.cni_subnet_access = CniSubnetAccess(
            self,
            "CniGpuSubnet",
            role=cni_role,
            vpc_id=vpc.vpc_id,
            subnets=[self.gpu_subnet.subnet],
        )
        self.nodegroup_name = gpu_nodegroup_name(
            config.gpu_nodegroup_name,
            self.gpu_az.az_name,
            instance_type=config.gpu_node_type,
            ami_type=GPU_AMI_TYPE,
        )
        self.gpu_nodes = EfaGpuNodeGroup(
            self,
            "GpuNodes",
            cluster=cluster,
            subnet=self.gpu_subnet.subnet,
            nodegroup_name=self.nodegroup_name,
            instance_type=config.gpu_node_type,
            node_count=config.gpu_node_count,
            min_size=config.gpu_node_min,
            max_size=config.gpu_node_max,
            root_volume_gib=config.gpu_root_gib,
            node_config=gpu_node_config(config.uses_local_nvme),
            root_volume_iops=config.gpu_root_volume_iops,
            root_volume_throughput=config.gpu_root_volume_throughput,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            placement_group_name=config.gpu_placement_group_name,
        )
        # Beside the GPU node group, not after it: fails the deploy with EC2's reason when the
        # launches keep failing, instead of CloudFormation waiting out the node group. It knows
        # the group's name before the group exists (the name derives from the AZ).
        self.capacity_watch = GpuCapacityWatch(
            self,
            "GpuCapacityWatch",
            # The configured name, a literal: its IAM policy names the one node group.
            cluster_name=config.cluster_name,
            nodegroup_name=self.nodegroup_name,
            instance_type=config.gpu_node_type,
            desired_size=config.gpu_node_count,
            availability_zone=self.gpu_az.az_name,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            capacity_wait=Duration.minutes(config.gpu_capacity_wait_minutes),
            timeout=Duration.minutes(min(60, config.gpu_capacity_wait_minutes + 20)),
            fingerprint=self.gpu_nodes.launch_template.attr_latest_version_number,
            log_retention=self.log_retention,
            # Its functions exist before this stack starts: the watch starts with the group.
            provider_scope=self.providers,
            nodegroup_name_prefix=config.gpu_nodegroup_name,
        )
        self.device_plugins = GpuDevicePlugins(
            self, "DevicePlugins", cluster=cluster, gpu_instance_type=config.gpu_node_type
        )
        self.device_plugins.node.add_dependency(self.gpu_nodes)
        self.cluster_autoscaler: GpuClusterAutoscaler | None = None
        self.node_template_tags: GpuNodeTemplateTags | None = None
        if config.gpu_nodes_autoscale:
            self.cluster_autoscaler = GpuClusterAutoscaler(
                self,
                "ClusterAutoscaler",
                cluster=cluster,
                # The configured name, a literal: the IAM conditions name it.
                cluster_name=config.cluster_name,
                nodegroup_name=self.nodegroup_name,
                kubernetes_version=config.kubernetes_version,
            )
            # Removed before the node group on destroy, so it cannot scale a group being
            # deleted.
            self.cluster_autoscaler.node.add_dependency(self.gpu_nodes)
            # What a new GPU node offers, on the Auto Scaling group, for when no GPU node is
            # Ready to copy it from (docs/scaling.md).
            self.node_template_tags = GpuNodeTemplateTags(
                self,
                "NodeTemplateTags",
                cluster_name=config.cluster_name,
                nodegroup_name=self.nodegroup_name,
                tags=node_template_tags(
                    self.gpu_nodes.spec,
                    labels=self.gpu_nodes.labels,
                    taints=[GPU_TAINT],
                ),
                log_retention=self.log_retention,
                log_removal_policy=self.log_removal_policy,
            )
            self.node_template_tags.node.add_dependency(self.gpu_nodes)

        CfnOutput(
            self,
            "GpuAvailabilityZone",
            value=self.gpu_az.az_name,
            description="The one AZ of the EFA GPU node group",
        )
        CfnOutput(
            self,
            "GpuNodegroupName",
            value=self.nodegroup_name,
            description="The GPU node group (gpuNodegroupName-<AZ>-<type hash>)",
        )
