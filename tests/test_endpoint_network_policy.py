"""The Ray namespace's NetworkPolicies and the application endpoint: the ALB reaches Serve on
every Ray pod, from exactly the subnets it sits in (subnets no node uses), and nothing else
opens: no pod on a system node reaches Serve past the ALB (the evaluator in tests/netpol.py
over the synthesized policies)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pd_constructs.network.network_policy import (
    LOAD_BALANCER_POLICY,
    RAY_PORTS,
    load_balancer_cidrs,
    render_ray_network_policies,
)
from ray_pd_eks.config import DEFAULTS
from tests.netpol import External, Pod
from tests.synth import Synthesized
from tests.test_network_policies import World, _objects

POLICY_NAME = LOAD_BALANCER_POLICY.removesuffix(".yaml")
# In the default 10.0.0.0/16: a public subnet (10.0.128.0/24), a private one (10.0.0.0/18,
# the system nodes') and the internal ALB's own (10.0.130.32/27).
PUBLIC_SUBNET_HOST = External(ip="10.0.128.37")
PRIVATE_SUBNET_HOST = External(ip="10.0.3.4")
ALB_SUBNET_HOST = External(ip="10.0.130.40")
INTERNET = External(ip="198.51.100.7")


def _policy(app: Synthesized) -> dict[str, Any] | None:
    found = [o for _, o in _objects(app, "Workload") if o["metadata"]["name"] == POLICY_NAME]
    assert len(found) <= 1
    return found[0] if found else None


def _alb_subnet_cidrs(app: Synthesized) -> set[str]:
    """The CIDRs of the subnets the synthesized ALB is placed in (through the exports)."""
    (lb,) = app.resources("Workload", "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    network = app.templates["Network"]
    cidrs = set()
    for ref in lb["Properties"]["Subnets"]:
        output = next(
            o
            for o in network["Outputs"].values()
            if o.get("Export", {}).get("Name") == ref["Fn::ImportValue"]
        )
        cidrs.add(network["Resources"][output["Value"]["Ref"]]["Properties"]["CidrBlock"])
    return cidrs


@pytest.mark.parametrize("app_name", ["variant_app", "token_app"])
def test_peers_are_exactly_the_albs_subnets(app_name: str, request: pytest.FixtureRequest) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    policy = _policy(app)
    assert policy is not None
    (rule,) = policy["spec"]["ingress"]
    assert {p["ipBlock"]["cidr"] for p in rule["from"]} == _alb_subnet_cidrs(app)
    assert rule["ports"] == [{"protocol": "TCP", "port": RAY_PORTS.serve}]
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {"ray-pd-eks/ray-service": app.config.ray_service_name}
    }


def test_no_load_balancer_policy_without_an_endpoint(default_app: Synthesized) -> None:
    assert _policy(default_app) is None
    assert load_balancer_cidrs(DEFAULTS) == []
    names = [p["metadata"]["name"] for p in render_ray_network_policies(DEFAULTS)]
    assert POLICY_NAME not in names


def test_cidrs_follow_the_vpc_cidr() -> None:
    config = DEFAULTS.with_overrides(
        {
            "vpcCidr": "10.8.0.0/18",
            "endpointExposure": "internet-facing",
            "endpointAllowedCidrs": ["0.0.0.0/0"],
            "endpointCertificateArn": (
                "arn:aws:acm:us-west-2:123456789012:certificate/"
                "0123abcd-0123-4567-89ab-0123456789ab"
            ),
        }
    )
    assert load_balancer_cidrs(config) == ["10.8.32.0/26", "10.8.32.64/26"]
    internal = config.with_overrides(
        {"endpointExposure": "internal", "endpointAllowedCidrs": ["10.0.0.0/8"]}
    )
    assert load_balancer_cidrs(internal) == ["10.8.32.160/27", "10.8.32.192/27"]


def test_internet_facing_alb_reaches_serve_on_every_ray_pod(token_app: Synthesized) -> None:
    public_world = World(token_app)
    assert ipaddress.ip_address(PUBLIC_SUBNET_HOST.ip) in ipaddress.ip_network("10.0.128.0/24")
    for pod in public_world.ray_pods:
        assert public_world.allowed(PUBLIC_SUBNET_HOST, pod, RAY_PORTS.serve), pod.name
        # Only Serve: not the GCS, the dashboard or the raylet.
        for port in (RAY_PORTS.gcs, RAY_PORTS.dashboard, RAY_PORTS.node_manager):
            assert not public_world.allowed(PUBLIC_SUBNET_HOST, pod, port), (pod.name, port)
    # The ALB connects, not its clients: nothing on the internet reaches a pod directly.
    assert not public_world.allowed(INTERNET, public_world.head, RAY_PORTS.serve)


def test_without_an_endpoint_the_public_subnets_reach_nothing(default_app: Synthesized) -> None:
    plain_world = World(default_app)
    for pod in plain_world.ray_pods:
        assert not plain_world.allowed(PUBLIC_SUBNET_HOST, pod, RAY_PORTS.serve), pod.name


def test_internal_alb_reaches_serve_on_every_ray_pod(variant_app: Synthesized) -> None:
    internal_world = World(variant_app)
    for pod in internal_world.ray_pods:
        assert internal_world.allowed(ALB_SUBNET_HOST, pod, RAY_PORTS.serve), pod.name
        assert not internal_world.allowed(ALB_SUBNET_HOST, pod, RAY_PORTS.gcs), pod.name
        assert not internal_world.allowed(PUBLIC_SUBNET_HOST, pod, RAY_PORTS.serve), pod.name


@pytest.mark.parametrize("app_name", ["variant_app", "token_app"])
def test_pods_of_system_and_gpu_nodes_do_not_reach_serve_past_the_alb(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    """The ALB's subnets are its own (internal) or the public ones (internet-facing), and no
    node sits in either: a pod on a system node (in the Ray namespace or another), a process
    on a system node and anything in the GPU subnet match no peer of the ALB's allow, so none
    reaches Serve on 8000 without the listener's JWT check (docs/security.md)."""
    world = World(request.getfixturevalue(app_name))
    system_node = External(ip="10.0.64.25", node="sys-2")
    gpu_node_pod = Pod("job", "default", {"app": "job"}, ip="10.0.200.9", node="gpu-1")
    sources: list[Pod | External] = [
        world.stranger,
        world.neighbour,
        system_node,
        PRIVATE_SUBNET_HOST,
        gpu_node_pod,
    ]
    for source in sources:
        for pod in world.ray_pods:
            assert not world.allowed(source, pod, RAY_PORTS.serve), (source, pod.name)


def test_policy_is_applied_with_the_others_before_the_pods(variant_app: Synthesized) -> None:
    objects = _objects(variant_app, "Workload")
    (policy_id,) = {lid for lid, o in objects if o["metadata"]["name"] == POLICY_NAME}
    (rayservice_id,) = {lid for lid, o in objects if o["kind"] == "RayService"}
    resources = variant_app.templates["Workload"]["Resources"]
    assert policy_id in resources[rayservice_id]["DependsOn"]
    assert json.dumps(resources[policy_id]).count("NetworkPolicy") >= 2
