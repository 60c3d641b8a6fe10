"""Scale out: decode replicas that follow the load (Serve autoscaling, KubeRay's in-tree
autoscaler) on a GPU node group with a range (the Cluster Autoscaler), and the defaults that
keep today's fixed 1 prefill + 1 decode on 2 nodes. The synthesized checks use ``variant_app``
(decode 2..3 replicas, 3..4 GPU nodes, Kubernetes 1.35, weights staged from S3)."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
import yaml

from pd_constructs.serving.workload import cluster_spec_hash, render_rayservice
from ray_pd_eks import lambda_code
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from tests.fakes.kube_api import (
    GPU_NODE_A,
    GPU_NODE_B,
    HEAD_POD,
    SYSTEM_NODE,
    WORKER_IP_A,
    WORKER_IP_B,
    WORKER_POD_A,
    WORKER_POD_B,
    make_pod,
)
from tests.synth import Synthesized, resolve

SCALING = DEFAULTS.with_overrides({"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4})


def _cluster(config: AppConfig) -> dict[str, Any]:
    return dict(render_rayservice(config, image="img:1")["spec"]["rayClusterConfig"])


def _deployment_configs(config: AppConfig) -> dict[str, Any]:
    rs = render_rayservice(config, image="img:1")
    (app,) = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"]
    return {phase: app["args"][phase]["deployment_config"] for phase in PHASES}


PHASES = ("prefill_config", "decode_config")


# -- the defaults stay fixed --


def test_defaults_keep_a_fixed_pool_of_one_prefill_one_decode_on_two_nodes() -> None:
    assert (DEFAULTS.decode_min, DEFAULTS.decode_max) == (1, 1)
    assert (DEFAULTS.gpu_node_min, DEFAULTS.gpu_node_max) == (2, 2)
    assert not DEFAULTS.decode_autoscales and not DEFAULTS.gpu_nodes_autoscale
    assert _deployment_configs(DEFAULTS) == {
        "prefill_config": {"num_replicas": 1},
        # Decode streams the answers: it drains for the longest one (tests/test_engine.py).
        "decode_config": {"num_replicas": 1, "graceful_shutdown_timeout_s": 822},
    }
    cluster = _cluster(DEFAULTS)
    assert cluster["enableInTreeAutoscaling"] is False
    assert "autoscalerOptions" not in cluster
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    assert "cluster-autoscaler.kubernetes.io/safe-to-evict" not in (
        group["template"]["metadata"].get("annotations") or {}
    )
    head = cluster["headGroupSpec"]["template"]["spec"]["serviceAccountName"]
    assert head == group["template"]["spec"]["serviceAccountName"] == "default"


def test_a_fixed_deployment_keeps_its_ray_cluster_spec_hash() -> None:
    # Widening the node range alone changes no decode replica: the hash (and the running Ray
    # cluster) changes only through the worker annotation that protects its nodes.
    assert cluster_spec_hash(DEFAULTS) == cluster_spec_hash(
        DEFAULTS.with_overrides({"decodeMinReplicas": 1, "decodeMaxReplicas": 1})
    )


# -- decode follows the load --


def test_decode_gets_an_explicit_autoscaling_config_and_prefill_stays_fixed() -> None:
    configs = _deployment_configs(SCALING)
    assert configs["prefill_config"] == {"num_replicas": 1}
    # Ray Serve refuses num_replicas beside an autoscaling_config.
    assert configs["decode_config"] == {
        "autoscaling_config": {
            "min_replicas": 1,
            "initial_replicas": 1,
            "max_replicas": 3,
            "target_ongoing_requests": 16,
            "upscale_delay_s": 30,
            "downscale_delay_s": 600,
        },
        "graceful_shutdown_timeout_s": 822,
    }


def test_settings_flow_into_the_autoscaling_config() -> None:
    config = DEFAULTS.with_overrides(
        {
            "gpuNodeCount": 4,
            "gpuNodeMaxCount": 6,
            "decodeReplicas": 2,
            "decodeMinReplicas": 1,
            "decodeMaxReplicas": 5,
            "decodeTargetOngoingRequests": 32,
            "decodeUpscaleDelaySeconds": 10,
            "decodeDownscaleDelaySeconds": 900,
        }
    )
    assert _deployment_configs(config)["decode_config"]["autoscaling_config"] == {
        "min_replicas": 1,
        "initial_replicas": 2,
        "max_replicas": 5,
        "target_ongoing_requests": 32,
        "upscale_delay_s": 10,
        "downscale_delay_s": 900,
    }
    (group,) = _cluster(config)["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (3, 2, 6)


def test_kuberay_in_tree_autoscaler_with_worker_bounds_of_the_replicas() -> None:
    cluster = _cluster(SCALING)
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["autoscalerOptions"]["upscalingMode"] == "Default"
    assert cluster["autoscalerOptions"]["idleTimeoutSeconds"] == 60
    (group,) = cluster["workerGroupSpecs"]
    # 1 prefill + 1..3 decode workers, starting at 1 + 1.
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 4)


def test_the_head_has_its_own_account_for_the_autoscaler_role() -> None:
    cluster = _cluster(SCALING)
    (group,) = cluster["workerGroupSpecs"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "ray-llm-ray-head"
    # The autoscaler sidecar calls the Kubernetes API with a token only it mounts (below);
    # the kubelet mounts none into any container of the head, and the workers get none.
    assert head["automountServiceAccountToken"] is False
    assert group["template"]["spec"]["serviceAccountName"] == "default"
    assert group["template"]["spec"]["automountServiceAccountToken"] is False
    fixed = _cluster(DEFAULTS)["headGroupSpec"]["template"]["spec"]
    assert fixed["automountServiceAccountToken"] is False


def test_with_model_access_the_sidecar_gets_no_aws_credentials() -> None:
    staged = SCALING.with_overrides({"modelS3Uri": "s3://models/qwen/Qwen3.5-9B"})
    cluster = _cluster(staged)
    head = cluster["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert head["eks.amazonaws.com/skip-containers"] == "ray-head,autoscaler"
    (group,) = cluster["workerGroupSpecs"]
    workers = group["template"]["metadata"]["annotations"]
    # The protection joins the credential annotation instead of replacing it.
    assert workers["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert "eks.amazonaws.com/skip-containers" in workers


@pytest.mark.parametrize(
    "overrides", [{"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4}, {"gpuNodeMaxCount": 4}]
)
def test_workers_are_never_evicted_by_the_cluster_autoscaler(overrides: dict[str, Any]) -> None:
    (group,) = _cluster(DEFAULTS.with_overrides(overrides))["workerGroupSpecs"]
    annotations = group["template"]["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"


# -- validation --


def test_decode_max_beyond_what_the_node_max_can_host_fails_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides({"decodeMaxReplicas": 4, "gpuNodeMaxCount": 4})
    (line,) = str(err.value).splitlines()
    assert line.startswith("context key 'decodeMaxReplicas' = 4:")
    assert "raise gpuNodeMaxCount or lower decodeMaxReplicas" in line


def test_decode_autoscaling_needs_the_pd_app() -> None:
    with pytest.raises(ConfigError, match="context key 'decodeMaxReplicas' = 2: decode autoscal"):
        DEFAULTS.with_overrides(
            {"servingMode": "aggregated", "decodeMaxReplicas": 2, "gpuNodeCount": 3}
        )


# -- synthesized: the node group, the Cluster Autoscaler, the head's account --


def _gpu_nodegroup(app: Synthesized) -> dict[str, Any]:
    return app.only("GpuNodes", "AWS::EKS::Nodegroup")["Properties"]


def test_node_group_size_follows_the_settings(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    assert _gpu_nodegroup(default_app)["ScalingConfig"] == {
        "MinSize": 2,
        "DesiredSize": 2,
        "MaxSize": 2,
    }
    ng = _gpu_nodegroup(variant_app)
    assert ng["ScalingConfig"] == {"MinSize": 3, "DesiredSize": 3, "MaxSize": 4}
    assert ng["Labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-l4"
    assert "k8s.amazonaws.com/accelerator" not in _gpu_nodegroup(default_app)["Labels"]


def _autoscaler_charts(app: Synthesized) -> list[dict[str, Any]]:
    return [
        r["Properties"]
        for r in app.resources("GpuAddons", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == "cluster-autoscaler"
    ]


def test_cluster_autoscaler_only_when_the_node_group_scales(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    assert _autoscaler_charts(default_app) == []
    (chart,) = _autoscaler_charts(variant_app)
    # The vendored chart 9.59.0 (assets/charts/), installed in kube-system.
    assert (chart["Release"], chart["Namespace"]) == ("cluster-autoscaler", "kube-system")
    assert "Repository" not in chart and "ChartAssetURL" in chart
    values = json.loads(resolve(chart["Values"]))
    assert values["image"]["tag"] == "v1.35.2"  # the variant runs Kubernetes 1.35
    assert values["awsRegion"] == "us-west-2"
    assert values["rbac"]["serviceAccount"] == {"create": False, "name": "cluster-autoscaler"}
    assert values["nodeSelector"] == {"role": "system"}
    enabled, owned, nodegroup = values["autoDiscovery"]["tags"]
    assert (enabled, owned) == (
        "k8s.io/cluster-autoscaler/enabled",
        "k8s.io/cluster-autoscaler/ray-llm-multinode",
    )
    # Exactly the GPU node group: the node-template label tag that the GPU stack's tagger puts
    # on its Auto Scaling group, and on no other (the group's name follows the deploy-time AZ,
    # which the GpuAddons stack cannot import).
    assert nodegroup == "k8s.io/cluster-autoscaler/node-template/label/role=gpu-worker"
    (tagger,) = variant_app.resources("GpuNodes", "Custom::GpuNodeTemplateTags").values()
    key, value = nodegroup.split("=")
    assert json.loads(tagger["Properties"]["Tags"])[key] == value
    assert _gpu_nodegroup(variant_app)["Labels"]["role"] == value
    assert "GpuNodes" not in json.dumps(variant_app.templates["GpuAddons"])


def _autoscaler_statements(app: Synthesized) -> list[dict[str, Any]]:
    (association,) = [
        a["Properties"]
        for a in app.resources("GpuAddons", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "cluster-autoscaler"
    ]
    assert association["Namespace"] == "kube-system"
    role = association["RoleArn"]["Fn::GetAtt"][0]
    statements: list[dict[str, Any]] = []
    for policy in app.resources("GpuAddons", "AWS::IAM::Policy").values():
        if [r.get("Ref") for r in policy["Properties"]["Roles"]] == [role]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_autoscaler_may_resize_only_this_node_groups_auto_scaling_group(
    variant_app: Synthesized,
) -> None:
    statements = _autoscaler_statements(variant_app)
    mutating = [
        s
        for s in statements
        if any(a in ("autoscaling:SetDesiredCapacity",) for a in _list(s["Action"]))
    ]
    (scale,) = mutating
    assert sorted(_list(scale["Action"])) == [
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    assert ":autoScalingGroup:*" in resolve(scale["Resource"])
    assert scale["Condition"]["StringEquals"] == {
        "aws:ResourceTag/eks:cluster-name": "ray-llm-multinode"
    }
    # The GPU node groups of the configured prefix (gpuNodegroupName-<AZ>-<hash>): the
    # system group ("system") and any other cluster's groups are out.
    name = resolve(_gpu_nodegroup(variant_app)["NodegroupName"])
    assert name.startswith("gpu-workers-")
    assert scale["Condition"]["StringLike"] == {
        "aws:ResourceTag/eks:nodegroup-name": "gpu-workers-*"
    }
    assert fnmatch.fnmatchcase(name, "gpu-workers-*")
    assert not fnmatch.fnmatchcase("system", "gpu-workers-*")
    unconditioned = [s for s in statements if "Condition" not in s]
    for statement in unconditioned:
        actions = _list(statement["Action"])
        assert all(":Describe" in a or ":Get" in a for a in actions), actions
    (describe_ng,) = [s for s in statements if _list(s["Action"]) == ["eks:DescribeNodegroup"]]
    assert "nodegroup/ray-llm-multinode/gpu-workers-*/*" in resolve(describe_ng["Resource"])


def _list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_head_account_exists_before_the_rayservice_with_the_model_fetch_role(
    variant_app: Synthesized,
) -> None:
    resources = variant_app.templates["Workload"]["Resources"]
    (sa_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "HeadServiceAccount" in k
    ]
    (manifest,) = json.loads(resolve(resources[sa_id]["Properties"]["Manifest"]))
    assert (manifest["kind"], manifest["metadata"]["name"]) == (
        "ServiceAccount",
        "ray-llm-ray-head",
    )
    (rayservice_id,) = [k for k in resources if k.startswith("WorkloadRayService")]
    assert sa_id in resources[rayservice_id]["DependsOn"]
    associations = {
        a["Properties"]["ServiceAccount"]: a["Properties"]
        for a in variant_app.resources("Workload", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["Namespace"] == "inference"
    }
    # The head reads the staged model's config with the same role as the workers.
    assert associations["ray-llm-ray-head"]["RoleArn"] == associations["model-fetch"]["RoleArn"]


def test_readiness_expects_the_group_minimum(variant_app: Synthesized) -> None:
    props = variant_app.only("Readiness", "Custom::RayServiceReadiness")["Properties"]
    assert (props["ExpectedGpuNodes"], props["GpusPerWorker"]) == ("3", "1")


# -- readiness placement with several GPUs per worker --

placement = lambda_code.placement()


def _workers(gpus: int) -> dict[str, Any]:
    head = make_pod(HEAD_POD, node_type="head", node=SYSTEM_NODE, ip="10.0.0.30")
    a = make_pod(WORKER_POD_A, node=GPU_NODE_A, ip=WORKER_IP_A, gpus=gpus, phase="Running")
    b = make_pod(WORKER_POD_B, node=GPU_NODE_B, ip=WORKER_IP_B, gpus=gpus, phase="Running")
    return {"items": [head, a, b]}


@pytest.mark.parametrize(("gpus", "per_worker", "ok"), [(4, 4, True), (4, 1, False), (2, 4, False)])
def test_fallback_placement_counts_one_replicas_gpus_per_worker(
    gpus: int, per_worker: int, ok: bool
) -> None:
    place = placement.placement(
        _workers(gpus), serve_error="unreachable", gpus_per_worker=per_worker
    )
    assert (place.method, place.ok) == ("worker-pods", ok)
    if not ok:
        assert f"not exactly {per_worker} GPU(s) each" in place.why


# -- the chart's values ----------------------------------------------------------------------------


def test_autoscaler_values_use_only_keys_the_pinned_chart_knows() -> None:
    from pathlib import Path

    from pd_constructs.common.helm import CLUSTER_AUTOSCALER

    chart = yaml.safe_load(
        (Path(__file__).parent / "schemas" / "cluster-autoscaler-values-9.59.0.yaml").read_text()
    )
    assert CLUSTER_AUTOSCALER.version == "9.59.0"

    def unknown(ours: Any, ref: Any, prefix: str = "") -> set[str]:
        found: set[str] = set()
        for key, value in ours.items():
            path = f"{prefix}{key}"
            if key not in ref:
                found.add(path)
            elif isinstance(value, dict) and ref[key] and key != "extraArgs":
                found |= unknown(value, ref[key], path + ".")
        return found

    assert unknown(CLUSTER_AUTOSCALER.values(), chart) == set()
    assert unknown({"rbac": {"serviceAccount": {"nmae": "x"}}}, chart) == {
        "rbac.serviceAccount.nmae"
    }
    # What the construct sets in code exists in the chart too.
    for key in ("autoDiscovery", "awsRegion", "image"):
        assert key in chart
    assert {"clusterName", "tags"} <= set(chart["autoDiscovery"])


def test_a_bad_starting_size_is_reported_once_not_again_by_the_ranges() -> None:
    # Without ranges the replicas-vs-nodes rule of the starting sizes says it all.
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides({"gpuNodeCount": 2, "decodeReplicas": 2})
    assert [line.split(":")[0] for line in str(err.value).splitlines()] == [
        "context key 'decodeReplicas' = 2"
    ]


def test_only_the_autoscaler_sidecar_mounts_the_api_token() -> None:
    """The head pod carries the projected token volume; KubeRay appends autoscalerOptions'
    volumeMounts to the sidecar only (KubeRay 1.7.0 common/pod.go mergeAutoscalerOverrides),
    and no container the template itself defines (ray-head, init containers) mounts it."""
    cluster = _cluster(SCALING)
    head = cluster["headGroupSpec"]["template"]["spec"]
    (volume,) = [v for v in head["volumes"] if v["name"] == "autoscaler-api-token"]
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    assert sources[1]["configMap"] == {
        "name": "kube-root-ca.crt",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert sources[2]["downwardAPI"]["items"] == [
        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    ]
    assert cluster["autoscalerOptions"]["volumeMounts"] == [
        {
            "name": "autoscaler-api-token",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        }
    ]
    for container in [*head["containers"], *head.get("initContainers", [])]:
        mounted = {m["name"] for m in container.get("volumeMounts") or []}
        assert "autoscaler-api-token" not in mounted, container["name"]
    assert cluster["autoscalerOptions"]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # Without scaling there is no sidecar and no token volume.
    fixed = _cluster(DEFAULTS)["headGroupSpec"]["template"]["spec"]
    assert all(v["name"] != "autoscaler-api-token" for v in fixed.get("volumes") or [])
