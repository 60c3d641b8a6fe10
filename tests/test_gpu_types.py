"""Every GPU type of the supported table synthesizes a node group, and the model fits its GPUs.

Cheap on purpose: one small stack holds one EFA GPU node group per supported type, against an
imported cluster, VPC and subnet (no Stage, no kubectl provider), built once per session."""

from __future__ import annotations

import functools
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from pd_constructs.cluster.cluster import EfaGpuNodeGroup, gpu_node_config
from ray_pd_eks import instance_types
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError, config_warnings
from ray_pd_eks.config.fit import params_billions_from_name
from tests.synth import cdk_json_context

TYPES = sorted(instance_types.EFA_GPU_TYPES)


@functools.cache
def node_groups() -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(
        app, "GpuTypes", env=cdk.Environment(account="123456789012", region="us-west-2")
    )
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123",
        availability_zones=["us-west-2a"],
        private_subnet_ids=["subnet-0123"],
    )
    subnet = ec2.Subnet.from_subnet_attributes(
        stack, "Subnet", subnet_id="subnet-0123", availability_zone="us-west-2a"
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c", vpc=vpc, cluster_security_group_id="sg-0123"
    )
    for index, name in enumerate(TYPES):
        EfaGpuNodeGroup(
            stack,
            f"Gpu{index}",
            cluster=cluster,
            subnet=subnet,
            nodegroup_name=f"gpu-{index}",
            instance_type=name,
            node_count=2,
            root_volume_gib=50,
            node_config=gpu_node_config(True),
        )
    return dict(Template.from_stack(stack).to_json()["Resources"])


@pytest.mark.parametrize("name", TYPES)
def test_every_supported_gpu_type_synthesizes_an_nvidia_efa_node_group(name: str) -> None:
    resources = node_groups()
    index = TYPES.index(name)
    (group,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Nodegroup" and r["Properties"]["NodegroupName"] == f"gpu-{index}"
    ]
    assert group["AmiType"] == "AL2023_x86_64_NVIDIA"  # GPU_AMI_TYPE
    assert group["InstanceTypes"] == [name]
    template_id = group["LaunchTemplate"]["Id"]["Ref"]
    interfaces = resources[template_id]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert len(interfaces) == instance_types.EFA_GPU_TYPES[name].efa_interfaces


def test_every_supported_family_has_gpu_facts() -> None:
    for name in TYPES:
        assert instance_types.gpu_facts(name) is not None, name
    assert instance_types.gpu_facts("m7i.xlarge") is None


def config(**overrides: Any) -> AppConfig:
    """The defaults with ``overrides``; another model than the default gets a revision of its
    own (the default revision is a commit of the default model)."""
    if "modelSource" in overrides:
        overrides.setdefault("modelRevision", "main")
    return AppConfig.from_context({**cdk_json_context(), **overrides})


def problems(**overrides: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        config(**overrides)
    return str(err.value).splitlines()


def test_bfloat16_on_a_gpu_without_it_fails_synth_naming_the_fix() -> None:
    (line,) = problems(gpuNodeType="g4dn.8xlarge", dtype="bfloat16", modelSource="Qwen/Qwen3-4B")
    assert line.startswith("context key 'dtype' = \"bfloat16\": the T4 GPU of g4dn.8xlarge")
    assert "use dtype=float16" in line
    assert config(gpuNodeType="g4dn.8xlarge", dtype="float16", modelSource="Qwen/Qwen3-4B")
    assert config(gpuNodeType="g5.8xlarge", dtype="bfloat16")


@pytest.mark.parametrize(
    ("source", "billions"),
    [
        ("Qwen/Qwen3.5-9B", 9),
        ("meta-llama/Llama-3.1-8B-Instruct", 8),
        ("Qwen/Qwen3-30B-A3B", 30),
        ("mistralai/Mixtral-8x7B-v0.1", 56),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1.5),
        ("openai/gpt-oss-20b", 20),
        ("microsoft/Phi-3.5-mini-instruct", None),
    ],
)
def test_the_parameter_count_is_read_from_the_model_name(source: str, billions: float) -> None:
    assert params_billions_from_name(source) == billions


def test_a_model_too_big_for_one_gpu_fails_with_the_arithmetic() -> None:
    (line,) = problems(modelSource="Qwen/Qwen3-14B")
    assert line.startswith("context key 'modelSource' = \"Qwen/Qwen3-14B\": 14 billion parameters")
    assert (
        "need 26.1 GiB" in line and "1 x L4 22.5 GiB x gpuMemoryUtilization 0.9 = 20.2 GiB" in line
    )
    # The default 9B model fits an L4; the same 14B fits an L40S.
    assert DEFAULTS.model_id == "qwen3.5-9b"
    assert config(modelSource="Qwen/Qwen3-14B", gpuNodeType="g6e.8xlarge")


def test_the_fit_is_at_the_limit_and_one_past() -> None:
    # 22.5 GiB x 0.9 = 20.25 GiB = 10.87e9 bf16 weights.
    assert config(modelParamsBillions=10.87, modelSource="org/custom")
    (line,) = problems(modelParamsBillions=10.88, modelSource="org/custom")
    assert line.startswith("context key 'modelParamsBillions' = 10.88: 10.88 billion parameters")
    # float32 doubles the bytes per weight.
    (line,) = problems(modelParamsBillions=5.44, dtype="float32", modelSource="org/custom")
    assert "in float32 need 20.3 GiB" in line


def test_the_stated_size_wins_over_the_name_and_a_nameless_model_is_not_checked() -> None:
    assert config(modelSource="org/Giant-400B", modelParamsBillions=8).model_params_billions == 8
    assert config(modelSource="microsoft/Phi-3.5-mini-instruct")


def test_model_params_billions_up_to_what_the_largest_gpu_node_holds() -> None:
    """600 billion 16-bit weights fill 8 H200s; tests/test_limits.py has the range edges."""
    biggest = {"gpuNodeType": "p5en.48xlarge", "tensorParallelSize": 8, "gpuMemoryUtilization": 1}
    assert config(modelParamsBillions=600, **biggest)
    (line,) = problems(modelParamsBillions=600, **{**biggest, "gpuMemoryUtilization": 0.99})
    assert "600 billion parameters (modelParamsBillions) in bfloat16 need 1117.6 GiB" in line


def test_tensor_parallelism_multiplies_the_room() -> None:
    assert config(modelSource="Qwen/Qwen3-14B", gpuNodeType="g6.12xlarge", tensorParallelSize=2)
    (line,) = problems(modelSource="Qwen/Qwen3-14B", gpuNodeType="g6.12xlarge")
    assert "1 x L4 22.5 GiB" in line


# -- GPUs that no engine uses ----------------------------------------------------------------

MULTI_GPU = [t for t in TYPES if instance_types.EFA_GPU_TYPES[t].gpus > 1]


@pytest.mark.parametrize("gpu_type", MULTI_GPU)
def test_every_multi_gpu_type_warns_of_the_gpus_a_replica_leaves_idle(gpu_type: str) -> None:
    """One engine replica per GPU node: the GPUs above tensorParallelSize bill for nothing.
    At tensorParallelSize = the type's GPUs none is idle; at the largest divisor below, some."""
    gpus = instance_types.EFA_GPU_TYPES[gpu_type].gpus
    small = {"modelSource": "Qwen/Qwen3-0.6B", "modelRevision": "main", "dtype": "float16"}
    assert config_warnings(config(gpuNodeType=gpu_type, tensorParallelSize=gpus, **small)) == []
    below = max(n for n in range(1, gpus) if gpus % n == 0)
    ((wid, text),) = config_warnings(
        config(gpuNodeType=gpu_type, tensorParallelSize=below, **small)
    )
    idle = gpus - below
    assert wid == "idleGpus"
    assert text.startswith(
        f"tensorParallelSize={below} on gpuNodeType={gpu_type} uses {below} of each node's "
        f"{gpus} GPUs: {idle} GPU(s) idle per GPU node, {2 * idle} of {2 * gpus} across "
        "gpuNodeCount=2"
    )
    assert f"`ray-pd-eks settings --set tensorParallelSize={gpus}`" in text


def test_a_single_gpu_type_warns_of_nothing_and_the_fix_names_smaller_types() -> None:
    assert config_warnings(DEFAULTS) == []
    ((_, text),) = config_warnings(config(gpuNodeType="g6.12xlarge"))
    assert text.endswith("or a type with 1 L4 GPU(s): g6.16xlarge, g6.8xlarge")


# -- a sequence of maxModelLen in the KV cache -----------------------------------------------


def test_a_model_of_unknown_size_warns_that_nothing_checks_its_fit() -> None:
    ((wid, text),) = config_warnings(config(modelSource="org/custom"))
    assert wid == "modelFit"
    assert text.startswith("modelSource org/custom states no size in its name")
    assert "`ray-pd-eks settings --set modelParamsBillions=<billions>`" in text
    assert config_warnings(config(modelSource="org/custom", modelParamsBillions=8)) == []


def test_a_max_model_len_a_dense_model_could_not_hold_warns_below_the_refusal() -> None:
    """About 2.0 GiB of KV cache for the default 9B model on an L4: 14463 tokens at 16 KiB
    per token per billion parameters (warned above), 231408 at the floor (refused above)."""
    assert config_warnings(config(maxModelLen=14463)) == []
    ((wid, text),) = config_warnings(config(maxModelLen=14464))
    assert wid == "modelFit"
    assert text.startswith("maxModelLen=14464 may not fit the KV cache: about 2.0 GiB left on L4")
    # FP8 KV cache halves the bytes per token: the same length fits twice over.
    assert config_warnings(config(maxModelLen=28926, kvCacheDtype="fp8")) == []


def test_a_lowered_memory_share_is_blamed_when_the_default_share_would_hold_the_model() -> None:
    (line,) = problems(gpuMemoryUtilization=0.5)
    assert line.startswith("context key 'gpuMemoryUtilization' = 0.5: 9 billion parameters")
    # A model too big even at the default share: the model is what to change.
    (line,) = problems(gpuMemoryUtilization=0.5, modelSource="Qwen/Qwen3-14B")
    assert line.startswith("context key 'modelSource' = \"Qwen/Qwen3-14B\"")
