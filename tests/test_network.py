"""Network stack: VPC, NAT egress, flow logs, and the single-AZ GPU subnet."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pd_constructs.network.network import gpu_subnet_blocks, subnet_plan
from ray_pd_eks.vpc_layout import VpcLayout, vpc_layout
from tests.synth import Synthesized


def _subnets(app: Synthesized) -> dict[str, dict[str, Any]]:
    return app.resources("Network", "AWS::EC2::Subnet")


def test_vpc_has_dns_and_the_configured_cidr(default_app: Synthesized) -> None:
    vpc = default_app.only("Network", "AWS::EC2::VPC")["Properties"]
    assert vpc["CidrBlock"] == "10.0.0.0/16"
    assert vpc["EnableDnsSupport"] is True and vpc["EnableDnsHostnames"] is True


def test_private_subnets_span_two_azs_and_egress_through_one_nat(default_app: Synthesized) -> None:
    private = [
        s["Properties"]
        for k, s in _subnets(default_app).items()
        if k.startswith("NetworkVpcPrivateSubnet")
    ]
    assert [p["AvailabilityZone"]["Fn::Select"][0] for p in private] == [0, 1]
    assert all(p["MapPublicIpOnLaunch"] is False for p in private)
    # The NAT gateway is created beside the control plane (the cluster stack), in the first
    # public subnet; the network stack has none, so the cluster does not wait for it.
    assert default_app.resources("Network", "AWS::EC2::NatGateway") == {}
    nat = default_app.only("Cluster", "AWS::EC2::NatGateway")["Properties"]
    assert "PublicSubnet1" in nat["SubnetId"]["Fn::ImportValue"]
    nat_routes = [
        r["Properties"]
        for r in default_app.resources("Cluster", "AWS::EC2::Route").values()
        if "NatGatewayId" in r["Properties"]
    ]
    # The two cluster private route tables, the GPU one and the load balancer's two route
    # 0.0.0.0/0 to the NAT gateway.
    assert len(nat_routes) == 5
    assert {r["DestinationCidrBlock"] for r in nat_routes} == {"0.0.0.0/0"}
    tables = {r["RouteTableId"]["Fn::ImportValue"] for r in nat_routes}
    assert sum("PrivateSubnet" in t for t in tables) == 2
    assert sum("GpuRouteTable" in t for t in tables) == 1
    assert sum("LoadBalancerSubnet" in t for t in tables) == 2


def test_flow_logs_capture_all_traffic_into_a_log_group_with_retention(
    default_app: Synthesized,
) -> None:
    flow = default_app.only("Network", "AWS::EC2::FlowLog")["Properties"]
    assert flow["TrafficType"] == "ALL" and flow["ResourceType"] == "VPC"
    group_id = flow["LogGroupName"]["Ref"]
    group = default_app.templates["Network"]["Resources"][group_id]
    assert group["Properties"]["RetentionInDays"] == 30
    assert group["DeletionPolicy"] == "Delete"


def test_gpu_subnet_sits_in_the_az_chosen_at_deploy_time(default_app: Synthesized) -> None:
    resources = default_app.templates["GpuNodes"]["Resources"]
    gpu = default_app.only("GpuNodes", "AWS::EC2::Subnet")["Properties"]
    chooser_id, attribute = gpu["AvailabilityZone"]["Fn::GetAtt"]
    assert attribute == "AvailabilityZone"
    chooser = resources[chooser_id]
    assert chooser["Type"] == "Custom::GpuAvailabilityZone"
    assert chooser["Properties"]["InstanceType"] == "g6.8xlarge"
    assert chooser["Properties"]["RequestedAz"] == ""
    # Its block is chosen with it, from the two halves of the VPC's last quarter, so moving to
    # another AZ never collides with the subnet being replaced.
    assert gpu["CidrBlock"] == {"Fn::GetAtt": [chooser_id, "SubnetCidr"]}
    assert chooser["Properties"]["SubnetCidrs"] == "10.0.192.0/19,10.0.224.0/19"


def test_requested_gpu_az_is_passed_to_the_chooser(variant_app: Synthesized) -> None:
    chooser = variant_app.only("GpuNodes", "Custom::GpuAvailabilityZone")["Properties"]
    assert chooser["RequestedAz"] == "us-west-2b"


def test_az_chooser_may_only_describe_offerings(default_app: Synthesized) -> None:
    statements = [
        st
        for p in default_app.resources("Cluster", "AWS::IAM::Policy").values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "ec2:DescribeInstanceTypeOfferings" in str(st["Action"])
    ]
    assert statements == [
        {
            "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeInstanceTypeOfferings"],
            "Effect": "Allow",
            "Resource": "*",
        }
    ]


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "172.16.0.0/17", "192.168.0.0/18"])
def test_subnet_plan_never_overlaps(cidr: str) -> None:
    layout = vpc_layout(cidr)
    net = ipaddress.IPv4Network(cidr)
    assert subnet_plan(cidr)["private_mask"] == str(layout.private_mask)
    blocks = [
        ipaddress.IPv4Network(b)
        for b in (
            *layout.private,
            *layout.public,
            *layout.control_plane,
            *layout.load_balancer,
            *layout.gpu,
        )
    ]
    assert len(blocks) == 10
    for i, a in enumerate(blocks):
        assert a.subnet_of(net)
        for b in blocks[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    assert [ipaddress.IPv4Network(b).prefixlen for b in layout.control_plane] == [28, 28]
    # An ALB's subnets: at least a /27 each (Application Load Balancers Guide), two AZs.
    assert [ipaddress.IPv4Network(b).prefixlen for b in layout.load_balancer] == [27, 27]
    assert subnet_plan(cidr)["load_balancer_mask"] == "27"
    assert gpu_subnet_blocks(cidr) == layout.gpu


@pytest.mark.parametrize(
    ("cidr", "expected"),
    [
        pytest.param(
            "10.0.0.0/16",
            VpcLayout(
                vpc="10.0.0.0/16",
                private=("10.0.0.0/18", "10.0.64.0/18"),
                public=("10.0.128.0/24", "10.0.129.0/24"),
                control_plane=("10.0.130.0/28", "10.0.130.16/28"),
                load_balancer=("10.0.130.32/27", "10.0.130.64/27"),
                gpu=("10.0.192.0/19", "10.0.224.0/19"),
            ),
            id="16-the-largest",
        ),
        pytest.param(
            "172.16.0.0/17",
            VpcLayout(
                vpc="172.16.0.0/17",
                private=("172.16.0.0/19", "172.16.32.0/19"),
                public=("172.16.64.0/25", "172.16.64.128/25"),
                control_plane=("172.16.65.0/28", "172.16.65.16/28"),
                load_balancer=("172.16.65.32/27", "172.16.65.64/27"),
                gpu=("172.16.96.0/20", "172.16.112.0/20"),
            ),
            id="17",
        ),
        pytest.param(
            "192.168.0.0/18",
            VpcLayout(
                vpc="192.168.0.0/18",
                private=("192.168.0.0/20", "192.168.16.0/20"),
                public=("192.168.32.0/26", "192.168.32.64/26"),
                control_plane=("192.168.32.128/28", "192.168.32.144/28"),
                load_balancer=("192.168.32.160/27", "192.168.32.192/27"),
                gpu=("192.168.48.0/21", "192.168.56.0/21"),
            ),
            id="18-the-smallest",
        ),
    ],
)
def test_subnet_plan_of_each_accepted_size(cidr: str, expected: VpcLayout) -> None:
    """Every block, as the module docstring lays them out: private quarters 0-1, the public
    blocks (the VPC's prefix + 8) at the start of quarter 2, the control plane's two /28s right
    after them, the load balancer's two /27s right after those (the next /27 boundary), the GPU
    subnet's halves of quarter 3. The template test checks the same for the default /16 only,
    and needs a synthesized app."""
    layout = vpc_layout(cidr)
    assert layout == expected
    assert layout.private_mask == ipaddress.IPv4Network(cidr).prefixlen + 2
    assert layout.public_mask == ipaddress.IPv4Network(cidr).prefixlen + 8
    assert layout.node_blocks == (*expected.private, *expected.gpu)


@pytest.mark.parametrize("cidr", ["10.0.0.0/15", "10.0.0.0/19"])
def test_layout_refuses_a_vpc_outside_the_accepted_range(cidr: str) -> None:
    with pytest.raises(ValueError, match="/16 to /18"):
        vpc_layout(cidr)


def test_subnet_cidrs_in_template_match_the_plan(default_app: Synthesized) -> None:
    """ec2.Vpc allocates the groups in order (private, public, control plane, load balancer),
    as ray_pd_eks.vpc_layout computes them."""
    cidrs = sorted(s["Properties"]["CidrBlock"] for s in _subnets(default_app).values())
    layout = vpc_layout(default_app.config.vpc_cidr)
    assert cidrs == sorted(
        (*layout.private, *layout.public, *layout.control_plane, *layout.load_balancer)
    )
    assert cidrs == [
        "10.0.0.0/18",
        "10.0.128.0/24",
        "10.0.129.0/24",
        "10.0.130.0/28",
        "10.0.130.16/28",
        "10.0.130.32/27",
        "10.0.130.64/27",
        "10.0.64.0/18",
    ]


# The subnets of a deployed VPC: a new CIDR or logical id replaces a subnet (and what sits in
# it), so a subnet group added later goes last and leaves these as they are (docs/lifecycle.md).
EXISTING_SUBNETS = {
    "NetworkVpcPrivateSubnet1Subnet6DD86AE6": "10.0.0.0/18",
    "NetworkVpcPrivateSubnet2Subnet1BDBE877": "10.0.64.0/18",
    "NetworkVpcPublicSubnet1Subnet36933139": "10.0.128.0/24",
    "NetworkVpcPublicSubnet2SubnetC427CCE0": "10.0.129.0/24",
    "NetworkVpcControlPlaneSubnet1Subnet2397BBC6": "10.0.130.0/28",
    "NetworkVpcControlPlaneSubnet2SubnetB8C6307B": "10.0.130.16/28",
}


def test_existing_subnets_keep_their_logical_ids_and_cidrs(default_app: Synthesized) -> None:
    found = {k: s["Properties"]["CidrBlock"] for k, s in _subnets(default_app).items()}
    assert {k: found.get(k) for k in EXISTING_SUBNETS} == EXISTING_SUBNETS
    added = {k: v for k, v in found.items() if k not in EXISTING_SUBNETS}
    assert sorted(added.values()) == ["10.0.130.32/27", "10.0.130.64/27"]
    assert all(k.startswith("NetworkVpcLoadBalancerSubnet") for k in added), added


def _network_cidr_of(app: Synthesized, ref: Any) -> str:
    """The CIDR of a Network-stack subnet as another stack refers to it (an import)."""
    outputs = app.templates["Network"]["Outputs"].values()
    (output,) = [o for o in outputs if o.get("Export", {}).get("Name") == ref["Fn::ImportValue"]]
    subnet = app.templates["Network"]["Resources"][output["Value"]["Ref"]]
    return str(subnet["Properties"]["CidrBlock"])


def _node_group_blocks(app: Synthesized) -> list[str]:
    """Every block a node group (system, GPU) can place a node in."""
    layout = vpc_layout(app.config.vpc_cidr)
    blocks = []
    for stack in ("Workload", "GpuNodes"):
        for group in app.resources(stack, "AWS::EKS::Nodegroup").values():
            for ref in group["Properties"]["Subnets"]:
                if "Fn::ImportValue" in ref:
                    blocks.append(_network_cidr_of(app, ref))
                else:  # the GPU subnet: one of the two halves of the last quarter
                    blocks.extend(layout.gpu)
    assert blocks
    return blocks


def _overlapping(blocks: Any, others: Any) -> list[tuple[str, str]]:
    return [
        (a, b)
        for a in blocks
        for b in others
        if ipaddress.IPv4Network(a).overlaps(ipaddress.IPv4Network(b))
    ]


@pytest.mark.parametrize("name", ["default_app", "variant_app", "token_app"])
def test_no_node_group_subnet_overlaps_the_control_planes(
    name: str, request: pytest.FixtureRequest
) -> None:
    """The control plane's interfaces have subnets of their own: no node group (so no node and
    no pod) takes an address from them, and they are all the cluster is given."""
    app: Synthesized = request.getfixturevalue(name)
    layout = vpc_layout(app.config.vpc_cidr)
    cluster = app.only("Cluster", "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    control = {_network_cidr_of(app, ref) for ref in cluster["SubnetIds"]}
    assert control == set(layout.control_plane)
    assert _overlapping(_node_group_blocks(app), control) == []


def _alb_blocks(app: Synthesized) -> set[str]:
    (lb,) = app.resources("Workload", "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    return {_network_cidr_of(app, ref) for ref in lb["Properties"]["Subnets"]}


@pytest.mark.parametrize(
    ("name", "scheme"), [("variant_app", "internal"), ("token_app", "internet-facing")]
)
def test_no_node_group_or_control_plane_subnet_overlaps_the_albs(
    name: str, scheme: str, request: pytest.FixtureRequest
) -> None:
    """The ALB's subnets are its own (internal: the two /27s of the load balancer group;
    internet-facing: the public subnets, where only the NAT gateway is): no node group (system,
    GPU), so no node and no pod, and no control-plane interface takes an address there, so
    the NetworkPolicy's ALB peers (tests/test_endpoint_network_policy.py) admit the ALB alone."""
    app: Synthesized = request.getfixturevalue(name)
    layout = vpc_layout(app.config.vpc_cidr)
    (lb,) = app.resources("Workload", "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    assert lb["Properties"]["Scheme"] == scheme
    alb = _alb_blocks(app)
    assert alb == set(layout.load_balancer if scheme == "internal" else layout.public)
    assert len(alb) == 2  # an ALB needs subnets in at least two AZs
    assert _overlapping(_node_group_blocks(app), alb) == []
    assert _overlapping(layout.control_plane, alb) == []
    # The functions (kubectl, readiness, probes) sit in the private subnets, not the ALB's.
    for stack, template in app.templates.items():
        for fn in template["Resources"].values():
            vpc_config = fn.get("Properties", {}).get("VpcConfig")
            if fn["Type"] == "AWS::Lambda::Function" and vpc_config:
                blocks = [_network_cidr_of(app, ref) for ref in vpc_config["SubnetIds"]]
                assert _overlapping(blocks, alb) == [], stack


def test_internal_albs_subnets_route_to_the_nat_gateway_only(default_app: Synthesized) -> None:
    """Created whatever endpointExposure says (free, and the VPC never changes with it): each
    of the two has its own route table with a default route to the NAT gateway (the ALB fetches
    the issuer's JWKS over 443) and no S3 endpoint (the ALB reads nothing from S3)."""
    network = default_app.templates["Network"]["Resources"]
    subnets = {k for k in _subnets(default_app) if k.startswith("NetworkVpcLoadBalancerSubnet")}
    assert len(subnets) == 2
    tables = {
        a["Properties"]["RouteTableId"]["Ref"]
        for a in network.values()
        if a["Type"] == "AWS::EC2::SubnetRouteTableAssociation"
        and a["Properties"]["SubnetId"]["Ref"] in subnets
    }
    assert len(tables) == 2
    for table in tables:
        (route,) = [
            r["Properties"]
            for r in default_app.resources("Cluster", "AWS::EC2::Route").values()
            if table in r["Properties"]["RouteTableId"]["Fn::ImportValue"]
        ]
        assert route["DestinationCidrBlock"] == "0.0.0.0/0"
        assert route["NatGatewayId"] == {
            "Ref": next(iter(default_app.resources("Cluster", "AWS::EC2::NatGateway")))
        }
    assert not [
        r
        for r in network.values()
        if r["Type"] == "AWS::EC2::Route"
        and r["Properties"].get("RouteTableId", {}).get("Ref") in tables
    ]


def _paths_to(value: Any, wanted: set[str], path: str = "") -> list[str]:
    """The paths inside ``value`` where a reference to one of ``wanted`` (logical ids or export
    names) appears."""
    if isinstance(value, dict):
        ref = value.get("Ref", value.get("Fn::ImportValue"))
        if isinstance(ref, str) and ref in wanted:
            return [path]
        return [p for k, v in value.items() for p in _paths_to(v, wanted, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths_to(v, wanted, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("name", ["default_app", "variant_app"])
def test_only_the_control_plane_uses_its_subnets(name: str, request: pytest.FixtureRequest) -> None:
    """No function, node, load balancer, endpoint or network interface but the EKS control
    plane's takes an address from the control plane's /28s (ray_pd_eks/vpc_layout.py): the
    NetworkPolicies admit those addresses as the API server, and EKS needs their free
    addresses for an upgrade. aws-cdk-lib put the kubectl provider's functions there."""
    app: Synthesized = request.getfixturevalue(name)
    layout = vpc_layout(app.config.vpc_cidr)
    network = app.templates["Network"]
    subnets = {
        logical_id
        for logical_id, r in network["Resources"].items()
        if r["Type"] == "AWS::EC2::Subnet" and r["Properties"]["CidrBlock"] in layout.control_plane
    }
    assert len(subnets) == 2
    exports = {
        o["Export"]["Name"]
        for o in network.get("Outputs", {}).values()
        if isinstance(o.get("Value"), dict) and o["Value"].get("Ref") in subnets
    }
    users = {}
    for stack, template in app.templates.items():
        for logical_id, r in template["Resources"].items():
            found = _paths_to(r.get("Properties", {}), subnets | exports)
            if found:
                users[(stack, logical_id)] = (r["Type"], found)
    # Besides the subnets' own route table associations, only the cluster's VPC config.
    assert {t for t, _ in users.values()} == {
        "AWS::EKS::Cluster",
        "AWS::EC2::SubnetRouteTableAssociation",
    }
    for rtype, paths in users.values():
        if rtype == "AWS::EKS::Cluster":
            assert paths == [".ResourcesVpcConfig.SubnetIds[0]", ".ResourcesVpcConfig.SubnetIds[1]"]
    # The kubectl provider's two functions run in the private subnets, with NAT egress.
    private = {
        logical_id
        for logical_id, r in network["Resources"].items()
        if r["Type"] == "AWS::EC2::Subnet" and r["Properties"]["CidrBlock"] in layout.private
    }
    private_exports = {
        o["Export"]["Name"]
        for o in network.get("Outputs", {}).values()
        if isinstance(o.get("Value"), dict) and o["Value"].get("Ref") in private
    }
    kubectl = [
        r["Properties"]["VpcConfig"]["SubnetIds"]
        for logical_id, r in app.templates["Cluster"]["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function" and logical_id.startswith("ClusterKubectlProvider")
    ]
    assert len(kubectl) == 2
    for ids in kubectl:
        assert sorted(i["Fn::ImportValue"] for i in ids) == sorted(private_exports)


def test_gpu_route_table_routes_to_the_nat_and_the_gpu_subnet_uses_it(
    default_app: Synthesized,
) -> None:
    network = default_app.templates["Network"]["Resources"]
    (table_id,) = [k for k in network if k.startswith("NetworkGpuRouteTable")]
    (route,) = [
        r["Properties"]
        for r in default_app.resources("Cluster", "AWS::EC2::Route").values()
        if table_id in json.dumps(r["Properties"]["RouteTableId"])
    ]
    assert route["DestinationCidrBlock"] == "0.0.0.0/0" and "NatGatewayId" in route
    (association,) = default_app.resources(
        "GpuNodes", "AWS::EC2::SubnetRouteTableAssociation"
    ).values()
    assert table_id in association["Properties"]["RouteTableId"]["Fn::ImportValue"]


def test_s3_gateway_endpoint_serves_every_private_route_table(default_app: Synthesized) -> None:
    endpoint = default_app.only("Cluster", "AWS::EC2::VPCEndpoint")["Properties"]
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert endpoint["ServiceName"] == {
        "Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]
    }
    tables = {r["Fn::ImportValue"] for r in endpoint["RouteTableIds"]}
    private = {
        k
        for k, v in default_app.resources("Network", "AWS::EC2::RouteTable").items()
        if "Public" not in k and "ControlPlane" not in k and "LoadBalancer" not in k
    }
    assert len(tables) == len(private) == 3  # two cluster subnets and the GPU subnet
    # The control plane's subnets have no route out: its interfaces need none in this VPC. The
    # load balancer's reach the NAT gateway only.
    assert not any("ControlPlane" in t or "LoadBalancer" in t for t in tables)
    for table in private:
        assert sum(table in t for t in tables) == 1, table
