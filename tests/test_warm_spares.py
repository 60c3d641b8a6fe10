"""Warm spare GPU nodes (``gpuWarmSpareNodes``): the Cluster Autoscaler's overprovisioning
pattern for decode scale-out. Opt-in: the defaults render nothing of it. The synthesized checks
use ``variant_app`` (decode 2..3 replicas, 3..4 GPU nodes, one spare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pd_constructs.common.helm import CLUSTER_AUTOSCALER
from pd_constructs.common.namespaces import WARMUP_NAMESPACE
from pd_constructs.serving.warmup import (
    CLUSTER_AUTOSCALER_EXPENDABLE_CUTOFF,
    PAUSE_IMAGE,
    WARM_SPARE_PRIORITY,
    WARM_SPARE_PRIORITY_CLASS,
    render_warm_spares,
)
from pd_constructs.serving.workload import render_rayservice, worker_resources
from ray_pd_eks import timeline
from ray_pd_eks.config import DEFAULTS, ConfigError
from ray_pd_eks.timeline import Deploy
from tests.psa import violations
from tests.synth import Synthesized, image_refs, resolve

ROOT = Path(__file__).resolve().parent.parent
# Decode 1..3 replicas on 2..4 GPU nodes: 1 prefill + 1 decode always run, 2 nodes of room.
SCALING = {"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4}


def _objects(app: Synthesized) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    out = {}
    for logical_id, r in app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource").items():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            out[(obj["kind"], obj["metadata"]["name"])] = (logical_id, obj)
    return out


def _placeholder(app: Synthesized) -> dict[str, Any]:
    return _objects(app)[("Deployment", "gpu-warm-spare")][1]


# -- validation: each limit at the limit and one past it --


@pytest.mark.parametrize(
    ("overrides", "ok"),
    [
        ({**SCALING, "gpuWarmSpareNodes": 2}, True),  # 1 + 1 + 2 = gpuNodeMaxCount 4
        ({**SCALING, "gpuWarmSpareNodes": 3}, False),  # 5 > 4
        (
            {
                **SCALING,
                "decodeMinReplicas": 1,
                "decodeReplicas": 2,
                "gpuNodeCount": 3,
                "gpuWarmSpareNodes": 2,
            },
            True,
        ),  # 1 + 1 (min) + 2 = 4
        (
            {
                **SCALING,
                "gpuNodeMinCount": 3,
                "gpuNodeCount": 3,
                "decodeReplicas": 2,
                "gpuWarmSpareNodes": 1,
            },
            True,
        ),  # 1 + 2 + 1 = 4
        (
            {
                **SCALING,
                "gpuNodeMinCount": 3,
                "gpuNodeCount": 3,
                "decodeReplicas": 2,
                "gpuWarmSpareNodes": 2,
            },
            False,
        ),  # 1 + 2 + 2 = 5
    ],
)
def test_spares_and_the_replicas_that_always_run_must_fit_the_group_maximum(
    overrides: dict[str, Any], ok: bool
) -> None:
    if ok:
        assert (
            DEFAULTS.with_overrides(overrides).gpu_warm_spare_nodes
            == overrides["gpuWarmSpareNodes"]
        )
        return
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides(overrides)
    (line,) = str(err.value).splitlines()
    spares = overrides["gpuWarmSpareNodes"]
    assert line.startswith(f"context key 'gpuWarmSpareNodes' = {spares}: ")
    assert "exceeds gpuNodeMaxCount 4" in line
    assert f"set gpuWarmSpareNodes to at most {spares - 1}" in line
    assert "ray-pd-eks settings --set gpuWarmSpareNodes=" in line


@pytest.mark.parametrize(
    ("overrides", "needs"),
    [
        ({"gpuWarmSpareNodes": 1, "gpuNodeMaxCount": 4}, ["decode autoscaling"]),
        ({"gpuWarmSpareNodes": 1, "decodeMaxReplicas": 2, "gpuNodeCount": 3}, ["node range"]),
        ({"gpuWarmSpareNodes": 1}, ["decode autoscaling", "node range"]),
    ],
)
def test_spares_need_decode_autoscaling_and_a_gpu_node_range(
    overrides: dict[str, Any], needs: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides(overrides)
    lines = str(err.value).splitlines()
    assert len(lines) == len(needs)
    for line, need in zip(lines, needs, strict=True):
        assert line.startswith("context key 'gpuWarmSpareNodes' = 1: ")
        assert need in line and "or set gpuWarmSpareNodes=0" in line


@pytest.mark.parametrize(("spares", "ok"), [(0, True), (-1, False)])
def test_spares_are_zero_or_more(spares: int, ok: bool) -> None:
    if ok:
        assert DEFAULTS.with_overrides({"gpuWarmSpareNodes": spares}) == DEFAULTS
        return
    with pytest.raises(ConfigError, match="context key 'gpuWarmSpareNodes' = -1: must be 0"):
        DEFAULTS.with_overrides({"gpuWarmSpareNodes": spares})


# -- off by default --


def test_the_defaults_render_no_spare_and_pin_no_pause_image(default_app: Synthesized) -> None:
    assert DEFAULTS.gpu_warm_spare_nodes == 0
    kinds = {kind for kind, _ in _objects(default_app)}
    assert "PriorityClass" not in kinds and "Deployment" not in kinds
    assert "Pause" not in image_refs(default_app)
    assert not [k for k in default_app.templates["Workload"]["Resources"] if "WarmSpares" in k]
    assert timeline.scale_out(Deploy.from_assembly(default_app.outdir)).spare_steps == ()


# -- the placeholders --


def test_placeholders_hold_a_whole_gpu_node_each_like_a_worker(variant_app: Synthesized) -> None:
    config = variant_app.config
    deployment = _placeholder(variant_app)
    assert deployment["metadata"]["namespace"] == WARMUP_NAMESPACE
    assert deployment["spec"]["replicas"] == config.gpu_warm_spare_nodes == 1
    template = deployment["spec"]["template"]
    spec = template["spec"]
    (c,) = spec["containers"]
    # What a worker asks of its node: another worker cannot fit beside it.
    assert c["resources"] == {
        "requests": worker_resources(config),
        "limits": worker_resources(config),
    }
    workers = render_rayservice(config, image="img:1")["spec"]["rayClusterConfig"]
    (group,) = workers["workerGroupSpecs"]
    worker = group["template"]["spec"]
    assert c["resources"] == worker["containers"][0]["resources"]
    assert spec["nodeSelector"] == worker["nodeSelector"] == {"role": "gpu-worker"}
    assert spec["tolerations"] == worker["tolerations"]
    terms = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {t["topologyKey"] for t in terms} == {"kubernetes.io/hostname"}
    selectors = [t["labelSelector"]["matchLabels"] for t in terms]
    assert {"app.kubernetes.io/name": "gpu-warm-spare"} in selectors
    # The workers' own anti-affinity label, in any namespace.
    (own,) = worker["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (cross,) = [t for t in terms if "namespaceSelector" in t]
    assert cross["labelSelector"] == own["labelSelector"] and cross["namespaceSelector"] == {}
    # The pause image, pinned at deploy time.
    assert c["image"] == image_refs(variant_app)["Pause"]
    images = variant_app.only("Workload", "Custom::ImageDigests")["Properties"]
    assert images["Pause"] == PAUSE_IMAGE
    # Nothing to call, nothing to write, no identity, freed at once when preempted.
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert spec["terminationGracePeriodSeconds"] == 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert violations(spec, "restricted") == []
    # The Cluster Autoscaler never drains a spare's node while its placeholder holds it.
    annotations = template["metadata"]["annotations"]
    assert annotations == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_placeholders_trigger_scale_up_and_yield_to_every_worker(variant_app: Synthesized) -> None:
    """Priority at the Cluster Autoscaler's expendable cutoff: not below it (a pod below is
    ignored for scale-up and deleted at scale-down), and below the workers' 0 (no priority
    class: KubeRay 1.7.0 sets none), so the scheduler preempts a placeholder for a worker."""
    objects = _objects(variant_app)
    priority = objects[("PriorityClass", WARM_SPARE_PRIORITY_CLASS)][1]
    assert priority["value"] == WARM_SPARE_PRIORITY == CLUSTER_AUTOSCALER_EXPENDABLE_CUTOFF == -10
    assert priority["globalDefault"] is False and priority["preemptionPolicy"] == "Never"
    assert "namespace" not in priority["metadata"]  # cluster-scoped
    spec = _placeholder(variant_app)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == WARM_SPARE_PRIORITY_CLASS
    # cluster-autoscaler 1.35.2/1.36.1, core/utils/expendable.go: priority < cutoff.
    expendable = priority["value"] < CLUSTER_AUTOSCALER_EXPENDABLE_CUTOFF
    assert not expendable
    # The chart's values keep the autoscaler's default cutoff.
    args = CLUSTER_AUTOSCALER.values()["extraArgs"]
    assert "expendable-pods-priority-cutoff" not in args
    rs = objects[("RayService", variant_app.config.ray_service_name)][1]
    cluster = rs["spec"]["rayClusterConfig"]
    for template in [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]:
        assert "priorityClassName" not in template["spec"] and "priority" not in template["spec"]
    # No PriorityClass of ours is a global default (which would give the workers its value).
    assert [k for k, _ in objects if k == "PriorityClass"] == ["PriorityClass"]


def test_placeholders_are_applied_after_the_namespace_and_its_admission_policies(
    variant_app: Synthesized,
) -> None:
    objects = _objects(variant_app)
    spare_id, _ = objects[("Deployment", "gpu-warm-spare")]
    assert objects[("PriorityClass", WARM_SPARE_PRIORITY_CLASS)][0] == spare_id
    assert spare_id.startswith("WarmupWarmSpares")
    depends = set(variant_app.templates["Workload"]["Resources"][spare_id]["DependsOn"])
    assert objects[("Namespace", WARMUP_NAMESPACE)][0] in depends
    assert objects[("ValidatingAdmissionPolicy", "ray-pd-eks-gpu-nodes")][0] in depends


def test_the_placeholder_pod_template_validates_against_the_kubernetes_pod_schema(
    variant_app: Synthesized, reference_dir: Path
) -> None:
    from tests.test_workload import crd_validator, validate

    crd = crd_validator(reference_dir)
    pod_template = crd.evolve(
        schema=crd.schema["properties"]["spec"]["properties"]["rayClusterConfig"]["properties"][
            "headGroupSpec"
        ]["properties"]["template"]
    )
    template = _placeholder(variant_app)["spec"]["template"]
    validate(template, pod_template)
    with pytest.raises(jsonschema.ValidationError):
        validate({**template, "spec": {**template["spec"], "priorityClass": "x"}}, pod_template)


def test_the_deployment_and_priority_class_have_the_fields_the_api_requires() -> None:
    """apps/v1 Deployment and scheduling.k8s.io/v1 PriorityClass (no schema of them in the
    repository: the cluster tier's API server is the authority): the selector matches the
    template's labels, and a PriorityClass carries value at the top level, not under spec."""
    config = DEFAULTS.with_overrides({**SCALING, "gpuWarmSpareNodes": 2})
    priority, deployment = render_warm_spares(config, image="pause@sha256:" + "0" * 64)
    assert (priority["apiVersion"], priority["kind"]) == ("scheduling.k8s.io/v1", "PriorityClass")
    assert set(priority) == {
        "apiVersion",
        "kind",
        "metadata",
        "value",
        "globalDefault",
        "preemptionPolicy",
        "description",
    }
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert deployment["spec"]["replicas"] == 2


def test_the_pause_image_is_the_one_the_eks_al2023_amis_cache() -> None:
    """awslabs/amazon-eks-ami templates/al2023/variables-default.json pause_container_image; a
    registry the nodes already reach (ECR Public, like the prefetch image)."""
    assert PAUSE_IMAGE == "public.ecr.aws/eks-distro/kubernetes/pause:3.10"
    assert PAUSE_IMAGE.split("/")[0] == DEFAULTS.prefetch_image.split("/")[0]


# -- the model --


def test_a_replica_on_a_warm_spare_pays_only_the_pod_engine_and_serve(
    variant_app: Synthesized,
) -> None:
    growth = timeline.scale_out(Deploy.from_assembly(variant_app.outdir))
    assert growth.spare_minutes == pytest.approx(
        timeline.SCALE_OUT_SPARE_POD_START
        + timeline.ENGINE_START
        + timeline.SCALE_OUT_REPLICA_READY
    )
    assert growth.spare_minutes == pytest.approx(2.7)
    names = [what for what, _, _ in growth.spare_steps]
    assert names[-1] == "replica serves" and "pull" not in " ".join(names)
    assert growth.spare_minutes is not None and growth.spare_minutes < growth.minutes
    for doc in ("cold-start.md", "scaling.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert f"**{growth.spare_minutes:.1f} minutes** on a warm spare" in text, doc


def test_the_settings_page_documents_the_setting() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| `gpuWarmSpareNodes` |")]
    assert "| `0` |" in row and "scaling.md" in row
    assert yaml.safe_load((ROOT / "cdk.json").read_text())["context"]["gpuWarmSpareNodes"] == 0
