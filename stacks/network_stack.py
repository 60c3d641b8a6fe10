"""Network layer: VPC, NAT egress, flow logs, and the GPU subnet in the chosen GPU AZ."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Fn, Stack
from constructs import Construct

from pd_constructs.network import GpuAvailabilityZone, PdNetwork, gpu_subnet_blocks
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_removal_policy, log_retention


class NetworkStack(Stack):
    @property
    def availability_zones(self) -> list[str]:
        """The region's first two AZs, resolved by CloudFormation (``Fn::GetAZs``) rather than
        by a context lookup, so synthesis with an explicit account/region stays offline."""
        return [Fn.select(i, Fn.get_azs()) for i in range(2)]

    def __init__(self, scope: Construct, construct_id: str, *, config: AppConfig, **kwargs: Any):
        super().__init__(scope, construct_id, **kwargs)
        self.gpu_az = GpuAvailabilityZone(
            self,
            "GpuAz",
            instance_type=config.gpu_node_type,
            requested_az=config.gpu_az,
            capacity_reservation_id=config.gpu_capacity_reservation_id,
            placement_group_name=config.gpu_placement_group_name,
            instance_count=config.gpu_node_count,
            subnet_cidrs=gpu_subnet_blocks(config.vpc_cidr),
            log_retention=log_retention(config),
            log_removal_policy=log_removal_policy(config),
        )
        self.network = PdNetwork(
            self,
            "Network",
            vpc_cidr=config.vpc_cidr,
            gpu_az=self.gpu_az.az_name,
            gpu_subnet_cidr=self.gpu_az.subnet_cidr,
            log_retention=log_retention(config),
            log_removal_policy=log_removal_policy(config),
        )
        self.vpc = self.network.vpc
        self.gpu_subnet = self.network.gpu_subnet
        CfnOutput(
            self,
            "GpuAvailabilityZone",
            value=self.gpu_az.az_name,
            description="The one AZ of the EFA GPU node group",
        )
