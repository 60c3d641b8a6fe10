"""Configuration: defaults, parsing of -c strings, and one failing case per rule."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from tests.synth import cdk_json_context


def test_cdk_json_states_exactly_the_dataclass_defaults() -> None:
    settings = {k: v for k, v in cdk_json_context().items() if not k.startswith("@")}
    assert settings == AppConfig.field_defaults()


def test_walkthrough_defaults() -> None:
    c = AppConfig.from_context(cdk_json_context())
    assert (c.cluster_name, c.kubernetes_version, c.namespace) == (
        "ray-llm-multinode",
        "1.36",
        "inference",
    )
    assert (c.system_node_type, c.system_node_count) == ("m7i.xlarge", 1)
    assert (c.gpu_node_type, c.gpu_node_count, c.gpu_nodegroup_name) == (
        "g6.8xlarge",
        2,
        "gpu-workers",
    )
    assert (c.model_id, c.model_source, c.application_name) == (
        "qwen3.5-9b",
        "Qwen/Qwen3.5-9B",
        "qwen",
    )
    assert (c.max_model_len, c.dtype, c.gpu_memory_utilization, c.enforce_eager) == (
        4096,
        "bfloat16",
        0.9,
        True,
    )
    assert (c.kv_backend, c.prefill_replicas, c.decode_replicas) == ("LIBFABRIC", 1, 1)
    assert c.readiness_timeout_minutes == 55
    assert c.image_uri("eu-west-1") == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    )
    assert c.kubectl_layer_package == "aws-cdk.lambda-layer-kubectl-v36"


def test_command_line_strings_are_parsed_to_their_types() -> None:
    c = AppConfig.from_context(
        {
            "gpuNodeCount": "3",
            "enforceEager": "false",
            "gpuMemoryUtilization": "0.8",
            "adminPrincipalArns": (
                "arn:aws:iam::123456789012:role/A,arn:aws:iam::123456789012:user/b"
            ),
            "endpointPublicCidrs": '["198.51.100.0/24"]',
        }
    )
    assert c.gpu_node_count == 3 and c.enforce_eager is False and c.gpu_memory_utilization == 0.8
    assert c.admin_principal_arns == (
        "arn:aws:iam::123456789012:role/A",
        "arn:aws:iam::123456789012:user/b",
    )
    assert c.endpoint_public_cidrs == ("198.51.100.0/24",)


def test_cdk_owned_and_pipeline_keys_are_ignored() -> None:
    c = AppConfig.from_context(
        {"@aws-cdk/core:foo": True, "aws:cdk:enable-path-metadata": True, "environments": {}}
    )
    assert c == DEFAULTS


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.gpu_node_count = 4  # type: ignore[misc]


# (context overrides, key named in the error, text that must appear)
BAD = [
    ({"gpuNodeType": "m7i.8xlarge"}, "gpuNodeType", "not an NVIDIA GPU instance type with EFA"),
    ({"gpuNodeType": "g6.2xlarge"}, "gpuNodeType", "has no EFA interface"),
    ({"gpuNodeType": "g5.xlarge"}, "gpuNodeType", "has no EFA interface"),
    ({"gpuNodeCount": 1, "decodeReplicas": 0}, "gpuNodeCount", "at least 2"),
    ({"prefillReplicas": 2}, "decodeReplicas", "exceeds gpuNodeCount 2"),
    ({"decodeReplicas": 0}, "decodeReplicas", "at least 1"),
    ({"prefillReplicas": -1}, "prefillReplicas", "at least 1"),
    ({"kubernetesVersion": "1.31"}, "kubernetesVersion", "EKS no longer supports it"),
    ({"kubernetesVersion": "1.33"}, "kubernetesVersion", "no kubectl layer"),
    ({"kubernetesVersion": "1.40"}, "kubernetesVersion", "does not offer it yet"),
    ({"kubernetesVersion": "latest"}, "kubernetesVersion", "not a Kubernetes minor version"),
    ({"rayServiceName": "r" * 48}, "rayServiceName", "the limit is 47"),
    ({"rayServiceName": "Ray_LLM"}, "rayServiceName", "not a valid Kubernetes name"),
    ({"clusterName": "c" * 101}, "clusterName", "the limit is 100"),
    ({"clusterName": "-bad"}, "clusterName", "not a valid EKS name"),
    ({"namespace": "Inference"}, "namespace", "not a valid Kubernetes name"),
    ({"namespace": ""}, "namespace", "must not be empty"),
    ({"gpuNodegroupName": "gpu workers"}, "gpuNodegroupName", "not a valid EKS name"),
    ({"gpuMemoryUtilization": 0}, "gpuMemoryUtilization", "(0, 1]"),
    ({"gpuMemoryUtilization": 1.01}, "gpuMemoryUtilization", "(0, 1]"),
    ({"maxModelLen": 0}, "maxModelLen", "3548..1048576"),
    ({"maxModelLen": "4k"}, "maxModelLen", "whole number"),
    ({"systemNodeCount": 0}, "systemNodeCount", "1..20"),
    ({"dtype": "int4"}, "dtype", "must be one of"),
    ({"kvBackend": "TCP"}, "kvBackend", "LIBFABRIC (EFA) or UCX"),
    ({"servingMode": "disaggregated"}, "servingMode", "must be pd (prefill and decode"),
    ({"servingMode": "aggregated", "kvBackend": "UCX"}, "kvBackend", "moves no KV cache"),
    ({"readinessTimeoutMinutes": 56}, "readinessTimeoutMinutes", "after one hour"),
    ({"readinessTimeoutMinutes": 9}, "readinessTimeoutMinutes", "10..55"),
    ({"region": "us-west-2", "gpuAz": "us-east-1a"}, "gpuAz", "is not in region us-west-2"),
    ({"gpuAz": "west"}, "gpuAz", "not an Availability Zone name"),
    ({"region": "Oregon"}, "region", "AWS region"),
    ({"account": "1234"}, "account", "12-digit"),
    ({"enforceEager": "yes"}, "enforceEager", "true or false"),
    ({"systemNodeType": "m7g.xlarge"}, "systemNodeType", "x86_64"),
    ({"systemNodeType": "m7i.large"}, "systemNodeType", "need at least 4 vCPU"),
    ({"dlcImage": "ray:latest"}, "dlcImage", "full image reference"),
    ({"kuberayVersion": "1.1.0"}, "kuberayVersion", "1.6.0 or newer"),
    ({"rayVersion": "2.58"}, "rayVersion", "version like 2.58.0"),
    ({"vpcCniAddonVersion": "1.23.0"}, "vpcCniAddonVersion", "describe-addon-versions"),
    ({"vpcCniAddonVersion": "v1.13.9-eksbuild.9"}, "vpcCniAddonVersion", "v1.14.0 or newer"),
    ({"modelSource": "not a repo"}, "modelSource", "Hugging Face repo"),
    ({"modelId": "bad id"}, "modelId", "not a valid model id"),
    ({"adminPrincipalArns": ["admin"]}, "adminPrincipalArns", "IAM role or user ARN"),
    ({"endpointPublicCidrs": ["0.0.0.0/0"]}, "endpointPublicCidrs", "to the internet"),
    ({"endpointPublicCidrs": ["1.2.3.4"]}, "endpointPublicCidrs", "IPv4 CIDR"),
    ({"endpointPublicCidrs": ["1.2.3.4/33"]}, "endpointPublicCidrs", "IPv4 CIDR"),
    ({"vpcCidr": "10.0.0.0/8"}, "vpcCidr", "/16 to /18"),
    ({"gpuRootVolumeGib": 20}, "gpuRootVolumeGib", "0 (automatic) or 30..16384"),
    (
        {"gpuRootVolumeGib": 60, "gpuLocalStorage": "none"},
        "gpuRootVolumeGib",
        "100..16384 GiB to hold the image and weights",
    ),
    ({"systemRootVolumeGib": 50}, "systemRootVolumeGib", "80..16384"),
    ({"gpuLocalStorage": "raid10"}, "gpuLocalStorage", "auto (NVMe RAID0"),
    ({"gpuLocalStorage": "none", "gpuRootVolumeIops": 2000}, "gpuRootVolumeIops", "3000..80000"),
    (
        {"gpuLocalStorage": "none", "gpuRootVolumeGib": 100, "gpuRootVolumeIops": 60000},
        "gpuRootVolumeIops",
        "raise gpuRootVolumeGib to 120",
    ),
    (
        {"gpuLocalStorage": "none", "gpuRootVolumeThroughput": 2001},
        "gpuRootVolumeThroughput",
        "125..2000",
    ),
    (
        {"gpuLocalStorage": "none", "gpuRootVolumeIops": 3000, "gpuRootVolumeThroughput": 1000},
        "gpuRootVolumeThroughput",
        "raise gpuRootVolumeIops to 4000",
    ),
    ({"gpuCapacityReservationId": "cr-123"}, "gpuCapacityReservationId", "cr-0123456789abcdef0"),
    ({"gpuPlacementGroupName": "bad name!"}, "gpuPlacementGroupName", "existing cluster"),
    ({"gpuCapacityWaitMinutes": 0}, "gpuCapacityWaitMinutes", "1..35"),
    ({"gpuCapacityWaitMinutes": 36}, "gpuCapacityWaitMinutes", "1..35"),
    ({"modelS3Uri": "s3://bucket"}, "modelS3Uri", "s3://<bucket>/<prefix>"),
    ({"modelS3Uri": "https://bucket/x"}, "modelS3Uri", "s3://<bucket>/<prefix>"),
    ({"modelS3Uri": "s3://Bucket_Name/x"}, "modelS3Uri", "s3://<bucket>/<prefix>"),
    ({"modelSource": "s3://bucket/qwen"}, "modelSource", "set modelS3Uri"),
    ({"hfTokenSecretArn": "hf-token"}, "hfTokenSecretArn", "Secrets Manager secret ARN"),
    (
        {
            "region": "us-west-2",
            "hfTokenSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hf-AbCdEf",
        },
        "hfTokenSecretArn",
        "use one in us-west-2",
    ),
    (
        {
            "modelS3Uri": "s3://models/qwen",
            "hfTokenSecretArn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-AbCdEf",
        },
        "hfTokenSecretArn",
        "set only one of modelS3Uri and hfTokenSecretArn",
    ),
    ({"awsCliImage": "public.ecr.aws/aws-cli/aws-cli:latest"}, "awsCliImage", "pin a version"),
    ({"awsCliImage": ""}, "awsCliImage", "full image reference"),
    ({"prefetchImage": "python:3.12-slim"}, "prefetchImage", "full image reference"),
    (
        {"prefetchImage": "public.ecr.aws/docker/library/python:latest"},
        "prefetchImage",
        "pin a version",
    ),
    (
        {"dlcImage": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray:latest"},
        "dlcImage",
        "IfNotPresent",
    ),
    ({"logRetentionDays": 10}, "logRetentionDays", "CloudWatch Logs retention"),
    ({"gpuNodeCoun": 3}, "gpuNodeCoun", "did you mean 'gpuNodeCount'"),
]


@pytest.mark.parametrize(("overrides", "key", "text"), BAD, ids=[f"{b[1]}-{b[0]}" for b in BAD])
def test_bad_value_fails_with_key_value_and_fix(overrides, key, text) -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({**cdk_json_context(), **overrides})
    lines = str(err.value).splitlines()
    mine = [line for line in lines if line.startswith(f"context key '{key}' = ")]
    assert mine, f"no line names {key}: {lines}"
    assert "(fix it with `ray-pd-eks settings --set " in mine[0]
    if text:
        assert text in mine[0]
    if key in overrides:  # the line shows the bad value as it was read
        assert any(f"= {shown}: " in line for line in mine for shown in _shown(key, overrides[key]))


def _shown(key: str, raw: object) -> list[str]:
    """How a problem line may show ``raw``: parsed to the field's type, a list entry by entry."""
    if isinstance(raw, list):
        return [json.dumps(entry) for entry in raw]
    field = AppConfig.__dataclass_fields__.get(AppConfig.context_keys().get(key, ""))
    ftype = str(field.type) if field else ""
    if isinstance(raw, int) and not isinstance(raw, bool) and ftype == "float":
        return [json.dumps(float(raw))]
    if isinstance(raw, str) and ftype in ("int", "float"):
        try:
            return [json.dumps({"int": int, "float": float}[ftype](raw)), json.dumps(raw)]
        except ValueError:
            return [json.dumps(raw)]
    return [json.dumps(raw.strip() if isinstance(raw, str) else raw)]


def test_every_problem_is_reported_at_once_one_line_each() -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({"dtype": "int4", "kvBackend": "TCP", "maxModelLen": -1})
    keys = re.findall(r"^context key '(\w+)'", str(err.value), flags=re.M)
    assert sorted(keys) == ["dtype", "kvBackend", "maxModelLen"]


def test_with_overrides_validates_like_the_original() -> None:
    assert DEFAULTS.with_overrides({"gpuNodeCount": 4}).gpu_node_count == 4
    with pytest.raises(ConfigError, match="gpuNodeCount"):
        DEFAULTS.with_overrides({"gpuNodeCount": 1})


def test_application_name_derives_from_the_model_id() -> None:
    assert DEFAULTS.with_overrides({"modelId": "llama-3.1-8b"}).application_name == "llama"
    assert DEFAULTS.with_overrides({"modelId": "3b-model"}).application_name == "llm"


def test_local_storage_follows_the_instance_type_table() -> None:
    assert DEFAULTS.uses_local_nvme and DEFAULTS.gpu_root_gib == 50
    assert DEFAULTS.node_cache_dir == "/mnt/k8s-disks/0/ray-pd-eks/model-cache"
    ebs = DEFAULTS.with_overrides({"gpuLocalStorage": "none"})
    assert not ebs.uses_local_nvme and ebs.gpu_root_gib == 200
    assert ebs.node_cache_dir == "/var/lib/ray-pd-eks/model-cache"
    assert DEFAULTS.with_overrides({"gpuRootVolumeGib": 80}).gpu_root_gib == 80


def test_raid0_is_refused_for_a_type_without_instance_store(monkeypatch) -> None:
    from ray_pd_eks import instance_types

    ebs_only = instance_types.InstanceSpec("x9.8xlarge", 32, 128, 1, 1, "L4", nvme_gb=0)
    monkeypatch.setitem(instance_types.EFA_GPU_TYPES, ebs_only.name, ebs_only)
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides({"gpuNodeType": "x9.8xlarge", "gpuLocalStorage": "raid0"})
    assert str(err.value) == (
        "context key 'gpuLocalStorage' = \"raid0\": x9.8xlarge has no instance-store NVMe; use "
        "auto or none, or a type with NVMe such as g6.8xlarge (fix it with `ray-pd-eks settings "
        "--set gpuLocalStorage=...`, or -c gpuLocalStorage=... for one command)"
    )
    auto = DEFAULTS.with_overrides({"gpuNodeType": "x9.8xlarge"})
    assert not auto.uses_local_nvme and auto.gpu_root_gib == 200


def test_every_supported_gpu_type_has_room_for_image_and_weights_on_nvme() -> None:
    from ray_pd_eks.instance_types import EFA_GPU_TYPES

    assert EFA_GPU_TYPES["g6.8xlarge"].nvme_gb == 900
    for spec in EFA_GPU_TYPES.values():
        assert spec.nvme_gb >= 100 * spec.gpus, spec.name  # ~40 GB image + weights per GPU


def test_s3_staging_and_token_derived_values() -> None:
    staged = DEFAULTS.with_overrides({"modelS3Uri": "s3://my-models/qwen/Qwen3.5-9B/"})
    assert (staged.model_s3_bucket, staged.model_s3_prefix) == ("my-models", "qwen/Qwen3.5-9B")
    assert staged.staged_model_dir.startswith("s3/qwen3.5-9b-")
    other = DEFAULTS.with_overrides({"modelS3Uri": "s3://my-models/qwen/v2"})
    assert other.staged_model_dir != staged.staged_model_dir  # a new URI, a fresh copy
    assert staged.needs_model_access and not DEFAULTS.needs_model_access
    full = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-token-AbCdEf"
    partial = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf"
    assert DEFAULTS.with_overrides({"hfTokenSecretArn": full}).hf_token_secret_resource == full
    token = DEFAULTS.with_overrides({"hfTokenSecretArn": partial})
    assert token.hf_token_secret_resource == partial + "-??????"


def test_serving_mode_accepts_both_modes_and_only_pd_uses_the_efa_transport() -> None:
    assert DEFAULTS.serving_mode == "pd" and DEFAULTS.is_pd and DEFAULTS.uses_efa_transport
    aggregated = DEFAULTS.with_overrides({"servingMode": "aggregated"})
    assert not aggregated.is_pd and not aggregated.uses_efa_transport
    assert aggregated.kv_backend == "LIBFABRIC"  # the default stays accepted
    ucx = DEFAULTS.with_overrides({"kvBackend": "UCX"})
    assert ucx.is_pd and not ucx.uses_efa_transport
    # The replica limit is the same in both modes: one engine per GPU node.
    at_limit = {"servingMode": "aggregated", "gpuNodeCount": 3, "decodeReplicas": 2}
    assert DEFAULTS.with_overrides(at_limit).worker_replicas == 3
    with pytest.raises(ConfigError, match="exceeds gpuNodeCount 3"):
        DEFAULTS.with_overrides({**at_limit, "prefillReplicas": 2})


def test_vpc_cni_addon_version_accepts_the_first_version_with_network_policies() -> None:
    oldest = DEFAULTS.with_overrides({"vpcCniAddonVersion": "v1.14.0-eksbuild.1"})
    assert oldest.vpc_cni_addon_version == "v1.14.0-eksbuild.1"


def test_prefetch_image_accepts_a_tag_or_a_digest() -> None:
    digest = "public.ecr.aws/docker/library/python@sha256:" + "a" * 64
    for image in ("public.ecr.aws/docker/library/python:3.12.12-slim", digest):
        assert AppConfig.from_context({"prefetchImage": image}).prefetch_image == image


@pytest.mark.parametrize(
    ("context", "line"),
    [
        ({"gpuNodeCount": True}, "context key 'gpuNodeCount' = true: expected a whole number"),
        ({"gpuNodeCount": "2.5"}, "context key 'gpuNodeCount' = \"2.5\": expected a whole number"),
        ({"gpuMemoryUtilization": False}, "= false: expected a number"),
        ({"gpuMemoryUtilization": "most"}, '= "most": expected a number'),
        ({"enforceEager": "yes"}, '= "yes": expected true or false'),
        ({"clusterName": 7}, "context key 'clusterName' = 7: expected a string"),
        (
            {"adminPrincipalArns": ["arn:aws:iam::123456789012:role/A", 7]},
            "expected a list of strings (JSON list or comma-separated)",
        ),
    ],
)
def test_unparseable_values_say_what_was_expected(context: dict[str, object], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    (problem,) = str(err.value).splitlines()
    # The reason ends where the fix begins: nothing added to it, nothing left out.
    assert f"{line} (fix it with `ray-pd-eks settings --set {next(iter(context))}=...`" in problem


EKS_NAME = "EKS name (letters, digits, '-' and '_', starting with a letter or digit)"
GPU_EXAMPLES = "g6.8xlarge, g6e.8xlarge, g5.8xlarge, p4d.24xlarge or p5.48xlarge"


@pytest.mark.parametrize(
    ("context", "lines"),
    [
        # The replica check runs up to gpuNodeCount's own limit, and not past it.
        (
            {"gpuNodeCount": 64, "decodeReplicas": 64},
            [
                "decodeReplicas = 64: prefillReplicas + decodeReplicas = 65 exceeds gpuNodeCount "
                "64; each replica needs its own GPU node: raise gpuNodeCount or lower the replicas"
            ],
        ),
        (
            {"gpuNodeCount": 65, "decodeReplicas": 65},
            ["gpuNodeCount = 65: at most 64 nodes in one group"],
        ),
        (
            {"gpuNodeCount": 2, "prefillReplicas": 1, "decodeReplicas": 2},
            [
                "decodeReplicas = 2: prefillReplicas + decodeReplicas = 3 exceeds gpuNodeCount 2; "
                "each replica needs its own GPU node: raise gpuNodeCount or lower the replicas"
            ],
        ),
        ({"prefillReplicas": 0}, ["prefillReplicas = 0: must be at least 1"]),
        ({"tensorParallelSize": 0}, ["tensorParallelSize = 0: must be at least 1"]),
        ({"systemNodeCount": 0}, ["systemNodeCount = 0: must be 1..20"]),
        (
            {"maxModelLen": 0},
            [
                "maxModelLen = 0: must be 3548..1048576 tokens: the readiness check's KV "
                "integrity probe sends a prompt of up to 3500 tokens (over a hundred KV blocks) "
                "and takes a 48-token answer"
            ],
        ),
        (
            {"dtype": "fp8"},
            ['dtype = "fp8": must be one of auto, bfloat16, float16, half, float32, float'],
        ),
        (
            {"gpuNodeType": "g4dn.xlarge"},
            [
                'gpuNodeType = "g4dn.xlarge": this GPU type has no EFA interface; use an '
                f"EFA-capable type such as {GPU_EXAMPLES}"
            ],
        ),
        (
            {"gpuNodeType": "m7i.xlarge"},
            [
                'gpuNodeType = "m7i.xlarge": not an NVIDIA GPU instance type with EFA; use one '
                f"such as {GPU_EXAMPLES}"
            ],
        ),
        (
            # Enough memory, too few vCPUs: either shortfall rejects the type.
            {"systemNodeType": "r7i.large"},
            [
                'systemNodeType = "r7i.large": has 2 vCPU / 16 GiB; the Ray head and KubeRay need '
                "at least 4 vCPU and 16 GiB"
            ],
        ),
        (
            {"gpuNodegroupName": "gpu workers"},
            [
                f'gpuNodegroupName = "gpu workers": is not a valid {EKS_NAME}, to which the AZ '
                "and a hash are appended"
            ],
        ),
        (
            {"gpuRootVolumeGib": 29},
            [
                "gpuRootVolumeGib = 29: must be 0 (automatic) or 30..16384 GiB to hold the OS "
                "(NVMe holds the rest)"
            ],
        ),
        (
            {"gpuRootVolumeGib": 99, "gpuLocalStorage": "none"},
            [
                "gpuRootVolumeGib = 99: must be 0 (automatic) or 100..16384 GiB to hold the "
                "image and weights"
            ],
        ),
    ],
    ids=lambda v: "-".join(f"{k}={w}" for k, w in v.items()) if isinstance(v, dict) else "",
)
def test_rejection_lines_word_for_word(context: dict[str, object], lines: list[str]) -> None:
    """The whole line of each rule: the setting, the value, why, and nothing else."""
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    assert str(err.value).splitlines() == [
        f"context key '{line.split(' = ', 1)[0]}' = {line.split(' = ', 1)[1]} (fix it with "
        f"`ray-pd-eks settings --set {line.split(' = ', 1)[0]}=...`, or -c "
        f"{line.split(' = ', 1)[0]}=... for one command)"
        for line in lines
    ]


def test_every_unparseable_value_has_its_own_line() -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({"gpuNodeCount": "x", "enforceEager": "maybe"})
    assert str(err.value).split("\n") == [
        "context key 'gpuNodeCount' = \"x\": expected a whole number (fix it with "
        "`ray-pd-eks settings --set gpuNodeCount=...`, or -c gpuNodeCount=... for one command)",
        "context key 'enforceEager' = \"maybe\": expected true or false (fix it with "
        "`ray-pd-eks settings --set enforceEager=...`, or -c enforceEager=... for one command)",
    ]


def test_keys_cdk_owns_are_ignored() -> None:
    # "@..." (feature flags, with or without a colon) and "aws:cdk:..." are CDK's own keys.
    config = AppConfig.from_context({"@aws-cdk/custom-flag": True, "aws:cdk:x": 1})
    assert config == DEFAULTS


@pytest.mark.parametrize(("raw", "value"), [("true", True), (" TRUE ", True), ("False", False)])
def test_booleans_from_the_command_line(raw: str, value: bool) -> None:
    assert AppConfig.from_context({"enforceEager": raw}).enforce_eager is value


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-west-2", "763104351884.dkr.ecr.us-west-2.amazonaws.com"),
        ("af-south-1", "626614931356.dkr.ecr.af-south-1.amazonaws.com"),
        ("ap-east-1", "871362719292.dkr.ecr.ap-east-1.amazonaws.com"),
        ("me-south-1", "217643126080.dkr.ecr.me-south-1.amazonaws.com"),
        # Taipei has an account of its own, not the default one.
        ("ap-east-2", "975050140332.dkr.ecr.ap-east-2.amazonaws.com"),
        ("ap-southeast-6", "633930458069.dkr.ecr.ap-southeast-6.amazonaws.com"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_default_image_comes_from_the_regions_dlc_registry(region: str, registry: str) -> None:
    assert DEFAULTS.image_uri(region) == f"{registry}/ray:serve-llm-cuda-v1.0"


@pytest.mark.parametrize("region", ["us-gov-west-1", "us-gov-east-1"])
def test_a_region_without_a_dlc_registry_is_refused_unless_dlc_image_is_set(region: str) -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({"region": region})
    assert (
        f"context key 'region' = \"{region}\": has no AWS Deep Learning Containers registry"
        in str(err.value)
    )
    assert "set dlcImage" in str(err.value)
    image = f"111122223333.dkr.ecr.{region}.amazonaws.com/ray:v1"
    assert AppConfig.from_context({"region": region, "dlcImage": image}).image_uri(region) == image


def test_a_region_with_both_registries_is_accepted_one_without_eks_images_refused() -> None:
    assert AppConfig.from_context({"region": "us-west-2"}).region == "us-west-2"
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({"region": "us-iso-east-1"})
    assert "context key 'region' = \"us-iso-east-1\": has no Amazon EKS image registry" in str(
        err.value
    )
