"""Rollback safety at the template level: every attribute anything reads from a custom
resource is one its handler can answer during a rollback without calling EKS or EC2, and the
functions that tell a rollback from a deploy may describe their own stack and nothing else."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.arns import own_arn
from tests.lambda_handlers import load
from tests.synth import Synthesized


def _load(folder: str, module: str = "handler") -> ModuleType:
    return load(folder, f"rollback_{folder}_{module}", module)


# Custom resource type -> the keys its handler's rollback answer carries.
ROLLBACK_KEYS = {
    "Custom::RayServiceReadiness": set(_load("readiness", "report").DATA_KEYS),
    "Custom::GpuCapacityWatch": set(_load("capacity").DATA_KEYS),
    "Custom::GpuAvailabilityZone": set(_load("gpu_az").ROLLBACK_DATA_KEYS),
    "Custom::RayServiceRecreate": set(_load("readiness", "recreate").DATA_KEYS),
    "Custom::ClusterActive": set(_load("cluster_active").DATA_KEYS),
}


def _get_atts(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if set(node) == {"Fn::GetAtt"}:
            logical_id, attribute = node["Fn::GetAtt"]
            yield logical_id, attribute
        for value in node.values():
            yield from _get_atts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _get_atts(value)


def _reads(app: Synthesized) -> dict[str, set[str]]:
    """Custom resource type -> every attribute a template reads from a resource of it."""
    found: dict[str, set[str]] = {}
    for template in app.templates.values():
        resources = template["Resources"]
        for logical_id, attribute in _get_atts(template):
            rtype = resources.get(logical_id, {}).get("Type", "")
            if rtype.startswith("Custom::"):
                found.setdefault(rtype, set()).add(attribute)
    return found


@pytest.mark.parametrize("which", ["default", "variant"])
def test_every_attribute_read_is_answered_during_a_rollback(
    which: str, default_app: Synthesized, variant_app: Synthesized
) -> None:
    reads = _reads(default_app if which == "default" else variant_app)
    assert reads["Custom::RayServiceReadiness"] >= {"AppStatus", "KvBackend", "GpuNodes"}
    assert reads["Custom::GpuAvailabilityZone"] == {"AvailabilityZone", "SubnetCidr"}
    assert reads["Custom::RayServiceRecreate"] == {"Summary"}
    assert reads["Custom::ClusterActive"] == {"ClusterSecurityGroupId"}
    for rtype, attributes in reads.items():
        if rtype in ROLLBACK_KEYS:
            assert attributes <= ROLLBACK_KEYS[rtype], rtype


def _policies_allowing(template: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        and any(
            action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
            for s in r["Properties"]["PolicyDocument"]["Statement"]
        )
    ]


def test_describe_stacks_is_granted_on_the_own_stack_only(default_app: Synthesized) -> None:
    # The functions of the GPU AZ chooser, the capacity watch (both serving the GpuNodes
    # stack), the RayService recreate (Workload) and the readiness check (Readiness) are
    # created early, in the cluster stack: each may describe the one stack of its resource, by
    # name. The image digests' function (Workload) is in its resource's stack: its own.
    stage = default_app.stage

    def named(stack_name: str) -> dict[str, Any]:
        return own_arn("cloudformation", f"stack/{stack_name}/*")

    own = {"Ref": "AWS::StackId"}
    expected_resources = {
        "Network": [],
        # The GpuNodes pair: the kept Providers of the previous release's AZ choice and
        # capacity watch (ray_pd_eks/cross_stack.py KEPT_FOR_UPGRADE).
        # And the delete guard's on-event function, which tells the stack's delete from an
        # update's cleanup: its own stack.
        "Cluster": sorted(
            [
                *(
                    json.dumps(named(s.stack_name))
                    for s in (stage.gpu_nodes, stage.gpu_nodes, stage.workload, stage.readiness)
                ),
                json.dumps(own),
            ]
        ),
        # Its three on-event functions (AZ choice, capacity watch, control-plane wait), and
        # the polls of the wait and of the capacity watch on the Cluster stack's status (reads
        # of that stack, not rollback tests).
        "GpuNodes": sorted(
            [json.dumps(own)] * 3 + [json.dumps(named(stage.cluster.stack_name))] * 2
        ),
        "Workload": [json.dumps(own)],
        "GpuAddons": [],
        "Readiness": [],
    }
    for stack, expected in expected_resources.items():
        policies = _policies_allowing(default_app.templates[stack], "cloudformation:DescribeStacks")
        resources = []
        for policy in policies:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Action"] == "cloudformation:DescribeStacks":
                    resources.append(json.dumps(statement["Resource"]))
                    assert statement["Effect"] == "Allow"
        assert sorted(resources) == expected, stack


def test_the_readiness_rollback_check_runs_outside_the_vpc(default_app: Synthesized) -> None:
    """DescribeStacks needs a route to CloudFormation; the VPC function's security group only
    reaches the API server and STS. on_event makes no Kubernetes call, so it leaves the VPC."""
    functions = default_app.resources("Cluster", "AWS::Lambda::Function")
    by_handler = {
        f["Properties"]["Handler"]: f
        for f in functions.values()
        if f["Properties"].get("Description", "").startswith("Readiness check")
    }
    assert "VpcConfig" not in by_handler["handler.on_event"]["Properties"]
    assert "VpcConfig" in by_handler["handler.is_complete"]["Properties"]
    policies = _policies_allowing(default_app.templates["Cluster"], "cloudformation:DescribeStacks")
    on_event_role = by_handler["handler.on_event"]["Properties"]["Role"]["Fn::GetAtt"][0]
    assert [{"Ref": on_event_role}] in [p["Properties"]["Roles"] for p in policies]
    is_complete_role = by_handler["handler.is_complete"]["Properties"]["Role"]["Fn::GetAtt"][0]
    assert [{"Ref": is_complete_role}] not in [p["Properties"]["Roles"] for p in policies]
