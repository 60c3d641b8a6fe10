"""GPU layer: the GPU AZ, the GPU subnet, the EFA GPU node group and its capacity watch, and
(when the group has a range) the node-template tags of its Auto Scaling group.

Everything that changes when the GPU AZ moves is here and nothing here is imported by another
stack, so a new ``gpuAz`` (or a reservation in another AZ) replaces subnet and node group in
one stack update. Nothing here is imported *from* the Cluster stack either: the stack needs
the Network stack only, so CloudFormation deploys it beside the Cluster stack, and the node
group waits for the control plane through
:class:`~pd_constructs.lifecycle.cluster_active.ClusterActive` (one poll after ACTIVE) instead
of for the whole Cluster stack. What needs the Kubernetes API
(the device plugins, the Cluster Autoscaler) is in the GpuAddons stack, after this one.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Annotations, CfnOutput, Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.cluster.cluster import (
    GPU_AMI_TYPE,
    GPU_TAINT,
    EfaGpuNodeGroup,
    gpu_node_config,
    gpu_nodegroup_name,
)
from pd_constructs.cluster.cluster_autoscaler import GpuNodeTemplateTags, node_template_tags
from pd_constructs.cluster.vpc_cni import tag_cni_subnet
from pd_constructs.lifecycle.capacity import GpuCapacityWatch
from pd_constructs.lifecycle.cluster_active import ClusterActive, imported_cluster
from pd_constructs.network.network import GpuAvailabilityZone, GpuSubnet, gpu_subnet_blocks
from ray_pd_eks.config import config_warnings
from stacks.app_stack import AppStack, AppStackProps


class GpuNodesStack(AppStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        gpu_route_table_id: str,
        cluster_stack_name: str,
        **props: Unpack[AppStackProps],
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config = self.config
        for warning_id, text in config_warnings(config):
            Annotations.of(self).add_warning_v2(f"ray-pd-eks:{warning_id}", text)
        # Beside the GPU AZ's choice and subnet, while the control plane is created: what
        # needs the cluster waits for this, one poll after ACTIVE.
        self.cluster_active = ClusterActive(
            self,
            "ClusterActive",
            cluster_name=config.cluster_name,
            kubernetes_version=config.kubernetes_version,
            cluster_stack_name=cluster_stack_name,
            log_policy=self.log_policy,
        )
        cluster: eks.ICluster = imported_cluster(
            self,
            "EksCluster",
            cluster_name=config.cluster_name,
            vpc=vpc,
            waiter=self.cluster_active,
        )
        # "GpuAzChoice", not "GpuAz": its Provider is this stack's now, and a custom resource
        # cannot change its ServiceToken (docs/lifecycle.md, upgrading). On Create it keeps
        # the AZ and block of the subnet the GPU route table already serves.
        self.gpu_az = GpuAvailabilityZone(
            self,
            "GpuAzChoice",
            instance_type=config.gpu_node_type,
            requested_az=config.gpu_az,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            placement_group_name=config.gpu_placement_group_name,
            instance_count=config.gpu_node_count,
            subnet_cidrs=gpu_subnet_blocks(config.vpc_cidr),
            log_policy=self.log_policy,
            route_table_id=gpu_route_table_id,
        )
        self.gpu_subnet = GpuSubnet(
            self,
            "GpuSubnet",
            vpc=vpc,
            availability_zone=self.gpu_az.az_name,
            cidr_block=self.gpu_az.subnet_cidr,
            route_table_id=gpu_route_table_id,
        )
        # The VPC CNI's role may create interfaces in the subnet that carries this tag with
        # the cluster's name (pd_constructs/cluster/vpc_cni.py): no policy attached from here to the
        # Cluster stack's role, which would be an import.
        tag_cni_subnet(self.gpu_subnet.resource, config.cluster_name)
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
        # The launch template names the waiter's security group; the node group waits for the
        # waiter itself too. (The group carries no Kubernetes version: an EKS version upgrade
        # leaves its nodes on theirs until the node update in docs/lifecycle.md.)
        self.gpu_nodes.nodegroup.node.add_dependency(self.cluster_active.resource)
        # Beside the GPU node group, not after it: fails the deploy with EC2's reason when the
        # launches keep failing, instead of CloudFormation waiting out the node group. It knows
        # the group's name before the group exists (the name derives from the AZ). Its
        # functions are this stack's, created while the control plane is: the policy names
        # the one node group, and the resource has a new logical id (``Resource``, was
        # ``Check``: its Provider moved here from the Cluster stack).
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
            timeout=Duration.minutes(config.gpu_capacity_watch_minutes),
            fingerprint=self.gpu_nodes.launch_template.attr_latest_version_number,
            log_policy=self.log_policy,
            # Fails the node group's create at once when the Cluster stack rolls back, so the
            # node group is gone before that rollback deletes the cluster.
            cluster_stack_name=cluster_stack_name,
        )
        self.node_template_tags: GpuNodeTemplateTags | None = None
        if config.gpu_nodes_autoscale:
            # What a new GPU node offers, on the Auto Scaling group, for when no GPU node is
            # Ready to copy it from (docs/scaling.md). AWS-side only: it stays here.
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
                log_policy=self.log_policy,
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
