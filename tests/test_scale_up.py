"""Scale up: one engine replica across ``tensorParallelSize`` GPUs of one node, and every EFA
interface of the instance type attached to the GPU nodes and requested by a worker that owns
its node. Rendering and the node-group construct are checked without a full app synth."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from pd_constructs.cluster.cluster import EfaGpuNodeGroup, efa_network_interfaces
from pd_constructs.serving.workload import render_rayservice, render_serve_config
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.instance_types import EFA_GPU_TYPES

P5_TP8 = DEFAULTS.with_overrides({"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 8})
G6_TP4 = DEFAULTS.with_overrides({"gpuNodeType": "g6.12xlarge", "tensorParallelSize": 4})


def _worker_resources(config: AppConfig) -> dict[str, Any]:
    rs = render_rayservice(config, image="img:1")
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    return dict(resources["requests"])


def _llm_configs(config: AppConfig) -> list[dict[str, Any]]:
    (app,) = render_serve_config(config)["applications"]
    args = app["args"]
    if "llm_configs" in args:
        return list(args["llm_configs"])
    return [args["prefill_config"], args["decode_config"]]


# -- the workers and the engines --------------------------------------------------------------


def test_p5_tensor_parallel_8_takes_the_node_its_8_gpus_and_32_efa() -> None:
    resources = _worker_resources(P5_TP8)
    assert resources["nvidia.com/gpu"] == 8
    assert resources["vpc.amazonaws.com/efa"] == 32
    for cfg in _llm_configs(P5_TP8):
        assert cfg["engine_kwargs"]["tensor_parallel_size"] == 8
        assert cfg["placement_group_config"] == {
            "bundles": [{"GPU": 1}] * 8,
            "strategy": "STRICT_PACK",
        }


def test_g6_12xlarge_tensor_parallel_4_takes_4_gpus_and_its_one_efa() -> None:
    resources = _worker_resources(G6_TP4)
    assert (resources["nvidia.com/gpu"], resources["vpc.amazonaws.com/efa"]) == (4, 1)
    assert {c["engine_kwargs"]["tensor_parallel_size"] for c in _llm_configs(G6_TP4)} == {4}


def test_a_worker_that_leaves_gpus_free_requests_one_efa() -> None:
    config = DEFAULTS.with_overrides({"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 4})
    resources = _worker_resources(config)
    assert (resources["nvidia.com/gpu"], resources["vpc.amazonaws.com/efa"]) == (4, 1)


def test_tcp_transport_requests_no_efa_at_any_parallel_size() -> None:
    config = P5_TP8.with_overrides({"kvBackend": "UCX"})
    assert "vpc.amazonaws.com/efa" not in _worker_resources(config)


def test_default_is_one_gpu_one_efa_one_bundle() -> None:
    resources = _worker_resources(DEFAULTS)
    assert (resources["nvidia.com/gpu"], resources["vpc.amazonaws.com/efa"]) == (1, 1)
    for cfg in _llm_configs(DEFAULTS):
        assert cfg["engine_kwargs"]["tensor_parallel_size"] == 1
        assert cfg["placement_group_config"]["bundles"] == [{"GPU": 1}]


def test_aggregated_engines_get_the_same_parallelism() -> None:
    config = P5_TP8.with_overrides({"servingMode": "aggregated"})
    (cfg,) = _llm_configs(config)
    assert cfg["engine_kwargs"]["tensor_parallel_size"] == 8
    assert len(cfg["placement_group_config"]["bundles"]) == 8


def test_serve_config_yaml_has_no_anchors_for_repeated_bundles() -> None:
    rs = render_rayservice(P5_TP8, image="img:1")
    text = rs["spec"]["serveConfigV2"]
    assert "&id" not in text and "*id" not in text
    (app,) = yaml.safe_load(text)["applications"]
    assert len(app["args"]["decode_config"]["placement_group_config"]["bundles"]) == 8


def test_parallel_size_changes_the_ray_cluster_spec_hash() -> None:
    from pd_constructs.serving.workload import cluster_spec_hash

    assert cluster_spec_hash(G6_TP4) != cluster_spec_hash(
        G6_TP4.with_overrides({"tensorParallelSize": 2})
    )


# -- validation --------------------------------------------------------------------------------


def test_tensor_parallel_3_on_an_8_gpu_type_fails_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides({"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 3})
    (line,) = str(err.value).splitlines()
    assert line.startswith("context key 'tensorParallelSize' = 3:")
    assert "use one of 1, 2, 4, 8" in line


def test_every_divisor_of_each_types_gpus_is_accepted() -> None:
    # A model every GPU of the table holds in float16 (a T4 has neither bfloat16 nor room for
    # the default 9B model; the fit check refuses them, tests/test_gpu_types.py).
    fits_all = {"dtype": "float16", "modelSource": "Qwen/Qwen3-4B", "modelRevision": "main"}
    for name, spec in EFA_GPU_TYPES.items():
        for tp in range(1, spec.gpus + 1):
            overrides = {**fits_all, "gpuNodeType": name, "tensorParallelSize": tp}
            if spec.gpus % tp:
                with pytest.raises(ConfigError, match="tensorParallelSize"):
                    DEFAULTS.with_overrides(overrides)
            else:
                assert DEFAULTS.with_overrides(overrides).tensor_parallel_size == tp


# -- the launch template: every EFA interface ---------------------------------------------------


def _launch_template_interfaces(instance_type: str) -> list[dict[str, Any]]:
    app = cdk.App()
    stack = cdk.Stack(app, "Nodes", env=cdk.Environment(account="123456789012", region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-west-2a"]
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c", vpc=vpc, cluster_security_group_id="sg-cluster"
    )
    subnet = ec2.Subnet.from_subnet_attributes(
        stack, "Subnet", subnet_id="subnet-1", availability_zone="us-west-2a"
    )
    EfaGpuNodeGroup(
        stack,
        "GpuNodes",
        cluster=cluster,
        subnet=subnet,
        nodegroup_name="gpu",
        instance_type=instance_type,
        node_count=2,
        root_volume_gib=50,
    )
    (lt,) = Template.from_stack(stack).find_resources("AWS::EC2::LaunchTemplate").values()
    return list(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"])


def _p5_interfaces() -> list[dict[str, Any]]:
    """p5's interfaces as CloudFormation gets them. aws-cdk-lib 2.275's managed node group does
    not know the p5 family as a GPU type yet (its ``isGpuInstanceType``), so the interfaces are
    rendered through a bare launch template here."""
    stack = cdk.Stack(cdk.App(), "Lt")
    ec2.CfnLaunchTemplate(
        stack,
        "LaunchTemplate",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            network_interfaces=efa_network_interfaces(
                EFA_GPU_TYPES["p5.48xlarge"], ["sg-cluster", "sg-efa"]
            )
        ),
    )
    (lt,) = Template.from_stack(stack).find_resources("AWS::EC2::LaunchTemplate").values()
    return list(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"])


def test_p5_launch_template_has_32_efa_one_per_network_card() -> None:
    nics = _p5_interfaces()
    assert len(nics) == 32
    assert [n["NetworkCardIndex"] for n in nics] == list(range(32))
    primary, *others = nics
    assert (primary["DeviceIndex"], primary["InterfaceType"]) == (0, "efa")
    assert {(n["DeviceIndex"], n["InterfaceType"]) for n in others} == {(1, "efa-only")}
    assert all(n["Groups"] == ["sg-cluster", "sg-efa"] for n in nics)
    assert all(n["DeleteOnTermination"] is True for n in nics)


@pytest.mark.parametrize(
    ("instance_type", "count", "extra_type"),
    [
        ("g6e.48xlarge", 4, "efa-only"),
        ("g6e.24xlarge", 2, "efa-only"),
        ("p4d.24xlarge", 4, "efa"),
        ("g6.12xlarge", 1, None),
    ],
)
def test_each_type_gets_its_efa_interfaces(
    instance_type: str, count: int, extra_type: str | None
) -> None:
    nics = _launch_template_interfaces(instance_type)
    assert [n["NetworkCardIndex"] for n in nics] == list(range(count))
    assert all(len(n["Groups"]) == 2 for n in nics)
    assert nics[0]["InterfaceType"] == "efa" and nics[0]["DeviceIndex"] == 0
    assert {n["InterfaceType"] for n in nics[1:]} == ({extra_type} if extra_type else set())


def test_instance_table_gives_each_efa_interface_a_card() -> None:
    assert EFA_GPU_TYPES["p5.48xlarge"].efa_network_cards == tuple(range(32))
    assert EFA_GPU_TYPES["p4d.24xlarge"].efa_network_cards == (0, 1, 2, 3)
    assert EFA_GPU_TYPES["p5en.48xlarge"].efa_network_cards == tuple(range(16))
    assert EFA_GPU_TYPES["p5en.48xlarge"].efa_only
    from ray_pd_eks.instance_types import InstanceSpec

    with pytest.raises(ValueError, match="one network card per EFA interface"):
        InstanceSpec("x.large", 2, 8, 1, 2, "L4", 0, (0,))
