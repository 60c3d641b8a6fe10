"""Stack topology: what waits for what, and why moving the GPU AZ works in one deploy.

CloudFormation refuses to change an export another stack imports, and cannot replace a
resource with a fixed custom name. So everything that changes when the GPU AZ moves (the
chooser's result, the GPU subnet, the node group and its name) lives in the GPU node stack,
nothing there is exported, and the node group's name follows the AZ.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import aws_eks_v2 as eks

from pd_constructs.cluster.cluster import GPU_AMI_TYPE, gpu_nodegroup_name
from ray_pd_eks.config import GPU_NODEGROUP_PREFIX_MAX, AppConfig, ConfigError
from ray_pd_eks.timeline import refs
from tests.synth import Synthesized


def _changes_with(template: dict[str, Any], root: str) -> set[str]:
    """Every resource whose properties change, transitively, when ``root``'s attributes do."""
    resources = template["Resources"]
    changed = {root}
    grew = True
    while grew:
        grew = False
        for logical_id, resource in resources.items():
            if logical_id not in changed and refs(resource.get("Properties", {})) & changed:
                changed.add(logical_id)
                grew = True
    return changed


def _exports(app: Synthesized) -> dict[str, Any]:
    return {
        output["Export"]["Name"]: output["Value"]
        for template in app.templates.values()
        for output in template.get("Outputs", {}).values()
        if "Export" in output
    }


def test_stacks_wait_only_for_what_they_need(default_app: Synthesized) -> None:
    stage = default_app.stage
    assert stage.network.dependencies == []
    assert stage.cluster.dependencies == [stage.network]
    # The GPU nodes deploy beside the cluster stack: they wait for the control plane through
    # their own waiter, not for the cluster stack's add-ons and kubectl provider.
    assert stage.gpu_nodes.dependencies == [stage.network]
    # The KubeRay operator and the RayService need the cluster and the system node only.
    assert set(stage.workload.dependencies) == {stage.network, stage.cluster}
    # The device plugins and the autoscaler: after the GPU nodes (the old releases' uninstall
    # on the upgrade, the nodes' deletion on destroy) and the cluster (the kubectl provider).
    assert set(stage.gpu_addons.dependencies) == {stage.gpu_nodes, stage.cluster}
    assert {stage.gpu_nodes, stage.gpu_addons, stage.workload} <= set(stage.readiness.dependencies)


@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_the_gpu_nodes_import_nothing_from_the_cluster_stack(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    text = json.dumps(app.templates["GpuNodes"])
    imports = set(re.findall(r'"Fn::ImportValue": "([^"]+)"', text))
    assert imports and all(i.startswith(f"{app.stage.network.stack_name}:") for i in imports)
    assert app.stage.cluster.stack_name not in {
        d.stack_name for d in app.stage.gpu_nodes.dependencies
    }


def _upstream(template: dict[str, Any], root: str) -> set[str]:
    """Every resource ``root`` waits for, transitively (references and DependsOn)."""
    resources = template["Resources"]
    seen: set[str] = set()
    todo = [root]
    while todo:
        resource = resources[todo.pop()]
        depends = resource.get("DependsOn", [])
        for d in (refs(resource.get("Properties", {})) | set(depends)) & set(resources):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@pytest.mark.parametrize("app_name", ["default_app", "variant_app"])
def test_the_gpu_node_group_waits_for_the_control_plane_waiter_and_nothing_else_of_it(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    """The waiter is the node group's one link to the cluster: the group depends on it (its
    launch template reads the cluster security group from it), names the cluster by the
    configured name, and waits for nothing of another stack but the network's values."""
    app: Synthesized = request.getfixturevalue(app_name)
    template = app.templates["GpuNodes"]
    ((waiter, resource),) = app.resources("GpuNodes", "Custom::ClusterActive").items()
    ((nodegroup, ng),) = app.resources("GpuNodes", "AWS::EKS::Nodegroup").items()
    assert waiter in ng["DependsOn"]
    upstream = _upstream(template, nodegroup)
    assert waiter in upstream
    assert ng["Properties"]["ClusterName"] == app.config.cluster_name
    props = resource["Properties"]
    assert props["ClusterName"] == app.config.cluster_name
    assert props["KubernetesVersion"] == app.config.kubernetes_version
    assert props["ClusterStackName"] == app.stage.cluster.stack_name
    (cluster,) = app.resources("Cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == props["ClusterName"]
    assert cluster["Properties"]["Version"] == props["KubernetesVersion"]
    # Everything else that refers to the cluster (the capacity watch, through the launch
    # template's version) comes after the waiter too; nothing in the stack comes before it
    # but its own machinery.
    for logical_id in _upstream(template, waiter):
        assert logical_id.startswith(("ClusterActive", "SharedHandlerLayer")), logical_id


def test_a_moving_gpu_az_changes_nothing_another_stack_imports(default_app: Synthesized) -> None:
    template = default_app.templates["GpuNodes"]
    (chooser,) = default_app.resources("GpuNodes", "Custom::GpuAvailabilityZone")
    moving = _changes_with(template, chooser)
    types = {template["Resources"][k]["Type"] for k in moving}
    assert {"AWS::EC2::Subnet", "AWS::EKS::Nodegroup", "Custom::GpuCapacityWatch"} <= types
    # Nothing of the GPU stack is exported, so no other stack imports the AZ choice or what
    # follows from it (the chooser's function, exported by the cluster stack, does not change).
    assert not any("Export" in o for o in template.get("Outputs", {}).values())
    for name, value in _exports(default_app).items():
        assert "GpuSubnet" not in json.dumps(value) and "GpuNodes" not in json.dumps(value), name


def test_a_reservation_in_another_az_exports_the_same_values(
    default_app: Synthesized, token_app: Synthesized
) -> None:
    """token_app pins another GPU AZ and targets a capacity reservation (its AZ becomes the
    GPU AZ): what moving the GPU nodes does to a deployed app. Every value the default app
    exports is exported unchanged, so CloudFormation can apply the move."""
    chooser = {
        name: app.only("GpuNodes", "Custom::GpuAvailabilityZone")["Properties"]
        for name, app in (("default", default_app), ("moved", token_app))
    }
    assert (chooser["default"]["RequestedAz"], chooser["moved"]["RequestedAz"]) == (
        "",
        "us-west-2c",
    )
    assert chooser["moved"]["CapacityReservationId"] != chooser["default"]["CapacityReservationId"]
    before, after = _exports(default_app), _exports(token_app)
    assert before and {k: after.get(k) for k in before} == before


def test_the_gpu_node_group_is_replaceable_when_the_az_moves(default_app: Synthesized) -> None:
    ((_, nodegroup),) = default_app.resources("GpuNodes", "AWS::EKS::Nodegroup").items()
    (chooser,) = default_app.resources("GpuNodes", "Custom::GpuAvailabilityZone")
    name = nodegroup["Properties"]["NodegroupName"]
    # <gpuNodegroupName>-<the chosen AZ>-<hash>: a new AZ is a new name, so CloudFormation
    # creates the new group before it deletes the old one.
    sep, (prefix, az, digest) = name["Fn::Join"]
    assert (sep, prefix) == ("-", "gpu-workers")
    assert az == {"Fn::GetAtt": [chooser, "AvailabilityZone"]}
    assert len(digest) == 8 and int(digest, 16) >= 0
    subnet = default_app.only("GpuNodes", "AWS::EC2::Subnet")["Properties"]
    assert subnet["AvailabilityZone"] == {"Fn::GetAtt": [chooser, "AvailabilityZone"]}
    outputs = default_app.templates["GpuNodes"]["Outputs"]
    assert outputs["GpuNodegroupName"]["Value"] == name


def test_the_node_group_name_follows_everything_that_replaces_the_group() -> None:
    def name(az: str, instance_type: str, ami: eks.NodegroupAmiType = GPU_AMI_TYPE) -> str:
        return gpu_nodegroup_name("gpu-workers", az, instance_type=instance_type, ami_type=ami)

    base = name("us-west-2a", "g6.8xlarge")
    assert base.startswith("gpu-workers-us-west-2a-") and len(base) == len("gpu-workers-") + 19
    assert name("us-west-2a", "g6.8xlarge") == base  # stable across synths
    assert name("us-west-2b", "g6.8xlarge") != base
    assert name("us-west-2a", "g6.12xlarge") != base
    assert name("us-west-2a", "g6.8xlarge", eks.NodegroupAmiType.AL2_X86_64_GPU) != base


@pytest.mark.parametrize(
    ("length", "accepted"),
    [(GPU_NODEGROUP_PREFIX_MAX, True), (GPU_NODEGROUP_PREFIX_MAX + 1, False)],
)
def test_node_group_prefix_leaves_room_for_az_and_hash(length: int, accepted: bool) -> None:
    prefix = "g" * length
    if accepted:
        assert AppConfig.from_context({"gpuNodegroupName": prefix}).gpu_nodegroup_name == prefix
        # The longest AZ allowed for still fits EKS's 63 characters.
        az = "x" * 20
        assert (
            len(gpu_nodegroup_name(prefix, az, instance_type="g6.8xlarge", ami_type=GPU_AMI_TYPE))
            == 63
        )
    else:
        with pytest.raises(
            ConfigError, match=rf"gpuNodegroupName.*the limit is {GPU_NODEGROUP_PREFIX_MAX}"
        ):
            AppConfig.from_context({"gpuNodegroupName": prefix})


def test_operator_waits_for_the_system_nodes_not_the_gpu_nodes(default_app: Synthesized) -> None:
    template = default_app.templates["Workload"]
    (system_nodes,) = default_app.resources("Workload", "AWS::EKS::Nodegroup")
    (operator,) = [
        k
        for k, v in default_app.resources("Workload", "Custom::AWSCDK-EKS-HelmChart").items()
        if v["Properties"]["Release"] == "kuberay-operator"
    ]
    assert system_nodes in template["Resources"][operator]["DependsOn"]
    assert "GpuNodes" not in json.dumps(template)


# Add-ons whose pods are DaemonSets only: they can be created before any node exists.
NODELESS_ADDONS = {"vpc-cni", "eks-pod-identity-agent", "kube-proxy"}


def test_the_cluster_stack_waits_for_no_node(
    default_app: Synthesized, variant_app: Synthesized, token_app: Synthesized
) -> None:
    """No node exists before the Workload and GpuNodes stacks: an add-on with a Deployment in
    the Cluster stack would wait for one forever. It belongs after the system node group."""
    for app in (default_app, variant_app, token_app):
        assert app.resources("Cluster", "AWS::EKS::Nodegroup") == {}
        for addon in app.resources("Cluster", "AWS::EKS::Addon").values():
            assert addon["Properties"]["AddonName"] in NODELESS_ADDONS, addon["Properties"]
        charts = app.resources("Cluster", "Custom::AWSCDK-EKS-HelmChart")
        assert charts == {}, "a Helm release waits for its pods: put it after a node group"
        # The kubectl function reaches the AWS APIs through the NAT gateway, which this stack
        # creates beside the control plane: Kubernetes objects belong in the later stacks.
        manifests = app.resources("Cluster", "Custom::AWSCDK-EKS-KubernetesResource")
        assert manifests == {}


def test_the_later_stacks_hold_the_checks_not_their_machinery(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    """The readiness check's, the recreate's and the capacity watch's functions, roles and
    Providers are created in the cluster stack beside the control plane; the stacks that use
    them hold the custom resources only (docs/deploy-timeline.md)."""
    for app in (default_app, variant_app):
        readiness = app.templates["Readiness"]["Resources"]
        # Besides the check, only the scheduled KV probe (which runs after the check, on its
        # own schedule: pd_constructs/readiness/kv_probe.py) and the shared layer its function
        # carries.
        assert {
            r["Type"]
            for k, r in readiness.items()
            if not k.startswith(("KvProbe", "SharedHandlerLayer"))
        } <= {
            "Custom::RayServiceReadiness",
            "Custom::EndpointProbe",  # its function is in the cluster stack too
            "Custom::AWSCDK-EKS-KubernetesResource",
            "AWS::CDK::Metadata",
        }
        functions = app.resources("Workload", "AWS::Lambda::Function").values()
        descriptions = [f["Properties"].get("Description", "") for f in functions]
        assert not [d for d in descriptions if d.startswith("RayService recreate")]
        cluster = app.templates["Cluster"]["Resources"]
        described = {
            r["Properties"].get("Description", "").split(":")[0]
            for r in cluster.values()
            if r["Type"] == "AWS::Lambda::Function"
        }
        # "GPU capacity watch": the previous release's, kept for its resource's Delete
        # (ray_pd_eks/cross_stack.py KEPT_FOR_UPGRADE).
        assert {"Readiness check", "RayService recreate", "GPU capacity watch"} <= described
        # The service tokens come from the cluster stack; a custom resource whose token
        # changed would fail its update, so these have their own logical ids ("...Check").
        for stack, rtype in (
            ("Readiness", "Custom::RayServiceReadiness"),
            ("Workload", "Custom::RayServiceRecreate"),
        ):
            ((logical_id, resource),) = app.resources(stack, rtype).items()
            assert "Check" in logical_id, (stack, logical_id)
            assert "Fn::ImportValue" in resource["Properties"]["ServiceToken"], stack
        # The GPU stack's own waiters have their machinery with them: that stack starts beside
        # the cluster stack, and their functions are done long before the control plane.
        for rtype in (
            "Custom::GpuCapacityWatch",
            "Custom::GpuAvailabilityZone",
            "Custom::ClusterActive",
        ):
            ((logical_id, resource),) = app.resources("GpuNodes", rtype).items()
            token = resource["Properties"]["ServiceToken"]
            assert "Fn::GetAtt" in token, (rtype, token)
            assert logical_id not in ("GpuCapacityWatchCheckFFD5439C", "GpuAzE036B77A"), rtype
