"""Cluster layer: the EKS control plane, its add-ons, the NAT gateway the nodes need, and the
restriction of the VPC's default security group.

Deliberately nothing that waits for a node or calls the Kubernetes API (that needs the NAT
gateway created here): the system node group with the workload and the node warm-up are in
the Workload stack, after this one; the GPU node group with its subnet and capacity watch is
in the GpuNodes stack, which deploys beside this one (it waits for the control plane itself);
the GPU device plugins are in the GpuAddons stack (docs/architecture.md).

It also keeps, for one release, what the previous version's GpuNodes stack used from here (the
GPU AZ chooser's and the capacity watch's Providers, and the exports it imported): the
upgrade deletes that stack's old custom resources through them, and CloudFormation refuses to
delete an export another stack still imports (ray_pd_eks/cross_stack.py ``KEPT_FOR_UPGRADE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from pd_constructs.cluster.cluster import PdCluster
from pd_constructs.cluster.vpc_cni import VpcCniAddon
from pd_constructs.common.eks_types import as_icluster
from pd_constructs.lifecycle.capacity import gpu_capacity_watch_provider
from pd_constructs.lifecycle.nodegroups_gone import NodegroupsGone
from pd_constructs.network.network import (
    DefaultSecurityGroupRestriction,
    GpuAvailabilityZoneProvider,
    NatEgress,
)
from stacks.app_stack import AppStack, AppStackProps


class ClusterStack(AppStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        control_plane_subnets: Sequence[ec2.ISubnet],
        egress_route_table_ids: Sequence[str],
        load_balancer_route_table_ids: Sequence[str],
        default_security_group_id: str,
        gpu_nodes_stack_name: str,
        gpu_nodes_stack_path: str,
        **props: Unpack[AppStackProps],
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config = self.config
        # Beside the control plane, which needs no egress: nodes and the kubectl functions do,
        # and they come in the stacks after this one.
        self.egress = NatEgress(
            self,
            "Egress",
            vpc=vpc,
            public_subnet=vpc.public_subnets[0],
            route_table_ids=egress_route_table_ids,
            nat_only_route_table_ids=load_balancer_route_table_ids,
        )
        self.eks = PdCluster(
            self,
            "Cluster",
            vpc=vpc,
            control_plane_subnets=control_plane_subnets,
            cluster_name=config.cluster_name,
            kubernetes_version=config.kubernetes_version,
            admin_principal_arns=config.admin_principal_arns,
            # Without allowNoAdmins the Network stack's refusal says it, once.
            warn_without_admins=config.allow_no_admins,
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            log_retention_days=config.log_retention_days,
            log_removal_policy=self.log_policy.removal_policy,
        )
        self.cluster = self.eks.cluster
        # The cluster's delete waits until no node group is left: the GPU node group is the
        # GpuNodes stack's, which deploys beside this one, so a rollback of this stack's first
        # create or a destroy of both at once could otherwise try to delete the cluster while
        # that group exists (docs/teardown.md). Refers to the cluster only: created seconds
        # after it, beside the add-ons, and deleted before it.
        self.nodegroups_gone = NodegroupsGone(
            self,
            "NodegroupsGone",
            cluster=as_icluster(self.cluster),
            cluster_name=config.cluster_name,
            gpu_nodes_stack_path=gpu_nodes_stack_path,
            log_policy=self.log_policy,
        )
        # The VPC's default security group loses its rules here, beside the control plane,
        # rather than in the network stack, which would wait for this function first.
        self.default_security_group = DefaultSecurityGroupRestriction(
            self,
            "DefaultSecurityGroup",
            default_security_group_id=default_security_group_id,
            log_policy=self.log_policy,
        )
        # Before any node joins (the system nodes' stack deploys after this one; the GPU nodes
        # join minutes after the control plane is ACTIVE, this a minute after): nodes come up
        # with the managed CNI (NetworkPolicy enforcement, its own identity), and on destroy
        # they go before it. Beside the Pod Identity agent add-on, not after it.
        self.vpc_cni = VpcCniAddon(
            self,
            "VpcCni",
            cluster=self.cluster,
            addon_version=config.vpc_cni_addon_version,
            cluster_name=config.cluster_name,
            # The system nodes' subnets by ARN; the GPU subnet (GpuNodes) by its tag.
            node_subnets=vpc.private_subnets,
        )

        # The functions, roles and Providers of the later stacks' waiters (readiness check,
        # RayService recreate, GPU capacity watch): created here beside the control plane, so
        # those stacks hold only the checks themselves (docs/deploy-timeline.md).
        self.providers = Construct(self, "Providers")
        self._keep_for_upgrade(gpu_nodes_stack_name)

        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "Region", value=self.region)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {self.region} --name {config.cluster_name}",
        )

    def _keep_for_upgrade(self, gpu_nodes_stack_name: str) -> None:
        """Kept for the upgrade from the version whose GpuNodes stack imported from this one;
        remove in the next release (ray_pd_eks/cross_stack.py ``KEPT_FOR_UPGRADE``,
        docs/lifecycle.md). The two Providers serve the Delete of that stack's old GPU AZ
        choice and capacity watch (a custom resource's ServiceToken cannot change, so the new
        ones, in GpuNodes, have new logical ids); the exports stay while the old GpuNodes
        stack, updated beside this one, still imports them."""
        config = self.config
        chooser = GpuAvailabilityZoneProvider(
            self,
            "GpuAzChooser",
            log_policy=self.log_policy,
        )
        chooser.serve_stack(gpu_nodes_stack_name)
        watch = gpu_capacity_watch_provider(
            Construct(self.providers, "GpuCapacityWatch"),
            cluster_name=config.cluster_name,
            watched=f"{config.gpu_nodegroup_name}-*",
            served_stack_name=gpu_nodes_stack_name,
            timeout=Duration.minutes(config.gpu_capacity_watch_minutes),
            # No longer failure evidence (the watch of this release is GpuNodes'): with the
            # app's other logs, so a fresh deploy leaves nothing of it behind.
            log_policy=self.log_policy,
        )
        cluster = self.cluster
        kubectl = cluster.kubectl_provider
        assert kubectl is not None
        for value in (
            cluster.cluster_name,
            cluster.cluster_arn,
            cluster.cluster_security_group_id,
            kubectl.service_token,
            chooser.service_token,
            watch.service_token,
            self.vpc_cni.role.role_name,
        ):
            self.export_value(value)
