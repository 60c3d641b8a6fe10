"""Configuration errors a user reads: each one line, naming what to set; and the model id that
follows the model source."""

from __future__ import annotations

import json

import pytest
import yaml

from pd_constructs.inventory.render import rendered_files
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from tests.synth import cdk_json_context


def problems(**overrides: object) -> list[str]:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({**cdk_json_context(), **overrides})
    return str(err.value).splitlines()


def test_an_unknown_key_says_to_set_the_key_it_suggests() -> None:
    (line,) = problems(gpuNodeTyp="p5.48xlarge")
    assert line == (
        "context key 'gpuNodeTyp' = \"p5.48xlarge\": unknown setting; did you mean "
        "'gpuNodeType'? (fix it with `ray-pd-eks settings --set gpuNodeType=...`, or -c "
        "gpuNodeType=... for one command)"
    )


def test_an_unknown_key_without_a_close_match_lists_the_settings() -> None:
    (line,) = problems(colour="blue")
    assert line.startswith("context key 'colour' = \"blue\": unknown setting; the settings are ")
    listed = line.split("the settings are ", 1)[1].split(" (docs/settings.md")[0].split(", ")
    assert sorted(listed) == sorted(AppConfig.context_keys())
    assert "-c colour=" not in line


@pytest.mark.parametrize("count", [1, 0, 65])
def test_a_bad_gpu_node_count_is_one_line(count: int) -> None:
    (line,) = problems(gpuNodeCount=count)
    assert line.startswith(f"context key 'gpuNodeCount' = {count}: ")


def test_replicas_beyond_a_valid_node_count_blame_the_replicas() -> None:
    (line,) = problems(gpuNodeCount=2, decodeReplicas=2)
    assert line.startswith("context key 'decodeReplicas' = 2: prefillReplicas + decodeReplicas = 3")
    assert AppConfig.from_context({**cdk_json_context(), "gpuNodeCount": 3, "decodeReplicas": 2})


def test_the_default_model_id_is_the_walkthroughs() -> None:
    assert cdk_json_context()["modelId"] == ""
    assert DEFAULTS.model_id == "qwen3.5-9b" and DEFAULTS.application_name == "qwen"


def test_a_new_model_source_without_a_model_id_is_served_under_its_own_name() -> None:
    config = AppConfig.from_context(
        {**cdk_json_context(), "modelSource": "Qwen/Qwen3-8B", "modelRevision": "main"}
    )
    assert config.model_id == "qwen3-8b"
    serve = yaml.safe_load(rendered_files(config)["30-rayservice.yaml"])["spec"]["serveConfigV2"]
    loading = yaml.safe_load(serve)["applications"][0]["args"]["prefill_config"]
    assert loading["model_loading_config"] == {
        "model_id": "qwen3-8b",
        "model_source": "Qwen/Qwen3-8B",
    }


def test_an_explicit_model_id_is_kept() -> None:
    context = {
        **cdk_json_context(),
        "modelSource": "Qwen/Qwen3-8B",
        "modelId": "chat",
        "modelRevision": "v1",
    }
    assert AppConfig.from_context(context).model_id == "chat"
    custom = DEFAULTS.with_overrides({"modelId": "chat"})
    assert (
        custom.with_overrides({"modelSource": "Qwen/Qwen3-8B", "modelRevision": "v2"}).model_id
        == "chat"
    )


def test_overrides_of_the_source_move_a_derived_id_along() -> None:
    """Pipeline environments and the CLI build configs with with_overrides."""
    moved = DEFAULTS.with_overrides(
        {"modelSource": "meta-llama/Llama-3.1-8B-Instruct", "modelRevision": "main"}
    )
    assert moved.model_id == "llama-3.1-8b-instruct"
    assert DEFAULTS.with_overrides({"maxModelLen": 8192}).model_id == "qwen3.5-9b"


def test_an_invalid_model_source_is_one_line_not_two() -> None:
    (line,) = problems(modelSource="s3://bucket/")
    assert line.startswith("context key 'modelSource' = \"s3://bucket/\": Ray 2.58 cannot stream")


def test_a_misspelt_size_is_an_unknown_instance_type_not_a_missing_efa() -> None:
    (line,) = problems(gpuNodeType="g6.8xl")
    assert "'gpuNodeType' = \"g6.8xl\": unknown instance type (EC2 sizes read like 8xlarge" in line
    (line,) = problems(gpuNodeType="g6.4xlarge")  # a real type, without EFA
    assert "this GPU type has no EFA interface" in line


@pytest.mark.parametrize(
    ("key", "value", "network"),
    [
        ("vpcCidr", "10.0.0.1/16", "10.0.0.0/16"),
        ("endpointPublicCidrs", "203.0.113.7/24", "203.0.113.0/24"),
    ],
)
def test_a_cidr_with_host_bits_set_says_so_and_names_its_network(
    key: str, value: str, network: str
) -> None:
    (line,) = problems(**{key: value})
    assert f"host bits are set: the network of this CIDR is {network} " in line


def test_a_negative_gpu_node_count_is_one_line() -> None:
    (line,) = problems(gpuNodeCount=-1)
    assert line.startswith("context key 'gpuNodeCount' = -1: prefill and decode need")
    (line,) = problems(gpuNodeMinCount=-1)
    assert "'gpuNodeMinCount' = -1: must not be negative" in line


def test_an_identity_center_role_without_its_path_is_refused() -> None:
    pathless = "arn:aws:iam::123456789012:role/AWSReservedSSO_Admin_0123456789abcdef"
    (line,) = problems(adminPrincipalArns=[pathless])
    assert "has the path aws-reserved/sso.amazonaws.com/" in line
    assert "`ray-pd-eks settings --add-admin-me` reads the full ARN" in line
    full = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_A_01"
    AppConfig.from_context({**cdk_json_context(), "adminPrincipalArns": [full]})  # valid


# -- a revision chosen for another model -----------------------------------------------------


def test_another_model_with_the_default_models_revision_is_refused_naming_both() -> None:
    """The default revision is a commit of Qwen/Qwen3.5-9B: another repository has no such
    commit, so the prefetch and the engines would fail while the GPU nodes bill."""
    (line,) = problems(modelSource="Qwen/Qwen3-8B")
    assert line.startswith(
        "context key 'modelRevision' = \"c202236235762e1c871ad0ccb60c8ee5ba337b9a\": is the "
        "commit of Qwen/Qwen3.5-9B (the default modelSource), but modelSource is Qwen/Qwen3-8B"
    )
    assert (
        "`ray-pd-eks settings --set modelSource=Qwen/Qwen3-8B --set modelRevision='<commit>'`"
        in line
    )
    with pytest.raises(ConfigError, match="modelRevision"):
        DEFAULTS.with_overrides({"modelSource": "Qwen/Qwen3-8B"})


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # the default model at its commit
        {
            "modelSource": "Qwen/Qwen3-8B",
            "modelRevision": "b968826d9c46dd6066d109eabc6255188de91218",
        },
        {"modelSource": "Qwen/Qwen3-8B", "modelRevision": "main"},
        {"modelSource": "Qwen/Qwen3-8B", "modelS3Uri": "s3://bucket/qwen3-8b"},  # no revision used
    ],
)
def test_a_revision_of_its_own_or_staged_weights_are_accepted(overrides: dict[str, str]) -> None:
    assert AppConfig.from_context({**cdk_json_context(), **overrides})


def test_an_invalid_model_source_is_blamed_alone() -> None:
    (line,) = problems(modelSource="not-a-repo")
    assert line.startswith("context key 'modelSource'")


@pytest.mark.parametrize("name", ["a", "team-a", "a" * 16, "x9"])
def test_a_deployment_name_of_up_to_16_dns_letters_is_accepted(name: str) -> None:
    config = AppConfig.from_context({**cdk_json_context(), "deploymentName": name})
    assert (config.stage_id, config.cluster_name) == (
        f"{name}-RayPdEks",
        f"{name}-ray-llm-multinode",
    )
    # A copy with other overrides is prefixed once, and follows a new name.
    assert config.with_overrides({"maxModelLen": 8192}).cluster_name == config.cluster_name
    assert config.with_overrides({"deploymentName": ""}).cluster_name == "ray-llm-multinode"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a" * 17, "is 17 characters; the limit is 16"),
        ("Alice", "must be lowercase letters"),
        ("team_a", "must be lowercase letters"),
        ("-a", "must be lowercase letters"),
        ("a-", "must be lowercase letters"),
        ("9a", "must be lowercase letters"),
    ],
)
def test_a_bad_deployment_name_is_one_line_naming_the_rule(name: str, why: str) -> None:
    (line,) = problems(deploymentName=name)
    assert line.startswith(f"context key 'deploymentName' = \"{name}\": {why}")


def test_an_sts_session_arn_names_the_roles_arn() -> None:
    """`aws sts get-caller-identity` shows the session; EKS grants the role."""
    (line,) = problems(adminPrincipalArns=["arn:aws:sts::123456789012:assumed-role/Admin/me"])
    assert (
        "an STS session of the role arn:aws:iam::123456789012:role/Admin, not a principal" in line
    )
    assert "`ray-pd-eks settings --add-admin-me`" in line


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("[10.0.0.0/8]", "not a JSON list: quote each item"),
        ("10.0.0.0/8 192.168.0.0/16", "separate the items with commas, not spaces"),
    ],
)
def test_a_list_in_a_form_no_parser_takes_says_which_forms_work(raw: str, why: str) -> None:
    (line,) = problems(endpointPublicCidrs=raw)
    assert line.startswith(f"context key 'endpointPublicCidrs' = {json.dumps(raw)}: {why}")
    assert AppConfig.from_context(
        {**cdk_json_context(), "endpointPublicCidrs": "10.0.0.0/8, 192.168.0.0/16"}
    ).endpoint_public_cidrs == ("10.0.0.0/8", "192.168.0.0/16")


def test_the_certificate_arns_id_is_shown_in_its_form() -> None:
    lines = problems(
        endpointExposure="internal",
        endpointAllowedCidrs=["10.0.0.0/8"],
        endpointCertificateArn="arn:aws:acm:us-west-2:123456789012:certificate/abc",
    )
    (line,) = [x for x in lines if x.startswith("context key 'endpointCertificateArn'")]
    assert "certificate/<id: 36 lowercase hex digits and dashes, e.g. 0123abcd-" in line


@pytest.mark.parametrize(
    ("exposure", "example"),
    [("internal", "endpointAllowedCidrs=10.0.0.0/8"), ("internet-facing", "=203.0.113.0/24")],
)
def test_the_allowed_cidrs_example_fits_the_load_balancers_side(
    exposure: str, example: str
) -> None:
    """An internet-facing ALB sees public source addresses: a private example would admit no one."""
    lines = problems(
        endpointExposure=exposure,
        endpointCertificateArn=(
            "arn:aws:acm:us-west-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
        ),
    )
    (line,) = [x for x in lines if x.startswith("context key 'endpointAllowedCidrs'")]
    assert example in line
