"""The EFA device plugin's image comes from Amazon EKS's registry of the deploy region."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pd_constructs.common.helm import EFA_DEVICE_PLUGIN_IMAGE_PATH
from pd_constructs.inventory.render import rendered_files
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.eks_images import EKS_IMAGE_REGISTRIES
from tests.synth import Synthesized, cdk_json_context

EFA_CHART = "aws-efa-k8s-device-plugin"


def _efa_chart(app: Synthesized) -> dict[str, Any]:
    (chart,) = [
        r
        for r in app.resources("GpuAddons", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == EFA_CHART
    ]
    return chart


def deployed_in(value: Any, mappings: dict[str, Any], region: str) -> str:
    """What CloudFormation makes of the chart's values in ``region``: Fn::Join, Fn::FindInMap
    over the template's own mappings (a missing key fails, as the deploy would), AWS::Region."""
    if isinstance(value, str):
        return value
    if value == {"Ref": "AWS::Region"}:
        return region
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(deployed_in(p, mappings, region) for p in parts)
    if "Fn::FindInMap" in value:
        name, first, second = (deployed_in(k, mappings, region) for k in value["Fn::FindInMap"])
        return str(mappings[name][first][second])
    raise AssertionError(f"unexpected intrinsic {value}")


def test_explicit_region_gets_its_registry_literally(variant_app: Synthesized) -> None:
    template = variant_app.templates["GpuAddons"]
    values = json.loads(_efa_chart(variant_app)["Properties"]["Values"])
    assert values["image"] == {
        "repository": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    }  # the chart's tag is kept: no image.tag
    assert "Mappings" not in template


@pytest.mark.parametrize(
    ("region", "repository"),
    [
        ("us-east-1", "602401143452.dkr.ecr.us-east-1.amazonaws.com"),
        # Opt-in regions: another account owns EKS's registry there.
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com"),
        ("ap-east-2", "533267051163.dkr.ecr.ap-east-2.amazonaws.com"),
        ("cn-north-1", "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_environment_agnostic_stack_resolves_the_deploy_regions_registry(
    default_app: Synthesized, region: str, repository: str
) -> None:
    template = default_app.templates["GpuAddons"]
    values = json.loads(
        deployed_in(_efa_chart(default_app)["Properties"]["Values"], template["Mappings"], region)
    )
    assert values["image"] == {"repository": f"{repository}/{EFA_DEVICE_PLUGIN_IMAGE_PATH}"}


def test_region_missing_from_the_mapping_fails_thedeployed_in(default_app: Synthesized) -> None:
    template = default_app.templates["GpuAddons"]
    with pytest.raises(KeyError, match="us-iso-east-1"):
        deployed_in(
            _efa_chart(default_app)["Properties"]["Values"], template["Mappings"], "us-iso-east-1"
        )


def test_registry_table_hosts_name_their_own_region() -> None:
    host = re.compile(r"^\d{12}\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.(com|com\.cn|eu)$")
    for region, registry in EKS_IMAGE_REGISTRIES.items():
        m = host.match(registry)
        assert m and m["region"] == region, registry
    # The chart's own default is the us-west-2 entry with the same image path.
    assert f"{EKS_IMAGE_REGISTRIES['us-west-2']}/{EFA_DEVICE_PLUGIN_IMAGE_PATH}" == (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    )


def test_chart_default_repository_is_the_one_replaced(reference_dir: Path) -> None:
    values = yaml.safe_load(
        (reference_dir / "charts/aws-efa-k8s-device-plugin-values.v0.5.30.yaml").read_text()
    )
    registry, path = values["image"]["repository"].split("/", 1)
    assert path == EFA_DEVICE_PLUGIN_IMAGE_PATH
    assert registry == EKS_IMAGE_REGISTRIES["us-west-2"]


def test_region_in_the_table_is_accepted() -> None:
    # The table's last addition (absent from the guide's English revision read).
    assert AppConfig.from_context({**cdk_json_context(), "region": "ap-southeast-5"}).region == (
        "ap-southeast-5"
    )


def test_well_formed_region_without_a_registry_is_rejected() -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context({**cdk_json_context(), "region": "us-iso-east-1"})
    (line,) = [line for line in str(err.value).splitlines() if "'region'" in line]
    assert "'region' = \"us-iso-east-1\": has no Amazon EKS image registry" in line
    assert "add-ons-images.html" in line


def test_render_fills_the_registry_only_for_a_known_region() -> None:
    def efa_image(config: AppConfig) -> Any:
        text = rendered_files(config)["10-aws-efa-k8s-device-plugin-values.yaml"]
        return yaml.safe_load(text).get("image")

    assert efa_image(DEFAULTS.with_overrides({"region": "me-south-1"})) == {
        "repository": "558608220178.dkr.ecr.me-south-1.amazonaws.com/"
        + EFA_DEVICE_PLUGIN_IMAGE_PATH
    }
    assert efa_image(DEFAULTS) is None  # no region: the chart's default stays
