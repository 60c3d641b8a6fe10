"""The GPU Auto Scaling group's node-template tags: what lets the Cluster Autoscaler add a GPU
node when none is Ready (pd_constructs/cluster/cluster_autoscaler.py, assets/lambda/asg_tags/)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import aws_eks_v2 as eks
from botocore.exceptions import ClientError

from pd_constructs.cluster.cluster import GPU_TAINT, gpu_labels
from pd_constructs.cluster.cluster_autoscaler import NODE_TEMPLATE, TAG_KEY_MAX, node_template_tags
from ray_pd_eks import instance_types, lambda_code
from tests.synth import Synthesized

handler = lambda_code._load(
    "handler", "ray_pd_eks_asg_tags_handler", lambda_code.LAMBDA_DIR / "asg_tags"
)
G6 = instance_types.gpu_spec("g6.8xlarge")
assert G6 is not None
EXPECTED = {
    f"{NODE_TEMPLATE}resources/nvidia.com/gpu": "1",
    f"{NODE_TEMPLATE}resources/vpc.amazonaws.com/efa": "1",
    f"{NODE_TEMPLATE}label/role": "gpu-worker",
    f"{NODE_TEMPLATE}label/nvidia.com/gpu.present": "true",
    f"{NODE_TEMPLATE}label/k8s.amazonaws.com/accelerator": "nvidia-l4",
    f"{NODE_TEMPLATE}taint/nvidia.com/gpu": "true:NoSchedule",
}


def test_tags_name_the_gpus_the_efa_devices_the_labels_and_the_taint() -> None:
    assert G6 is not None
    tags = node_template_tags(G6, labels=gpu_labels(G6, scales=True), taints=[GPU_TAINT])
    assert tags == EXPECTED
    p5 = instance_types.gpu_spec("p5.48xlarge")
    assert p5 is not None
    many = node_template_tags(p5, labels={}, taints=[])
    assert many[f"{NODE_TEMPLATE}resources/nvidia.com/gpu"] == "8"
    assert many[f"{NODE_TEMPLATE}resources/vpc.amazonaws.com/efa"] == str(p5.efa_interfaces)


@pytest.mark.parametrize("extra", [0, 1])
def test_a_tag_key_at_the_limit_is_kept_one_past_it_refused(extra: int) -> None:
    assert G6 is not None
    prefix = f"{NODE_TEMPLATE}label/"
    name = "x" * (TAG_KEY_MAX - len(prefix) + extra)
    if extra:
        with pytest.raises(ValueError, match=r"at most 128 characters"):
            node_template_tags(G6, labels={name: "v"}, taints=[])
    else:
        assert f"{prefix}{name}" in node_template_tags(G6, labels={name: "v"}, taints=[])


def test_the_taint_value_may_be_empty() -> None:
    assert G6 is not None
    taint = eks.TaintSpec(key="dedicated", effect=eks.TaintEffect.NO_EXECUTE)
    tags = node_template_tags(G6, labels={}, taints=[taint])
    assert tags[f"{NODE_TEMPLATE}taint/dedicated"] == ":NoExecute"


# -- the template -------------------------------------------------------------------------------


def test_only_a_scaling_gpu_group_is_tagged(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    assert default_app.resources("GpuNodes", "Custom::GpuNodeTemplateTags") == {}
    template = variant_app.templates["GpuNodes"]
    ((logical_id, resource),) = variant_app.resources(
        "GpuNodes", "Custom::GpuNodeTemplateTags"
    ).items()
    (nodegroup_id,) = variant_app.resources("GpuNodes", "AWS::EKS::Nodegroup")
    props = resource["Properties"]
    assert json.loads(props["Tags"]) == EXPECTED
    assert props["ClusterName"] == variant_app.config.cluster_name
    nodegroup = template["Resources"][nodegroup_id]["Properties"]
    assert props["NodegroupName"] == nodegroup["NodegroupName"]
    # Tags the group EKS creates with the node group: after it, and removed before it.
    assert nodegroup_id in resource["DependsOn"]
    labels = nodegroup["Labels"]
    assert {k for k in EXPECTED if "/label/" in k} == {f"{NODE_TEMPLATE}label/{k}" for k in labels}
    assert logical_id


def test_the_tagger_may_tag_only_this_node_groups_auto_scaling_group(
    variant_app: Synthesized,
) -> None:
    template = variant_app.templates["GpuNodes"]
    fns = [
        f
        for f in variant_app.resources("GpuNodes", "AWS::Lambda::Function").values()
        if "Cluster Autoscaler" in f["Properties"].get("Description", "")
    ]
    (fn,) = fns
    role_id = fn["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy,) = [
        p
        for p in variant_app.resources("GpuNodes", "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    by_action = {json.dumps(s["Action"]): s for s in statements}
    tagging = by_action['["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"]']
    (nodegroup_id,) = variant_app.resources("GpuNodes", "AWS::EKS::Nodegroup")
    name = template["Resources"][nodegroup_id]["Properties"]["NodegroupName"]
    assert tagging["Condition"] == {
        "StringEquals": {
            "aws:ResourceTag/eks:cluster-name": variant_app.config.cluster_name,
            "aws:ResourceTag/eks:nodegroup-name": name,
        },
        "ForAllValues:StringLike": {"aws:TagKeys": [f"{NODE_TEMPLATE}*"]},
    }
    assert set(by_action) == {
        '["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"]',
        '"eks:DescribeNodegroup"',
        '"cloudformation:DescribeStacks"',
    }


# -- the handler --------------------------------------------------------------------------------


class FakeEks:
    """DescribeNodegroup for one node group: ``groups`` None = not found, or a ClientError
    code, or a whole response; every call must name cluster ``c`` and the event's group."""

    def __init__(self, groups: list[str] | str | None, response: Any = None) -> None:
        self.groups = groups
        self.response = response

    def describe_nodegroup(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs == {"clusterName": "c", "nodegroupName": "gpu-workers-a-1"}, kwargs
        if self.groups is None or isinstance(self.groups, str):
            code = self.groups or "ResourceNotFoundException"
            raise ClientError({"Error": {"Code": code, "Message": "gone"}}, "DescribeNodegroup")
        if self.response is not None:
            return dict(self.response)
        names = [{"name": g} for g in self.groups]
        return {"nodegroup": {"resources": {"autoScalingGroups": names}}}


class FakeAutoscaling:
    def __init__(self, error: Exception | None = None) -> None:
        self.set: list[tuple[str, str, str, bool]] = []
        self.deleted: list[tuple[str, str]] = []
        self.error = error

    def create_or_update_tags(self, Tags: list[dict[str, Any]]) -> None:
        if self.error:
            raise self.error
        assert {t["ResourceType"] for t in Tags} == {"auto-scaling-group"}, Tags
        self.set += [(t["ResourceId"], t["Key"], t["Value"], t["PropagateAtLaunch"]) for t in Tags]

    def delete_tags(self, Tags: list[dict[str, Any]]) -> None:
        # DeleteTags takes the same Tag shape; an empty Value (a string, as botocore requires
        # when the key is present) deletes the key whatever its value.
        assert {(t["ResourceType"], t["Value"]) for t in Tags} == {("auto-scaling-group", "")}
        self.deleted += [(t["ResourceId"], t["Key"]) for t in Tags]


class Stacks:
    def __init__(self, status: str) -> None:
        self.status = status

    def describe_stacks(self, **_: Any) -> dict[str, Any]:
        return {"Stacks": [{"StackStatus": self.status}]}


GPU = f"{NODE_TEMPLATE}resources/nvidia.com/gpu"
EFA = f"{NODE_TEMPLATE}resources/vpc.amazonaws.com/efa"


def _props(tags: dict[str, str], nodegroup: str = "gpu-workers-a-1") -> dict[str, Any]:
    return {"ClusterName": "c", "NodegroupName": nodegroup, "Tags": json.dumps(tags)}


def _event(request: str, tags: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request,
        "StackId": "arn:aws:cloudformation:us-west-2:1:stack/RayPdEks-GpuNodes/1",
        "ResourceProperties": _props(tags),
        **extra,
    }


def test_create_tags_the_group_without_propagating_to_instances() -> None:
    asg = FakeAutoscaling()
    out = handler.on_event(_event("Create", {GPU: "1"}), None, FakeEks(["eks-ng-1"]), asg)
    assert asg.set == [("eks-ng-1", GPU, "1", False)]
    assert out == {
        "PhysicalResourceId": "c/gpu-workers-a-1",
        "Data": {"AutoScalingGroups": "eks-ng-1", "Tags": "1"},
    }


def test_update_removes_the_keys_no_longer_wanted_on_the_same_group() -> None:
    asg = FakeAutoscaling()
    old = _props({GPU: "1", EFA: "1"})
    event = _event("Update", {GPU: "2"}, OldResourceProperties=old)
    handler.on_event(event, None, FakeEks(["g"]), asg, Stacks("UPDATE_IN_PROGRESS"))
    assert asg.set == [("g", GPU, "2", False)] and asg.deleted == [("g", EFA)]


def test_update_to_another_node_group_leaves_the_old_groups_tags_to_its_delete() -> None:
    asg = FakeAutoscaling()
    old = _props({GPU: "1", EFA: "1"}, nodegroup="gpu-workers-b-1")
    event = _event("Update", {GPU: "1"}, OldResourceProperties=old)
    out = handler.on_event(event, None, FakeEks(["g"]), asg, Stacks("UPDATE_IN_PROGRESS"))
    assert asg.deleted == [] and out["PhysicalResourceId"] == "c/gpu-workers-a-1"


def test_a_failed_tagging_fails_the_deploy_with_the_reason() -> None:
    denied = ClientError(
        {"Error": {"Code": "AccessDenied", "Message": "not\nallowed"}},
        "CreateOrUpdateTags",
    )
    with pytest.raises(handler.TagError, match=r"^tagging c/gpu-workers-a-1 failed: .*not allowed"):
        handler.on_event(
            _event("Create", {GPU: "1"}), None, FakeEks(["g"]), FakeAutoscaling(denied)
        )
    with pytest.raises(handler.TagError, match="has no Auto Scaling group"):
        handler.on_event(_event("Create", {GPU: "1"}), None, FakeEks([]), FakeAutoscaling())


def test_a_rollback_puts_the_previous_tags_back_and_never_fails() -> None:
    asg = FakeAutoscaling()
    event = _event("Update", {GPU: "1"}, PhysicalResourceId="c/gpu-workers-a-1")
    handler.on_event(event, None, FakeEks(["g"]), asg, Stacks("UPDATE_ROLLBACK_IN_PROGRESS"))
    assert asg.set == [("g", GPU, "1", False)]
    broken = FakeAutoscaling(ClientError({"Error": {"Code": "Throttling"}}, "Op"))
    out = handler.on_event(
        event, None, FakeEks(["g"]), broken, Stacks("UPDATE_ROLLBACK_IN_PROGRESS")
    )
    assert out == {"PhysicalResourceId": "c/gpu-workers-a-1"}


def test_delete_removes_the_tags_and_succeeds_when_the_group_is_gone() -> None:
    asg = FakeAutoscaling()
    event = _event("Delete", {GPU: "1", EFA: "1"}, PhysicalResourceId="c/gpu-workers-a-1")
    assert handler.on_event(event, None, FakeEks(["g"]), asg) == {
        "PhysicalResourceId": "c/gpu-workers-a-1"
    }
    assert asg.deleted == [("g", GPU), ("g", EFA)]
    gone = FakeAutoscaling()
    handler.on_event(event, None, FakeEks(None), gone)
    assert gone.deleted == []


def test_only_node_template_tags_are_accepted() -> None:
    with pytest.raises(handler.TagError, match="not a Cluster Autoscaler node-template tag"):
        handler.on_event(
            _event("Create", {"eks:nodegroup-name": "x"}), None, FakeEks(["g"]), FakeAutoscaling()
        )


def test_a_missing_node_group_or_empty_resources_fail_create_naming_the_group() -> None:
    for eks_api in (
        FakeEks(None),
        FakeEks([], response={}),
        FakeEks([], response={"nodegroup": {}}),
        FakeEks([], response={"nodegroup": {"resources": {"autoScalingGroups": [{}]}}}),
    ):
        with pytest.raises(handler.TagError, match="gpu-workers-a-1 of cluster c has no Auto"):
            handler.on_event(_event("Create", {GPU: "1"}), None, eks_api, FakeAutoscaling())


def test_another_describe_error_is_the_reason_not_a_missing_group() -> None:
    with pytest.raises(handler.TagError, match="AccessDeniedException") as err:
        handler.on_event(
            _event("Create", {GPU: "1"}), None, FakeEks("AccessDeniedException"), FakeAutoscaling()
        )
    assert "has no Auto Scaling group" not in str(err.value)


def test_every_group_of_the_node_group_is_tagged_and_reported() -> None:
    asg = FakeAutoscaling()
    out = handler.on_event(_event("Create", {GPU: "1"}), None, FakeEks(["a", "b"]), asg)
    assert asg.set == [("a", GPU, "1", False), ("b", GPU, "1", False)]
    assert out["Data"] == {"AutoScalingGroups": "a,b", "Tags": "1"}


def test_no_tags_property_means_no_tags() -> None:
    event = _event("Create", {})
    del event["ResourceProperties"]["Tags"]
    asg = FakeAutoscaling()
    out = handler.on_event(event, None, FakeEks(["g"]), asg)
    assert out["Data"] == {"AutoScalingGroups": "g", "Tags": "0"} and asg.set == []


@pytest.mark.parametrize("tags", ["{not json", "[1]"])
def test_tags_that_are_not_a_json_object_are_refused(tags: str) -> None:
    event = _event("Create", {})
    event["ResourceProperties"]["Tags"] = tags
    with pytest.raises(handler.TagError, match=r"failed: Tags is not a JSON object: "):
        handler.on_event(event, None, FakeEks(["g"]), FakeAutoscaling())


def test_delete_and_rollback_keep_the_physical_id_cloudformation_has() -> None:
    event = _event("Delete", {GPU: "1"}, PhysicalResourceId="old-cluster/old-group")
    assert handler.on_event(event, None, FakeEks(None), FakeAutoscaling()) == {
        "PhysicalResourceId": "old-cluster/old-group"
    }
    event = _event("Update", {GPU: "1"}, PhysicalResourceId="old-cluster/old-group")
    broken = FakeAutoscaling(ClientError({"Error": {"Code": "Throttling"}}, "Op"))
    out = handler.on_event(
        event, None, FakeEks(["g"]), broken, Stacks("UPDATE_ROLLBACK_IN_PROGRESS")
    )
    assert out == {"PhysicalResourceId": "old-cluster/old-group"}


def test_a_failed_create_fails_even_while_some_stack_rolls_back() -> None:
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "Op")
    with pytest.raises(handler.TagError, match="failed: "):
        handler.on_event(
            _event("Create", {GPU: "1"}),
            None,
            FakeEks(["g"]),
            FakeAutoscaling(denied),
            Stacks("UPDATE_ROLLBACK_IN_PROGRESS"),
        )


def test_without_injected_clients_it_makes_the_eks_and_autoscaling_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    clients = {"eks": FakeEks(["g"]), "autoscaling": FakeAutoscaling()}

    def client(name: str) -> Any:
        made.append(name)
        return clients[name]

    monkeypatch.setattr(handler, "_client", client)
    handler.on_event(_event("Create", {GPU: "1"}))
    assert made == ["eks", "autoscaling"]
