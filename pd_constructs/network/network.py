"""The VPC (private subnets in two AZs for the cluster, NAT egress, S3 endpoint) and the GPU
subnet in the GPU AZ with the construct that chooses that AZ."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, CustomResource, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.lambda_functions import function_resource, handler_function
from pd_constructs.common.nag import (
    acknowledge,
    acknowledge_basic_execution_role,
    nag_flatten,
    suppress_provider_framework,
)
from pd_constructs.lifecycle.rollback import grant_describe_named_stack, grant_describe_own_stack
from ray_pd_eks.logs import LogPolicy
from ray_pd_eks.vpc_layout import CONTROL_PLANE_PREFIX, LOAD_BALANCER_PREFIX, vpc_layout

CONTROL_PLANE_SUBNET_GROUP = "ControlPlane"
LOAD_BALANCER_SUBNET_GROUP = "LoadBalancer"


def subnet_plan(vpc_cidr: str) -> dict[str, str]:
    """The subnet masks ``ec2.Vpc`` is given, from :func:`ray_pd_eks.vpc_layout.vpc_layout`
    (quarters 0-1 private, then the public subnets, the control plane's and the internal load
    balancer's, quarter 3 the GPU subnet)."""
    layout = vpc_layout(vpc_cidr)
    return {
        "private_mask": str(layout.private_mask),
        "public_mask": str(layout.public_mask),
        "control_plane_mask": str(CONTROL_PLANE_PREFIX),
        "load_balancer_mask": str(LOAD_BALANCER_PREFIX),
    }


def gpu_subnet_blocks(vpc_cidr: str) -> tuple[str, str]:
    """The two halves of the VPC's last quarter: the GPU subnet uses one, and the other when it
    moves to another AZ (the new subnet is created before the old one is deleted)."""
    return vpc_layout(vpc_cidr).gpu


class GpuAvailabilityZoneProvider(Construct):
    """The GPU AZ chooser's function and its CDK ``Provider`` (handler: ``assets/lambda/gpu_az``).

    Nothing here depends on the AZ, so it can live in an earlier stack than the custom resource
    (:class:`GpuAvailabilityZone`) it serves: the GPU stack's deploy then starts with the choice
    itself, seconds, instead of first creating roles and functions (docs/deploy-timeline.md).
    The function may read EC2's offerings and reservations, and call
    ``cloudformation:DescribeStacks`` (to tell a rollback from a deploy) only on the stack that
    holds the resource: by default its own, else the one given to :meth:`serve_stack`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = fn = handler_function(
            self,
            folder="gpu_az",
            description="Chooses the Availability Zone of the EFA GPU node group",
            log_policy=log_policy,
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:DescribeInstanceTypeOfferings", "ec2:DescribeCapacityReservations"],
                resources=["*"],
            )
        )
        provider = cr.Provider(self, "Provider", on_event_handler=fn, log_group=fn.log_group)
        self.service_token = provider.service_token
        self._describe_findings: list[str] = []
        acknowledge_basic_execution_role(fn)
        suppress_provider_framework(provider, fn)

    def serve_stack(self, stack: Stack | str) -> None:
        """Let the function tell a rollback of ``stack`` (which holds the custom resource, or
        its name) from a deploy: DescribeStacks on that one stack (docs/lifecycle.md)."""
        if stack is Stack.of(self):
            grant_describe_own_stack(self.function)
            findings: list[str] = []
        else:
            name = stack if isinstance(stack, str) else stack.stack_name
            arn = grant_describe_named_stack(self.function, name)
            findings = [f"Resource::{nag_flatten(Stack.of(self), arn)}"]
        acknowledge(
            self.function,
            "AwsSolutions-IAM5",
            "ec2:DescribeInstanceTypeOfferings and ec2:DescribeCapacityReservations (and, "
            "for the subnet the GPU route table already serves, ec2:DescribeRouteTables and "
            "ec2:DescribeSubnets) have no resource-level permissions; all are read-only. "
            "DescribeStacks is on the one "
            "stack of the GPU AZ's custom resource (its ARN ends in an id CloudFormation "
            "assigns, hence the trailing *).",
            findings=["Resource::*", *findings],
        )


class GpuAvailabilityZone(Construct):
    """The single AZ of the GPU node group, resolved at deploy time (see the handler's docstring)
    by ``provider`` (created with it, in this construct's stack, when not given).

    ``requested_az`` empty means "the first AZ that offers ``instance_type``"; a requested AZ is
    checked, so a wrong one fails in seconds instead of after a 20-minute node-group timeout.

    ``capacity_reservation_id`` (default "": none) names an On-Demand Capacity Reservation; the
    AZ is then the reservation's, and the deploy fails at once unless the reservation is active,
    for ``instance_type`` on Linux/UNIX with default tenancy, has ``instance_count`` (default 2)
    instances free (on Create) and was created in ``placement_group_name`` (default "": the
    stack creates its own cluster placement group, so only a reservation outside any placement
    group fits).

    ``subnet_cidrs`` are the two blocks the GPU subnet alternates between when it moves to
    another AZ (:func:`gpu_subnet_blocks`); ``subnet_cidr`` is the one to use now.
    ``route_table_id`` (default "": none) is the GPU route table: on Create the subnet it
    already serves counts as the previous choice, so a resource that replaces one of another
    logical id (its Provider moved stack) keeps the AZ and block, and so the subnet.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_type: str,
        requested_az: str,
        log_policy: LogPolicy,
        capacity_reservation_id: str = "",
        placement_group_name: str = "",
        subnet_cidrs: Sequence[str],
        instance_count: int = 2,
        provider: GpuAvailabilityZoneProvider | None = None,
        route_table_id: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        if len(subnet_cidrs) != 2:
            raise ValueError(f"GpuAvailabilityZone subnet_cidrs={subnet_cidrs}: give two blocks")
        if instance_count < 1:
            raise ValueError(
                f"GpuAvailabilityZone instance_count={instance_count}: needs at least 1 node"
            )
        if provider is None:
            provider = GpuAvailabilityZoneProvider(
                self,
                "Chooser",
                log_policy=log_policy,
            )
        # Tells CloudFormation's rollback Update (answered at once, no EC2 call) from a deploy.
        provider.serve_stack(Stack.of(self))
        if route_table_id:
            # On Create, the subnet the GPU route table already serves is the previous choice
            # (read-only calls without resource-level permissions).
            provider.function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["ec2:DescribeRouteTables", "ec2:DescribeSubnets"], resources=["*"]
                )
            )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::GpuAvailabilityZone",
            properties={
                "InstanceType": instance_type,
                "RequestedAz": requested_az,
                "CapacityReservationId": capacity_reservation_id,
                "PlacementGroupName": placement_group_name,
                "InstanceCount": str(instance_count),
                "SubnetCidrs": ",".join(subnet_cidrs),
                **({"RouteTableId": route_table_id} if route_table_id else {}),
            },
        )
        self.az_name = self.resource.get_att_string("AvailabilityZone")
        self.subnet_cidr = self.resource.get_att_string("SubnetCidr")


class PdNetwork(Construct):
    """VPC with flow logs and the route table of the GPU subnet (the subnet itself lives with
    the GPU node group: see :class:`GpuSubnet`). The NAT gateway and the S3 endpoint are not
    here: :class:`NatEgress` adds them in the cluster's stack, so their minutes run beside the
    control plane's creation, which needs no egress, instead of before it
    (docs/deploy-timeline.md).

    By default: the VPC CIDR's first half holds two /18 private subnets (for a /16) in the first
    two AZs of the region, public /24 subnets for the NAT gateway follow, then two /28 subnets
    that only the EKS control plane's network interfaces use (``control_plane_subnets``), two
    /27 subnets that only an internal ALB uses (``load_balancer_subnets``), and the last
    quarter is kept for the GPU subnet (:mod:`ray_pd_eks.vpc_layout`). Everything here is
    independent of the GPU AZ and of the endpoint settings, so the values other stacks import
    never change when the GPU subnet moves, and setting ``endpointExposure`` never touches the
    VPC. ``egress_route_table_ids`` are the route tables of the nodes and functions, which need
    a default route through the NAT gateway and the S3 endpoint;
    ``load_balancer_route_table_ids`` those of the load balancer's subnets, which need the
    default route only (the ALB fetches its JWKS over 443; ELB delivers its access logs itself).

    The VPC's default security group keeps EC2's default rules here;
    :class:`DefaultSecurityGroupRestriction` removes them from another stack
    (``default_security_group_id``), so this one does not wait for a function.

    The S3 gateway endpoint (no charge) carries the nodes' S3 traffic (ECR serves image layers
    from S3, and staged weights come from S3) instead of the NAT gateway, in every private
    route table, the GPU one included.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_cidr: str,
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        plan = subnet_plan(vpc_cidr)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(vpc_cidr),
            max_azs=2,
            # The private subnets keep their type (and so every selection by type); their
            # default route to the NAT gateway comes from NatEgress.
            nat_gateways=0,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            # The default security group allows all traffic between its members; nothing uses
            # it, so its rules are stripped, but not by aws-cdk-lib's custom resource here:
            # this stack would wait for its function and the cluster's stack for this one.
            # DefaultSecurityGroupRestriction does it in the cluster's stack instead.
            restrict_default_security_group=False,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=int(plan["private_mask"]),
                ),
                ec2.SubnetConfiguration(
                    name="Public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=int(plan["public_mask"]),
                    map_public_ip_on_launch=False,
                ),
                # Last, so the blocks before it never move: the control plane's network
                # interfaces and nothing else (no route out: the control plane needs none in
                # this VPC). NetworkPolicies admit "the API server" by these blocks, which no
                # node and so no pod can take an address from (docs/security.md).
                ec2.SubnetConfiguration(
                    name=CONTROL_PLANE_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=int(plan["control_plane_mask"]),
                ),
                # Last again, for the same reason: an internal ALB's network interfaces and
                # nothing else. NetworkPolicies admit "the load balancer" by these blocks, which
                # no node and so no pod can take an address from (docs/security.md). Isolated
                # in aws-cdk-lib's terms only, so that no selection by type picks them (a node
                # group's default, the kubectl provider's and the functions' private subnets);
                # NatEgress gives them their default route, for the JWKS fetch.
                ec2.SubnetConfiguration(
                    name=LOAD_BALANCER_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=int(plan["load_balancer_mask"]),
                ),
            ],
        )
        self.control_plane_subnets = self.vpc.select_subnets(
            subnet_group_name=CONTROL_PLANE_SUBNET_GROUP
        ).subnets
        self.load_balancer_subnets = self.vpc.select_subnets(
            subnet_group_name=LOAD_BALANCER_SUBNET_GROUP
        ).subnets
        flow_log_group = log_policy.log_group(self, "FlowLogs")
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # Not tied to an AZ: every GPU subnet, in whichever AZ, is associated with it.
        self.gpu_route_table = ec2.CfnRouteTable(self, "GpuRouteTable", vpc_id=self.vpc.vpc_id)
        # Its rules are stripped by DefaultSecurityGroupRestriction, in the cluster's stack.
        self.default_security_group_id = self.vpc.vpc_default_security_group
        self.egress_route_table_ids = [
            *(s.route_table.route_table_id for s in self.vpc.private_subnets),
            self.gpu_route_table.ref,
        ]
        self.load_balancer_route_table_ids = [
            s.route_table.route_table_id for s in self.load_balancer_subnets
        ]


class DefaultSecurityGroupRestriction(Construct):
    """Removes the two default rules of a VPC's default security group
    (``default_security_group_id``): all traffic in from its members, all traffic out
    (handler: ``assets/lambda/default_sg``). What aws-cdk-lib's ``restrictDefaultSecurityGroup``
    does, with the same two revokes, but as a construct of its own, so it can live in another
    stack than the VPC: beside the control plane, where its function's minutes are off the
    deploy's critical path (docs/deploy-timeline.md). Nothing may depend on it.

    The function may revoke ingress and egress rules of that one group and nothing else; its
    Delete leaves the group as it is (the VPC goes with the network stack, after this one).
    Its log group keeps ``log_policy``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        default_security_group_id: str,
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function, self.resource = function_resource(
            self,
            folder="default_sg",
            description="Removes the rules of the VPC's default security group",
            log_policy=log_policy,
            resource_type="Custom::DefaultSecurityGroupRestriction",
            properties={
                "DefaultSecurityGroupId": default_security_group_id,
                "Account": Aws.ACCOUNT_ID,
            },
        )
        group_arn = Stack.of(self).format_arn(
            service="ec2", resource="security-group", resource_name=default_security_group_id
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:RevokeSecurityGroupEgress", "ec2:RevokeSecurityGroupIngress"],
                resources=[group_arn],
            )
        )


class NatEgress(Construct):
    """The private subnets' way out: one NAT gateway (with its Elastic IP) in ``public_subnet``
    with a default route through it in each of ``route_table_ids`` (container registries,
    Hugging Face, the AWS APIs), and an S3 gateway endpoint (no charge) in the same route
    tables, so S3 traffic (ECR serves image layers from S3; staged weights) bypasses the NAT
    gateway. ``nat_only_route_table_ids`` (default none) get the default route but not the S3
    endpoint: the internal ALB's subnets, whose only traffic out is the JWKS fetch. Nodes, and
    the kubectl and readiness functions, need it only once they run, so it can be created
    beside the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        public_subnet: ec2.ISubnet,
        route_table_ids: Sequence[str],
        nat_only_route_table_ids: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.s3_endpoint = ec2.CfnVPCEndpoint(
            self,
            "S3Endpoint",
            vpc_id=vpc.vpc_id,
            service_name=ec2.GatewayVpcEndpointAwsService.S3.name,
            vpc_endpoint_type="Gateway",
            route_table_ids=list(route_table_ids),
        )
        eip = ec2.CfnEIP(self, "Eip", domain="vpc")
        # Its address (Ref): the endpoint probe reaches an internet-facing ALB from it.
        self.public_ip = eip.ref
        self.nat_gateway = ec2.CfnNatGateway(
            self,
            "Resource",
            subnet_id=public_subnet.subnet_id,
            allocation_id=eip.attr_allocation_id,
        )
        # Numbered in order, the NAT-only tables last: the routes of the tables before them
        # keep their logical ids.
        self.routes = [
            ec2.CfnRoute(
                self,
                f"DefaultRoute{i}",
                route_table_id=table_id,
                destination_cidr_block="0.0.0.0/0",
                nat_gateway_id=self.nat_gateway.ref,
            )
            for i, table_id in enumerate([*route_table_ids, *nat_only_route_table_ids])
        ]


class GpuSubnet(Construct):
    """The GPU node group's one subnet, in ``availability_zone`` with ``cidr_block`` (both
    usually chosen at deploy time by :class:`GpuAvailabilityZone`), associated with the
    network's GPU route table (NAT egress and the S3 endpoint).

    It belongs in the stack of the GPU node group: when the AZ changes, CloudFormation replaces
    the subnet and the node group in one stack update, and no other stack imports either.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        availability_zone: str,
        cidr_block: str,
        route_table_id: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = ec2.CfnSubnet(
            self,
            "Resource",
            vpc_id=vpc.vpc_id,
            availability_zone=availability_zone,
            cidr_block=cidr_block,
            map_public_ip_on_launch=False,
        )
        ec2.CfnSubnetRouteTableAssociation(
            self,
            "RouteTableAssociation",
            subnet_id=self.resource.ref,
            route_table_id=route_table_id,
        )
        self.subnet = ec2.Subnet.from_subnet_attributes(
            self,
            "Imported",
            subnet_id=self.resource.ref,
            availability_zone=availability_zone,
            route_table_id=route_table_id,
        )
