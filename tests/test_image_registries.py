"""Image settings may name only the registries the app knows (ray_pd_eks/trust.py):
a change to cdk.json cannot make the pods run an image from anywhere on the internet."""

from __future__ import annotations

import pytest

from ray_pd_eks.config import DEFAULTS, ConfigError

ACCOUNT = "123456789012"
DIGEST = "@sha256:" + "a" * 64


@pytest.mark.parametrize(
    "image",
    [
        "public.ecr.aws/aws-cli/aws-cli:2.37.1",
        f"public.ecr.aws/docker/library/python{DIGEST}",
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0",
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/ray:serve-llm-cuda-v1.0",
        f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/mirror/ray:1.0",
    ],
)
@pytest.mark.parametrize("key", ["dlcImage", "awsCliImage", "prefetchImage"])
def test_known_registries_are_accepted(key: str, image: str) -> None:
    config = DEFAULTS.with_overrides({"account": ACCOUNT, key: image})
    assert image in (config.dlc_image, config.aws_cli_image, config.prefetch_image)


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/library/python:3.12-slim",
        "ghcr.io/example/ray:1.0",
        "quay.io/example/aws-cli:2.0",
        # Another account's private ECR: not this deployment's, not a DLC registry.
        "210987654321.dkr.ecr.us-west-2.amazonaws.com/ray:1.0",
        # A look-alike host: the registry is the whole host, not a prefix of it.
        "public.ecr.aws.example.com/aws-cli/aws-cli:2.37.1",
        f"{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com.example.com/ray:1.0",
    ],
)
@pytest.mark.parametrize("key", ["dlcImage", "awsCliImage", "prefetchImage"])
def test_other_registries_are_refused_naming_the_setting(key: str, image: str) -> None:
    with pytest.raises(ConfigError) as info:
        DEFAULTS.with_overrides({"account": ACCOUNT, key: image})
    (line,) = [line for line in str(info.value).splitlines() if key in line]
    assert f"'{key}' = \"{image}\": must come from a registry this app knows" in line
    assert f"{ACCOUNT}.dkr.ecr.<region>.amazonaws.com" in line


def test_without_an_account_any_private_ecr_is_accepted_but_no_other_registry() -> None:
    """An environment-agnostic deploy does not know its account at synth."""
    image = "210987654321.dkr.ecr.us-west-2.amazonaws.com/ray:1.0"
    assert DEFAULTS.with_overrides({"dlcImage": image}).dlc_image == image
    with pytest.raises(ConfigError, match="your account's ECR"):
        DEFAULTS.with_overrides({"dlcImage": "docker.io/example/ray:1.0"})
