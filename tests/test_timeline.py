"""The deploy-time model (ray_pd_eks/timeline.py): its scheduling rules on small templates, and
what it says about the synthesized app, which the docs and the README state."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ray_pd_eks import timeline
from ray_pd_eks.timeline import Deploy, Timeline, schedule
from tests.synth import ROOT, Synthesized


def _role(name: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {"RoleName": name}}


def _two_stacks() -> Deploy:
    """A: role -> function (by GetAtt) and a log group (by DependsOn); B and C depend on A."""
    a = {
        "Resources": {
            "Role": _role("r"),
            "Fn": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}},
            },
            "Logs": {"Type": "AWS::Logs::LogGroup", "DependsOn": ["Fn"], "Properties": {}},
        }
    }
    b = {"Resources": {"Key": {"Type": "AWS::KMS::Key", "Properties": {}}}}
    c = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {}}}}
    return Deploy({"A": a, "B": b, "C": c}, {"A": set(), "B": {"A"}, "C": {"A"}})


def test_a_resource_starts_when_what_it_references_is_done() -> None:
    steps = schedule(_two_stacks()).steps
    role, fn, logs = steps["A/Role"], steps["A/Fn"], steps["A/Logs"]
    assert role.start == timeline.STACK_OVERHEAD
    assert fn.start == pytest.approx(role.end) and fn.after == "A/Role"
    assert logs.start == pytest.approx(fn.end) and logs.after == "A/Fn"
    assert fn.minutes == pytest.approx(timeline.DURATIONS["AWS::Lambda::Function"])


def test_independent_stacks_run_side_by_side_only_with_concurrency() -> None:
    side_by_side = schedule(_two_stacks(), concurrency=4)
    a_end = side_by_side.stacks["stack A"].end
    assert side_by_side.steps["B/Key"].start == side_by_side.steps["C/Vpc"].start
    assert side_by_side.steps["B/Key"].start == pytest.approx(a_end + timeline.STACK_OVERHEAD)
    one_by_one = schedule(_two_stacks(), concurrency=1)
    b_end = one_by_one.stacks["stack B"].end
    assert one_by_one.steps["C/Vpc"].start == pytest.approx(b_end + timeline.STACK_OVERHEAD)


def test_a_dependency_cycle_between_stacks_is_reported() -> None:
    deploy = _two_stacks()
    deploy.dependencies["A"] = {"C"}
    with pytest.raises(ValueError, match="cycle"):
        schedule(deploy)


# -- the app ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(default_app: Synthesized) -> Timeline:
    return schedule(Deploy.from_assembly(default_app.outdir))


def _step(model: Timeline, pattern: str) -> timeline.Step:
    (found,) = [s for name, s in model.steps.items() if re.search(pattern, name)]
    return found


def test_the_stacks_and_their_dependencies_are_read_from_the_assembly(
    default_app: Synthesized,
) -> None:
    deploy = Deploy.from_assembly(default_app.outdir)
    assert set(deploy.templates) == {
        "Network",
        "Cluster",
        "GpuNodes",
        "Workload",
        "GpuAddons",
        "Readiness",
    }
    assert deploy.dependencies["Workload"] == {"Network", "Cluster"}
    assert deploy.dependencies["GpuNodes"] == {"Network"}
    assert {"GpuNodes", "Cluster"} <= deploy.dependencies["GpuAddons"]
    assert {"GpuNodes", "Workload", "GpuAddons"} <= deploy.dependencies["Readiness"]


def test_the_weights_download_beside_the_image_pull_not_after_it(model: Timeline) -> None:
    pull = _step(model, r"^pull Ray image on the gpu-worker node")
    weights = _step(model, r"^download weights")
    assert weights.start < pull.end
    # Both start when the GPU node joins (the weights after the small prefetch image and the
    # install); at one node's share of the NAT gateway they end before the image does, so
    # the engines wait for the image, not for Hugging Face.
    assert weights.start - pull.start <= 2 * timeline.SMALL_IMAGE_MINUTES + 1e-9
    assert weights.end < pull.end
    engines = _step(model, r"^vLLM engines up")
    assert engines.after == pull.name


def test_the_hugging_face_rate_is_one_nodes_share_of_the_nat_gateway() -> None:
    """Two GPU nodes download at once through one NAT gateway: 5 Gbit/s before it scales
    (Amazon VPC User Guide). The modelled rate is that share rounded down: at most half of it,
    and within 10 % of it."""
    share_gbps = 5.0 / 2
    modelled_gbps = timeline.HF_MBPS * 8 / 1000
    assert 0.9 * share_gbps < modelled_gbps <= share_gbps


def test_the_operator_and_rayservice_do_not_wait_for_the_gpu_nodes(model: Timeline) -> None:
    gpu_nodes = _step(model, r"^GpuNodes/GpuNodes[0-9A-F]{8}$")
    rayservice = _step(model, r"^Workload/WorkloadRayService")
    operator = _step(model, r"^Workload/WorkloadKubeRayOperator")
    # The operator waits for the system node group (in its own stack), which starts after the
    # cluster stack, the GPU node group one poll after ACTIVE: both end about together.
    assert operator.after.startswith("Workload/SystemNodes")
    assert operator.start <= gpu_nodes.end and rayservice.end < gpu_nodes.end + 1.5


def test_the_nat_gateway_does_not_hold_the_control_plane_back(model: Timeline) -> None:
    nat = _step(model, r"^Cluster/Egress[0-9A-F]{8}$")
    cluster = _step(model, r"^Cluster/Cluster9EE0221C$")
    assert nat.start < cluster.start < nat.end


def test_the_head_keeps_slack_thanks_to_the_faster_system_root(model: Timeline) -> None:
    head = _step(model, r"^Ray head up")
    engines = _step(model, r"^vLLM engines up")
    # 1.0 minute since the GPU node group starts at ACTIVE and the image, not the weights,
    # sets the engines' start (the head's path still waits for the whole cluster stack: its
    # node group is in the Workload stack); at gp3's baseline the head's pull alone is 5.3.
    assert engines.end - head.end >= 0.75


def test_the_critical_path_runs_through_the_gpu_nodes_to_the_proof(model: Timeline) -> None:
    names = [s.name for s in model.critical_path()]
    assert names[-1].startswith("Readiness/Readiness")
    assert any(re.match(r"GpuNodes/GpuNodes[0-9A-F]{8}$", n) for n in names)
    assert "vLLM engines up" in names and "serve app RUNNING" in names


def test_the_add_ons_start_together_when_the_control_plane_is_active(model: Timeline) -> None:
    """What may not wait for what: the vpc-cni add-on not for the Pod Identity agent's (no
    node runs either before both exist), its role not for the cluster (its trust names the
    cluster's ARN from the configured name)."""
    cluster = _step(model, r"^Cluster/Cluster9EE0221C$")
    agent = _step(model, r"^Cluster/ClusterEksPodIdentityAgentAddon")
    cni = _step(model, r"^Cluster/VpcCni[0-9A-F]{8}$")
    assert agent.start == cni.start == pytest.approx(cluster.end)
    role = _step(model, r"^Cluster/VpcCniRole[0-9A-F]{8}$")
    assert role.end <= cluster.end
    # The system node group starts with the Workload stack, after this one, which ends one
    # add-on's creation (and the kubectl provider's functions) after the control plane is
    # ACTIVE.
    assert model.stacks["stack Cluster"].end - cluster.end <= 1.2


def test_the_gpu_node_group_starts_one_poll_after_the_control_plane_is_active(
    model: Timeline,
) -> None:
    """Not after the cluster stack: the GPU node stack starts beside it (after the network),
    and its node group waits for the control-plane waiter (ACTIVE + one 15 s poll) and the
    launch template that names the cluster security group the waiter returns."""
    cluster = _step(model, r"^Cluster/Cluster9EE0221C$")
    waiter = _step(model, r"^GpuNodes/ClusterActive[0-9A-F]{8}$")
    template = _step(model, r"^GpuNodes/GpuNodesLaunchTemplate")
    gpu_nodes = _step(model, r"^GpuNodes/GpuNodes[0-9A-F]{8}$")
    network_end = model.stacks["stack Network"].end
    assert model.stacks["stack GpuNodes"].start == pytest.approx(network_end)
    assert waiter.end == pytest.approx(cluster.end + timeline.CLUSTER_ACTIVE_POLL)
    assert waiter.after == "Cluster/Cluster9EE0221C"
    assert template.start == pytest.approx(waiter.end) and gpu_nodes.after == template.name
    assert gpu_nodes.start == pytest.approx(cluster.end + timeline.CLUSTER_ACTIVE_POLL + 0.1)
    assert gpu_nodes.start < model.stacks["stack Cluster"].end
    # The waiter's, the AZ chooser's and the capacity watch's machinery is done long before.
    machinery = [
        s
        for n, s in model.steps.items()
        if n.startswith(("GpuNodes/ClusterActive", "GpuNodes/GpuAzChoice", "GpuNodes/GpuCapacity"))
        and not n.startswith(("GpuNodes/ClusterActive3AA99BD7", "GpuNodes/GpuCapacityWatchC4"))
    ]
    assert machinery and max(s.end for s in machinery) < cluster.end


def test_a_waiter_is_scheduled_after_the_cluster_of_another_stack() -> None:
    """The model's order: a stack with a Custom::ClusterActive after the stack of its cluster,
    though no dependency says so; a waiter for a cluster no stack has is an error."""
    cluster = {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "c"}}
    waiter = {"Type": "Custom::ClusterActive", "Properties": {"ClusterName": "c"}}
    deploy = Deploy(
        {"Nodes": {"Resources": {"Wait": waiter}}, "Eks": {"Resources": {"Cluster": cluster}}},
        {"Nodes": set(), "Eks": set()},
    )
    steps = schedule(deploy).steps
    assert steps["Nodes/Wait"].end == pytest.approx(
        steps["Eks/Cluster"].end + timeline.CLUSTER_ACTIVE_POLL
    )
    assert steps["Nodes/Wait"].start == pytest.approx(timeline.STACK_OVERHEAD)
    deploy.templates["Eks"]["Resources"]["Cluster"]["Properties"]["Name"] = "other"
    with pytest.raises(ValueError, match=r"cannot schedule|waits for a cluster"):
        schedule(deploy)


def test_the_checks_start_with_their_stacks_their_machinery_exists_already(
    model: Timeline,
) -> None:
    """The readiness check's and the recreate's functions, roles and Providers are created in
    the cluster stack beside the control plane: the later stacks start the checks themselves
    at once. (The GPU node stack's waiters have theirs with them: that stack starts beside the
    cluster stack, test_the_gpu_node_group_starts_one_poll_after_the_control_plane_is_active.)"""
    for stack, prefix in (
        ("Readiness", "Readiness"),
        ("Workload", "WorkloadRecreate"),
    ):
        check = _step(model, rf"^{stack}/{prefix}Check[0-9A-F]{{8}}$")
        own = [n for n in model.steps if n.startswith(f"{stack}/{prefix}")]
        assert not [n for n in own if re.search("Provider|OnEvent|IsComplete|Role", n)], stack
        started = model.stacks[f"stack {stack}"].start + timeline.STACK_OVERHEAD
        if stack == "Readiness":
            # After its RBAC only (one kubectl apply).
            rbac = timeline.DURATIONS["Custom::AWSCDK-EKS-KubernetesResource"]
            assert check.start == pytest.approx(started + rbac)
        else:
            # After what it checks (the operator, the node group's name), not its machinery.
            assert check.start >= started
            assert not re.search("Provider|OnEvent|IsComplete|Role|Layer", check.after), stack
    # Their machinery is done before the node groups even start.
    machinery = [s for n, s in model.steps.items() if n.startswith("Cluster/Providers")]
    assert machinery and max(s.end for s in machinery) <= model.stacks["stack Cluster"].end


def test_the_gpu_image_is_pulled_with_soci_parallel_pull(model: Timeline) -> None:
    pull = _step(model, r"^pull Ray image on the gpu-worker node")
    assert "SOCI parallel pull" in pull.name
    download = timeline.DLC_IMAGE_GB * 1000 / timeline.PULL_CEILING_MBPS / 60
    assert pull.minutes == pytest.approx(download / timeline.SOCI_PULL_SPEEDUP)
    assert "SOCI parallel pull" in _step(model, r"^pull Ray image on the system node").name


def test_cold_start_states_the_scale_out_figure(default_app: Synthesized) -> None:
    growth = timeline.scale_out(Deploy.from_assembly(default_app.outdir))
    assert growth.minutes == pytest.approx(7.1, abs=0.05)
    names = [what for what, _, _ in growth.steps]
    assert names[0] == "node launches, boots and joins" and names[-1] == "replica serves"
    doc = (ROOT / "docs" / "cold-start.md").read_text()
    assert f"serves after **{growth.minutes:.1f} minutes**" in doc
    readme = (ROOT / "README.md").read_text()
    assert f"serves after **about {growth.minutes:.1f} modelled minutes**" in readme
    spare = timeline.scale_out_model(
        fast_pull=True, disk_mbps=timeline.NVME_MBPS, weights_in_s3=False, warm_spares=True
    ).spare_steps[-1][2]
    assert f"a new replica on a warm spare after {spare:.1f} " in readme


def test_staged_weights_leave_the_scale_out_to_the_image(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    """With the weights in S3 the image pull is the longer download: the engine starts when
    it ends. The docs state that figure; the app's own staging is read from its templates."""
    staged = timeline.scale_out(Deploy.from_assembly(default_app.outdir), weights_in_s3=True)
    steps = {what.split(" (")[0]: (start, end) for what, start, end in staged.steps}
    assert "download weights from S3" in steps
    engine_start = steps["vLLM engine loads the weights and starts"][0]
    assert engine_start == pytest.approx(steps["pull Ray image"][1])
    assert steps["download weights from S3"][1] < engine_start
    assert staged.minutes == pytest.approx(7.1, abs=0.05)
    doc = (ROOT / "docs" / "cold-start.md").read_text()
    assert f"serves after about {staged.minutes:.1f} minutes" in doc
    own = timeline.scale_out(Deploy.from_assembly(variant_app.outdir))
    assert any(what == "download weights from S3" for what, _, _ in own.steps)
    unstaged = timeline.scale_out(Deploy.from_assembly(variant_app.outdir), weights_in_s3=False)
    assert any(what == "download weights from Hugging Face" for what, _, _ in unstaged.steps)


def test_the_docs_and_the_readme_state_the_modelled_time(
    model: Timeline, default_app: Synthesized
) -> None:
    """One deploy time everywhere, taken from the model: change the graph, update the docs."""
    minutes = model.endpoint_minutes
    assert minutes == pytest.approx(21.66, abs=0.01)
    assert minutes <= 22  # the deploy's goal: a proven endpoint within 22 modelled minutes
    doc = (ROOT / "docs" / "deploy-timeline.md").read_text()
    assert f"| this version | **{minutes:.1f} min** |" in doc
    assert f"after about **{round(minutes)} minutes**" in doc
    # The README's range: the control plane at 10 and at 15 minutes, as published averages go.
    low, high = (
        schedule(Deploy.from_assembly(default_app.outdir), control_plane_minutes=m).endpoint_minutes
        for m in timeline.CONTROL_PLANE_MINUTES_RANGE
    )
    assert low == pytest.approx(minutes) and high == pytest.approx(minutes + 5)
    readme = (ROOT / "README.md").read_text()
    assert f"A fresh deploy takes **about {round(low)}-{round(high)} minutes**" in readme
    assert f"~{round(low)}-{round(high)} min" in readme  # the quick start's
    one_by_one = schedule(Deploy.from_assembly(default_app.outdir), concurrency=1)
    assert f"**{one_by_one.endpoint_minutes:.1f} minutes**" in doc


def test_the_control_planes_minutes_move_the_endpoint_minute_for_minute(
    default_app: Synthesized,
) -> None:
    """It is on the critical path: critical_path.py --control-plane-minutes and the README's
    range rest on that."""
    deploy = Deploy.from_assembly(default_app.outdir)
    at = {m: schedule(deploy, control_plane_minutes=m).endpoint_minutes for m in (10, 12, 15)}
    assert at[10] == pytest.approx(schedule(deploy).endpoint_minutes)
    assert (at[12] - at[10], at[15] - at[10]) == (pytest.approx(2), pytest.approx(5))
    doc = (ROOT / "docs" / "deploy-timeline.md").read_text()
    assert f"**{at[10]:.1f}-{at[15]:.1f} minutes**" in doc
