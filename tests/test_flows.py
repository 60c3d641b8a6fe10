"""The connections table (pd_constructs/inventory/flows.py) checked two ways against what is
synthesized: every flow is admitted by the NetworkPolicies (the evaluator of tests/netpol.py)
and by the security groups of the templates; every policy rule and every security-group rule
serves a listed flow. Failures name the flow or the rule that is missing or extra."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from pd_constructs.inventory import flows
from pd_constructs.inventory.flows import (
    FLOWS,
    NAT_ADDRESS,
    NODE_LOCAL,
    NOT_IP,
    NOT_POLICED,
    SgRule,
    flows_for,
    security_group_named,
    template_rules,
)
from pd_constructs.network.network_policy import control_plane_cidrs, load_balancer_cidrs
from ray_pd_eks.bench.job import BENCH_POD_LABELS
from tests.netpol import Cluster, External, Pod
from tests.synth import ROOT, Synthesized
from tests.test_network_policies import World

APPS = ("default_app", "variant_app", "token_app", "public_cognito_app")
# aws-cdk-lib's placeholder on a group with no egress rule: matches no packet.
_CDK_NO_EGRESS = "Disallow all traffic"


def test_docs_flows_md_is_rendered_from_the_table() -> None:
    doc = (ROOT / "docs" / "flows.md").read_text(encoding="utf-8")
    assert doc == flows.markdown(), (
        "docs/flows.md differs from pd_constructs/inventory/flows.py: run "
        "`.venv/bin/python -m pd_constructs.inventory.flows > docs/flows.md`"
    )


def test_table_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="not in ENDPOINTS"):
        flows.Flow("x", "nobody", "ray-pods", 1, 1, "", NOT_POLICED, ())
    with pytest.raises(ValueError, match="not in SECURITY_GROUPS"):
        SgRule("nobody", "in", "cluster")
    with pytest.raises(ValueError, match="not in CONDITIONS"):
        flows.Flow("x", "ray-pods", "ray-pods", 1, 1, "", NOT_POLICED, (), when="sometimes")


# -- security groups --------------------------------------------------------------------------


class _Templates:
    """Security groups of all stacks of one app, by logical id, with their table names."""

    def __init__(self, app: Synthesized) -> None:
        self.app = app
        self.exports: dict[str, tuple[str, Any]] = {}
        for stack, template in app.templates.items():
            for output in template.get("Outputs", {}).values():
                if "Export" in output:
                    self.exports[output["Export"]["Name"]] = (stack, output["Value"])
        self.names: dict[tuple[str, str], str] = {}
        self.unlisted: list[str] = []
        for stack, template in app.templates.items():
            for logical_id, r in template["Resources"].items():
                if r["Type"] == "AWS::EC2::SecurityGroup":
                    description = r["Properties"]["GroupDescription"]
                    name = security_group_named(description)
                    if name is None:
                        self.unlisted.append(f"{stack}/{logical_id}: {description!r}")
                    else:
                        self.names[(stack, logical_id)] = name

    def group(self, stack: str, ref: Any) -> str:
        if "Fn::ImportValue" in ref:
            stack, ref = self.exports[ref["Fn::ImportValue"]]
        logical_id, attribute = ref["Fn::GetAtt"]
        if attribute == "ClusterSecurityGroupId":
            return "cluster"
        assert attribute == "GroupId", ref
        return self.names[(stack, logical_id)]

    def rules(self) -> Iterator[tuple[str, SgRule]]:
        """(where, rule) for every rule, inline or standalone."""
        for stack, template in self.app.templates.items():
            for logical_id, r in template["Resources"].items():
                p = r.get("Properties", {})
                if r["Type"] == "AWS::EC2::SecurityGroup":
                    group = self.names[(stack, logical_id)]
                    for direction, key in (
                        ("in", "SecurityGroupIngress"),
                        ("out", "SecurityGroupEgress"),
                    ):
                        for rule in p.get(key, []):
                            if rule.get("Description") == _CDK_NO_EGRESS:
                                continue
                            yield f"{stack}/{logical_id}", self._rule(stack, group, direction, rule)
                elif r["Type"] == "AWS::EC2::SecurityGroupIngress":
                    group = self.group(stack, p["GroupId"])
                    yield f"{stack}/{logical_id}", self._rule(stack, group, "in", p)
                elif r["Type"] == "AWS::EC2::SecurityGroupEgress":
                    group = self.group(stack, p["GroupId"])
                    yield f"{stack}/{logical_id}", self._rule(stack, group, "out", p)

    def cidr(self, stack: str, cidr: Any) -> str:
        """A rule's ``CidrIp``: a block as written, or the NAT gateway's Elastic IP as a /32
        (``Fn::Join`` of its address, imported from the cluster stack, and "/32")."""
        if isinstance(cidr, str):
            return cidr
        sep, (address, suffix) = cidr["Fn::Join"]
        if "Fn::ImportValue" in address:
            stack, address = self.exports[address["Fn::ImportValue"]]
        eip = self.app.templates[stack]["Resources"][address["Ref"]]
        assert (sep, suffix, eip["Type"]) == ("", "/32", "AWS::EC2::EIP"), cidr
        return NAT_ADDRESS

    def _rule(self, stack: str, group: str, direction: str, rule: dict[str, Any]) -> SgRule:
        peer_ref = rule.get("SourceSecurityGroupId") or rule.get("DestinationSecurityGroupId")
        peer = (
            self.group(stack, peer_ref) if peer_ref else f"cidr:{self.cidr(stack, rule['CidrIp'])}"
        )
        if rule["IpProtocol"] == "-1":
            return SgRule(group, direction, peer, protocol="-1")
        return SgRule(group, direction, peer, rule["FromPort"], rule["ToPort"], rule["IpProtocol"])


@pytest.mark.parametrize("name", APPS)
def test_every_security_group_is_listed(name: str, request: pytest.FixtureRequest) -> None:
    templates = _Templates(request.getfixturevalue(name))
    assert not templates.unlisted, (
        "security groups not in pd_constructs/inventory/flows.py SECURITY_GROUPS: "
        f"{templates.unlisted}"
    )


@pytest.mark.parametrize("name", APPS)
def test_security_group_rules_are_exactly_the_flows(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Both ways: each rule of the templates serves a flow of this configuration, and each
    flow's rule (other than those EKS creates) is in the templates."""
    app: Synthesized = request.getfixturevalue(name)
    found: dict[SgRule, str] = {}
    for where, rule in _Templates(app).rules():
        found.setdefault(rule, where)
    needed = template_rules(app.config)
    extra = {r.text: where for r, where in found.items() if r not in needed}
    missing = [
        f"{f.id}: {r.text}"
        for f in flows_for(app.config)
        for r in f.security_groups
        if not r.managed_by and r in needed and r not in found
    ]
    assert not extra, f"rules that serve no flow of pd_constructs/inventory/flows.py: {extra}"
    assert not missing, f"flows whose security-group rule is not synthesized: {missing}"


def test_the_api_server_is_reached_through_its_own_group_only(default_app: Synthesized) -> None:
    """No flow opens the cluster security group (every node and pod) to a function."""
    for where, rule in _Templates(default_app).rules():
        if rule.group == "cluster" and rule.direction == "in":
            assert rule.peer == "alb", (where, rule.text)


# -- NetworkPolicies --------------------------------------------------------------------------


def _sources(world: World, key: str, config: Any, destination: Pod) -> list[Pod | External]:
    """Representative members of an endpoint as a connection source to ``destination``."""
    ns = config.namespace
    if key == "ray-pods":
        return list(world.ray_pods)
    if key == "ray-head":
        return [world.head]
    if key == "gpu-workers":
        return list(world.workers)
    if key == "kuberay-operator":
        return [world.operator]
    if key == "bench":
        return [Pod("bench-0", ns, dict(BENCH_POD_LABELS), ip="10.0.2.40", node="sys-1")]
    if key == "api-server":
        return [
            External(ip=str(next(ipaddress.IPv4Network(c).hosts())))
            for c in control_plane_cidrs(config.vpc_cidr)
        ]
    if key == "alb":
        return [
            External(ip=str(next(ipaddress.IPv4Network(c).hosts())))
            for c in load_balancer_cidrs(config)
        ]
    if key in ("cloudwatch-agent", "kubelet"):  # host network on the destination's node
        return [External(ip=f"node-ip-of-{destination.node}", node=destination.node)]
    raise AssertionError(f"no test source for endpoint {key!r}")


def _destinations(world: World, key: str) -> list[Pod]:
    return {"ray-pods": world.ray_pods, "ray-head": [world.head], "gpu-workers": world.workers}[key]


def _ports(flow: flows.Flow) -> list[int]:
    if flow.first is None:
        return [22, 8080, 65535]
    return sorted({flow.first, flow.last or flow.first})


@pytest.mark.parametrize("name", APPS)
def test_every_flow_into_a_pod_is_admitted_by_its_policy(
    name: str, request: pytest.FixtureRequest
) -> None:
    """With only default-deny and the flow's own policy in force, each source reaches each
    destination on the flow's first and last port: the named policy is what admits it."""
    app: Synthesized = request.getfixturevalue(name)
    world = World(app)
    by_name = {p["metadata"]["name"]: p for p in world.cluster.policies}
    problems = []
    for flow in flows_for(app.config):
        if flow.network_policy in (NOT_POLICED, NOT_IP):
            continue
        if flow.network_policy == NODE_LOCAL:
            cluster = world.cluster
        elif flow.network_policy not in by_name:
            problems.append(f"{flow.id}: policy {flow.network_policy} is not rendered")
            continue
        else:
            cluster = Cluster(
                namespaces={k: {} for k in world.cluster.namespaces},
                policies=[
                    p
                    for p in world.cluster.policies
                    if p["metadata"]["name"] in (flow.network_policy, "default-deny-ingress")
                ],
            )
        for dst in _destinations(world, flow.destination):
            for src in _sources(world, flow.source, app.config, dst):
                if src == dst:
                    continue
                for port in _ports(flow):
                    if not cluster.allowed(src, dst, port):
                        problems.append(f"{flow.id}: {src} -> {dst.name}:{port}")
    assert not problems, f"flows their policy does not admit: {problems}"


def _rule_ports(rule: dict[str, Any]) -> list[tuple[int | None, int | None]]:
    entries = rule.get("ports") or []
    if not entries:
        return [(None, None)]
    return [(int(e["port"]), int(e.get("endPort", e["port"]))) for e in entries]


@pytest.mark.parametrize("name", APPS)
def test_every_policy_rule_serves_a_listed_flow(name: str, request: pytest.FixtureRequest) -> None:
    """Every port of every ingress rule of every rendered policy is one flow's ports, and no
    flow names a policy this configuration does not render."""
    app: Synthesized = request.getfixturevalue(name)
    world = World(app)
    served = {
        (f.network_policy, f.first, f.last if f.first is not None else None)
        for f in flows_for(app.config)
    }
    extra = []
    for policy in world.cluster.policies:
        for rule in policy["spec"].get("ingress") or []:
            for first, last in _rule_ports(rule):
                if (policy["metadata"]["name"], first, last) not in served:
                    extra.append(f"{policy['metadata']['name']} {first}-{last}")
    assert not extra, (
        f"policy rules that serve no flow of pd_constructs/inventory/flows.py: {extra}"
    )


def test_every_flow_is_checked_by_some_configuration(request: pytest.FixtureRequest) -> None:
    """Each row applies to at least one of the synthesized configurations above, so no row
    escapes the two-way checks."""
    configs = [request.getfixturevalue(name).config for name in APPS]
    unchecked = [f.id for f in FLOWS if not any(f.applies(c) for c in configs)]
    assert not unchecked


def test_the_internet_facing_probe_reaches_the_alb_from_the_nat_gateway_only(
    public_cognito_app: Synthesized,
) -> None:
    """The one rule an internet-facing ALB adds beside its clients' (probe-nat-alb): 443 from
    the NAT gateway's Elastic IP, read from the template (not a table row echoed back)."""
    templates = _Templates(public_cognito_app)
    found = [
        rule for _, rule in templates.rules() if rule.group == "alb" and rule.direction == "in"
    ]
    assert sorted(r.text for r in found) == sorted(
        [
            SgRule("alb", "in", f"cidr:{NAT_ADDRESS}", 443, 443).text,
            *(
                SgRule("alb", "in", f"cidr:{c}", 443, 443).text
                for c in public_cognito_app.config.endpoint_allowed_cidrs
            ),
        ]
    )
