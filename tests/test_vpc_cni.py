"""The managed vpc-cni add-on (NetworkPolicy enforcement, its own identity) and node roles."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pd_constructs.cluster.vpc_cni import CNI_SUBNET_TAG
from ray_pd_eks.vpc_layout import vpc_layout
from tests.arns import own_arn
from tests.synth import Synthesized

CNI_POLICY = "AmazonEKS_CNI_Policy"


def _addon(app: Synthesized, name: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, r)
        for lid, r in app.resources("Cluster", "AWS::EKS::Addon").items()
        if r["Properties"]["AddonName"] == name
    ]
    return found


def _managed_policy_names(role: dict[str, Any]) -> list[str]:
    names = []
    for arn in role["Properties"].get("ManagedPolicyArns", []):
        names.append(json.dumps(arn).rsplit("/", 1)[-1].rstrip('"]}'))
    return names


def test_vpc_cni_addon_enforces_network_policies_pinned_and_removed_on_destroy(
    default_app: Synthesized,
) -> None:
    _, addon = _addon(default_app, "vpc-cni")
    props = addon["Properties"]
    assert props["AddonVersion"] == default_app.config.vpc_cni_addon_version == "v1.23.0-eksbuild.1"
    assert props["PreserveOnDelete"] is False
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert json.loads(props["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert addon.get("DeletionPolicy", "Delete") == "Delete"


def test_vpc_cni_gets_the_cni_policy_through_pod_identity_of_this_cluster_only(
    default_app: Synthesized,
) -> None:
    resources = default_app.templates["Cluster"]["Resources"]
    agent_id, _ = _addon(default_app, "eks-pod-identity-agent")
    _, addon = _addon(default_app, "vpc-cni")
    # Beside the agent, not after it: no node runs either before both exist (the node groups
    # are in later stacks), so waiting would only delay the node groups (docs/deploy-timeline.md).
    assert agent_id not in addon.get("DependsOn", [])
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = resources[association["RoleArn"]["Fn::GetAtt"][0]]
    # Not AmazonEKS_CNI_Policy (every interface of the region): tests below scope it.
    assert _managed_policy_names(role) == []
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    # The cluster's ARN built from its configured name: the role does not wait for the
    # control plane, so the add-on starts the moment the cluster is ACTIVE.
    name = default_app.config.cluster_name
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnEquals": {"aws:SourceArn": own_arn("eks", f"cluster/{name}")},
    }


def test_node_roles_pull_only_and_carry_no_cni_policy(default_app: Synthesized) -> None:
    found = 0
    for stack, template in default_app.templates.items():
        for ng in default_app.resources(stack, "AWS::EKS::Nodegroup").values():
            role = template["Resources"][ng["Properties"]["NodeRole"]["Fn::GetAtt"][0]]
            assert _managed_policy_names(role) == [
                "AmazonEKSWorkerNodePolicy",
                "AmazonEC2ContainerRegistryPullOnly",
            ]
            # Nodes join after the control plane exists: the system nodes' stack deploys after
            # the cluster stack (which holds the add-ons), the GPU node group waits for the
            # control-plane waiter of its own stack, which deploys beside the cluster stack
            # (its nodes join minutes after the add-ons are ACTIVE: docs/deploy-timeline.md).
            assert stack != "Cluster"
            if stack == "GpuNodes":
                (waiter,) = default_app.resources(stack, "Custom::ClusterActive")
                assert waiter in ng["DependsOn"]
                assert "Cluster" not in _stack_dependencies(default_app, stack)
            else:
                assert "Cluster" in _stack_dependencies(default_app, stack)
            found += 1
    assert found == 2


def _stack_dependencies(app: Synthesized, stack: str) -> set[str]:
    (match,) = [s for s in app.stage.stacks if s.node.id == stack]
    return {d.node.id for d in match.dependencies}


def _cni_statements(app: Synthesized) -> dict[str, dict[str, Any]]:
    """The CNI role's statements: its own policy's (Cluster stack). No other stack attaches a
    policy to it (the role's name is still exported for one release: KEPT_FOR_UPGRADE)."""
    _, addon = _addon(app, "vpc-cni")
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    exports = {
        o["Export"]["Name"]
        for o in app.templates["Cluster"].get("Outputs", {}).values()
        if o.get("Value") == {"Ref": role_id}
    }
    statements = []
    for stack in app.templates:
        for policy in app.resources(stack, "AWS::IAM::Policy").values():
            roles = [r.get("Ref", r.get("Fn::ImportValue")) for r in policy["Properties"]["Roles"]]
            if set(roles) & {role_id, *exports}:
                assert stack == "Cluster" and roles == [role_id], stack
                statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return {s["Sid"]: s for s in statements}


def _subnets_by_block(app: Synthesized) -> dict[str, set[str]]:
    """Export name (or the GPU stack's logical id) of each subnet, by its block of the layout."""
    layout = vpc_layout(app.config.vpc_cidr)
    network = app.templates["Network"]
    by_id = {
        logical_id: r["Properties"]["CidrBlock"]
        for logical_id, r in network["Resources"].items()
        if r["Type"] == "AWS::EC2::Subnet"
    }
    out: dict[str, set[str]] = {"private": set(), "public": set(), "control_plane": set()}
    for o in network.get("Outputs", {}).values():
        ref = o["Value"].get("Ref") if isinstance(o.get("Value"), dict) else None
        for block in out:
            if by_id.get(ref) in getattr(layout, block):
                out[block].add(o["Export"]["Name"])
    out["gpu"] = set(app.resources("GpuNodes", "AWS::EC2::Subnet"))
    return out


def _subnet_refs(resource: Any) -> set[str]:
    """The subnets a statement's Resource names (subnet/<id> joined from a reference)."""
    found: set[str] = set()
    for arn in resource if isinstance(resource, list) else [resource]:
        parts = arn["Fn::Join"][1] if isinstance(arn, dict) else [arn]
        text = "".join(p for p in parts if isinstance(p, str))
        if ":subnet/" in text:
            (ref,) = [p for p in parts if isinstance(p, dict)][-1:]
            found.add(str(ref.get("Fn::ImportValue", ref.get("Ref"))))
    return found


@pytest.mark.parametrize("app_name", ["default_app", "variant_app"])
def test_cni_creates_interfaces_only_in_the_node_subnets(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    """Not in every subnet of the VPC: the control plane's /28s (whose addresses the
    NetworkPolicies admit as the API server) and the public subnets are out of reach."""
    app: Synthesized = request.getfixturevalue(app_name)
    by_sid = _cni_statements(app)
    creating = {sid: s for sid, s in by_sid.items() if "ec2:CreateNetworkInterface" in _actions(s)}
    assert set(creating) == {
        "CreateInterfaceInNodeSubnets",
        "CreateInterfaceInTaggedNodeSubnets",
        "CreateInterfaceWithVpcGroups",
        "CreateInterface",
    }
    blocks = _subnets_by_block(app)
    assert _subnet_refs(creating["CreateInterfaceInNodeSubnets"]["Resource"]) == blocks["private"]
    # The GPU subnet (another stack) by its tag naming this cluster, in this VPC only.
    tagged = creating["CreateInterfaceInTaggedNodeSubnets"]
    assert json.dumps(tagged["Resource"]).endswith(':subnet/*"]]}')
    assert tagged["Condition"]["StringEquals"] == {
        f"aws:ResourceTag/{CNI_SUBNET_TAG}": app.config.cluster_name
    }
    assert ":vpc/" in json.dumps(tagged["Condition"]["ArnEquals"]["ec2:Vpc"])
    carriers = {
        (stack, logical_id)
        for stack in app.templates
        for logical_id, subnet in app.resources(stack, "AWS::EC2::Subnet").items()
        if {"Key": CNI_SUBNET_TAG, "Value": app.config.cluster_name}
        in subnet["Properties"].get("Tags", [])
    }
    assert carriers == {("GpuNodes", gpu) for gpu in blocks["gpu"]} and len(carriers) == 1
    for sid, statement in by_sid.items():
        if sid != "CreateInterfaceInTaggedNodeSubnets":
            assert ":subnet/*" not in json.dumps(statement["Resource"]), sid
        if sid not in ("CreateInterfaceInNodeSubnets", "CreateInterfaceInTaggedNodeSubnets"):
            assert not _subnet_refs(statement["Resource"]), sid
    assert len(blocks["private"]) == 2 and len(blocks["control_plane"]) == 2
    # The interface's own ARN and the security groups stay as they were.
    assert creating["CreateInterfaceWithVpcGroups"]["Resource"] == _ec2_arn("security-group/*")


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def test_cni_writes_only_network_interfaces_of_this_vpc_and_nodes_of_this_cluster(
    default_app: Synthesized,
) -> None:
    """Root on a node reaches aws-node's credentials: with them it may change interfaces of
    this VPC and attach them to this cluster's nodes, nothing in any other VPC."""
    by_sid = _cni_statements(default_app)
    vpc_condition = {"ArnEquals": {"ec2:Vpc": _ANY}}
    writes = {a for s in by_sid.values() for a in _actions(s) if not a.startswith("ec2:Describe")}
    assert writes == {
        "ec2:AssignPrivateIpAddresses",
        "ec2:AttachNetworkInterface",
        "ec2:CreateNetworkInterface",
        "ec2:CreateTags",
        "ec2:DeleteNetworkInterface",
        "ec2:DetachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:UnassignPrivateIpAddresses",
    }
    for sid in (
        "CreateInterfaceInNodeSubnets",
        "CreateInterfaceInTaggedNodeSubnets",
        "CreateInterfaceWithVpcGroups",
        "ManageInterfacesInVpc",
        "SecurityGroupsInVpc",
    ):
        tagged = sid == "CreateInterfaceInTaggedNodeSubnets"
        expected = {*vpc_condition, "StringEquals"} if tagged else vpc_condition.keys()
        assert by_sid[sid]["Condition"].keys() == expected, sid
        vpc = json.dumps(by_sid[sid]["Condition"]["ArnEquals"]["ec2:Vpc"])
        assert ":vpc/" in vpc, vpc
    assert by_sid["ManageInterfacesInVpc"]["Condition"]["ArnEquals"]
    # Deleting, re-addressing or re-attaching an interface needs it to be in the VPC.
    assert {
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    } <= _actions(by_sid["ManageInterfacesInVpc"])
    assert by_sid["AttachToClusterNodes"]["Condition"] == {
        "StringEquals": {"aws:ResourceTag/cluster.k8s.amazonaws.com/name": "ray-llm-multinode"}
    }
    assert by_sid["TagNewInterface"]["Condition"] == {
        "StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}
    }
    # The only unconditioned write creates an interface, which also needs a node subnet.
    unconditioned = [s for s in by_sid.values() if "Condition" not in s]
    assert {s["Sid"] for s in unconditioned} == {"Describe", "CreateInterface"}
    assert by_sid["Describe"]["Resource"] == "*"
    assert all(a.startswith("ec2:Describe") for a in _actions(by_sid["Describe"]))
    for statement in by_sid.values():
        if statement["Sid"] != "Describe":
            resources = json.dumps(statement["Resource"])
            assert "AWS::Region" in resources and "AWS::AccountId" in resources


def test_every_node_carries_the_tag_the_cni_may_attach_to(default_app: Synthesized) -> None:
    found = 0
    for stack in default_app.templates:
        for lt in default_app.resources(stack, "AWS::EC2::LaunchTemplate").values():
            specs = lt["Properties"]["LaunchTemplateData"]["TagSpecifications"]
            (instance,) = [s for s in specs if s["ResourceType"] == "instance"]
            (tag,) = instance["Tags"]
            assert tag["Key"] == "cluster.k8s.amazonaws.com/name"
            found += 1
    assert found == 2


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


_ANY = _Any()


def _ec2_arn(resource: str) -> dict[str, Any]:
    return own_arn("ec2", resource)
