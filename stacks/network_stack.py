"""Network layer: VPC, flow logs, the S3 gateway endpoint and the GPU route table (the NAT
gateway deploys with the cluster: see ``NatEgress``).

Nothing here depends on the GPU AZ: the GPU subnet and its AZ chooser live in the GPU node
stack, so a move to another AZ never changes a value this stack exports.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Fn
from constructs import Construct

from pd_constructs.lifecycle.deploy_refusal import DeployRefusal
from pd_constructs.lifecycle.log_groups_free import LeftoverLogGroupsCheck
from pd_constructs.network.network import PdNetwork
from ray_pd_eks.config import set_hint
from ray_pd_eks.monitoring import fixed_log_group_names
from stacks.app_stack import AppStack, AppStackProps

NO_ADMINS_REASON = (
    "adminPrincipalArns is empty, so nobody could administer the cluster (kubectl, "
    "ray-pd-eks status and smoke denied, for you too). Add yourself: `ray-pd-eks settings "
    f"--add-admin-me`; or, to deploy without admins anyway, {set_hint('allowNoAdmins', 'true')}"
)


class NetworkStack(AppStack):
    @property
    def availability_zones(self) -> list[str]:
        """The region's first two AZs, resolved by CloudFormation (``Fn::GetAZs``) rather than
        by a context lookup, so synthesis with an explicit account/region stays offline."""
        return [Fn.select(i, Fn.get_azs()) for i in range(2)]

    def __init__(self, scope: Construct, construct_id: str, **props: Unpack[AppStackProps]) -> None:
        super().__init__(scope, construct_id, **props)
        config = self.config
        self.network = PdNetwork(
            self,
            "Network",
            vpc_cidr=config.vpc_cidr,
            log_policy=self.log_policy,
        )
        self.vpc = self.network.vpc
        if config.retain_logs:
            # Before anything of the stage: a leftover of an earlier retained deployment
            # stops the deploy here, not after the NAT gateway and the cluster have started.
            check = LeftoverLogGroupsCheck(
                self,
                "LeftoverLogGroups",
                log_group_names=fixed_log_group_names(config),
                log_policy=self.log_policy,
            )
            self.network.node.add_dependency(check.resource)
        self.gpu_route_table_id = self.network.gpu_route_table.ref
        self.egress_route_table_ids = self.network.egress_route_table_ids
        self.load_balancer_route_table_ids = self.network.load_balancer_route_table_ids
        self.default_security_group_id = self.network.default_security_group_id
        # Every other stack deploys after this one: refused here, nothing bills.
        if not config.admin_principal_arns and not config.allow_no_admins:
            DeployRefusal(
                self, "NoAdmins", reason=NO_ADMINS_REASON, warning_id="ray-pd-eks:noAdmins"
            )
