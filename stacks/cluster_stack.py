"""Cluster layer: the EKS control plane, its add-ons, the NAT gateway the nodes need, and the
restriction of the VPC's default security group.

Deliberately nothing that waits for a node or calls the Kubernetes API (that needs the NAT
gateway created here): the system node group with the workload and the node warm-up, and the
GPU node group with its subnet, capacity watch and device plugins, are in their own stacks,
which deploy side by side once this one is done (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from aws_cdk import CfnOutput
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from pd_constructs.cluster import PdCluster
from pd_constructs.network import (
    DefaultSecurityGroupRestriction,
    GpuAvailabilityZoneProvider,
    NatEgress,
)
from pd_constructs.vpc_cni import VpcCniAddon
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
            endpoint_public_cidrs=config.endpoint_public_cidrs,
            log_retention_days=config.log_retention_days,
            log_removal_policy=self.log_removal_policy,
        )
        self.cluster = self.eks.cluster
        # The GPU AZ chooser's function, created beside the control plane; its custom resource
        # is in the GPU node stack (the choice changes with the AZ, so it is never exported).
        self.gpu_az_chooser = GpuAvailabilityZoneProvider(
            self,
            "GpuAzChooser",
            log_retention=self.log_retention,
            log_removal_policy=self.log_removal_policy,
        )
        # The VPC's default security group loses its rules here, beside the control plane,
        # rather than in the network stack, which would wait for this function first.
        self.default_security_group = DefaultSecurityGroupRestriction(
            self,
            "DefaultSecurityGroup",
            default_security_group_id=default_security_group_id,
            log_retention=self.log_retention,
            log_removal_policy=self.log_removal_policy,
        )
        # Before any node joins (the node groups' stacks deploy after this one): nodes come up
        # with the managed CNI (NetworkPolicy enforcement, its own identity), and on destroy
        # they go before it. Beside the Pod Identity agent add-on, not after it.
        self.vpc_cni = VpcCniAddon(
            self,
            "VpcCni",
            cluster=self.cluster,
            addon_version=config.vpc_cni_addon_version,
            cluster_name=config.cluster_name,
            # The system nodes' subnets; the GPU subnet's access comes with it (GpuNodes).
            node_subnets=vpc.private_subnets,
        )

        # The functions, roles and Providers of the later stacks' waiters (readiness check,
        # RayService recreate, GPU capacity watch): created here beside the control plane, so
        # those stacks hold only the checks themselves (docs/deploy-timeline.md).
        self.providers = Construct(self, "Providers")

        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "Region", value=self.region)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {self.region} --name {config.cluster_name}",
        )
