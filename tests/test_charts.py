"""Every Helm chart is vendored (assets/charts/, ray_pd_eks/charts.py) and installed from its
folder: the tests pin each folder's SHA-256, so a changed file fails here, and no chart is
fetched by version from a repository at deploy time."""

from __future__ import annotations

import json

import pytest
import yaml

from pd_constructs.common import helm
from ray_pd_eks.charts import CHARTS_DIR, VENDORED_CHARTS, chart_tree_sha256, vendored
from ray_pd_eks.config import DEFAULTS, ConfigError
from tests.synth import Synthesized

# The pins, written out here as well: changing a vendored chart means changing both.
PINNED = {
    ("kuberay-operator", "1.7.0"): (
        "23d81bf08b7d16457cb8e6c9397198c24a05164318ce229aeabc94c5d84ce444"
    ),
    ("nvidia-device-plugin", "0.20.0"): (
        "dd47e1cdb01315340deb5aeef97f0d6e93e820e377261b4742b264fbc3579e21"
    ),
    ("cluster-autoscaler", "9.59.0"): (
        "ffe5210b4f4a987ef774d9068fc6f3a68a607360cea5120867a78a7b8095bc12"
    ),
    ("aws-efa-k8s-device-plugin", "v0.5.30"): (
        "ce733ecc8a475eb4d41ddd4295a4eae138141c1a7a7ef2da03516572b260839b"
    ),
    ("aws-load-balancer-controller", "3.5.0"): (
        "a5df275adc39c7a7ccfac2be6550332685f387ed663cf4991b41d112297cd11d"
    ),
}
RELEASES = (
    helm.kuberay_operator(DEFAULTS.kuberay_version),
    helm.NVIDIA_DEVICE_PLUGIN,
    helm.EFA_DEVICE_PLUGIN,
    helm.LOAD_BALANCER_CONTROLLER,
    helm.CLUSTER_AUTOSCALER,
)


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda c: f"{c.chart}-{c.version}")
def test_each_vendored_chart_is_the_pinned_tree(chart: object) -> None:
    from ray_pd_eks.charts import VendoredChart

    assert isinstance(chart, VendoredChart)
    assert chart.folder.is_dir(), chart.folder
    assert chart_tree_sha256(chart.folder) == chart.sha256 == PINNED[(chart.chart, chart.version)]
    meta = yaml.safe_load((chart.folder / "Chart.yaml").read_text())
    assert (meta["name"], str(meta["version"])) == (chart.chart, chart.version)
    assert len(chart.commit) == 40


def test_the_pins_and_the_folders_are_the_same_set() -> None:
    folders = {p.name for p in CHARTS_DIR.iterdir() if p.is_dir()}
    assert folders == {f"{c}-{v}" for c, v in PINNED}
    assert {(c.chart, c.version) for c in VENDORED_CHARTS} == set(PINNED)


def test_a_changed_file_changes_the_tree_hash(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    (tmp_path / "Chart.yaml").write_text("name: x\nversion: 1.0.0\n")
    before = chart_tree_sha256(tmp_path)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "a.yaml").write_text("kind: ConfigMap\n")
    added = chart_tree_sha256(tmp_path)
    (tmp_path / "templates" / "a.yaml").write_text("kind: Secret\n")
    assert len({before, added, chart_tree_sha256(tmp_path)}) == 3


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.chart)
def test_every_release_the_app_installs_is_vendored(release: helm.HelmRelease) -> None:
    assert vendored(release.chart, release.version) is not None


@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_every_chart_is_installed_from_its_asset_never_from_a_repository(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    charts = [
        r["Properties"]
        for t in app.templates.values()
        for r in t["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    ]
    assert charts
    for props in charts:
        assert "Repository" not in props and "Version" not in props and "Chart" not in props
        assert json.dumps(props["ChartAssetURL"]).count("s3://") == 1, props["Release"]


def test_kuberay_version_must_be_a_vendored_chart() -> None:
    assert DEFAULTS.with_overrides({"kuberayVersion": "1.7.0"}).kuberay_version == "1.7.0"
    with pytest.raises(ConfigError, match=r"'kuberayVersion' = \"1.7.1\": no vendored chart"):
        DEFAULTS.with_overrides({"kuberayVersion": "1.7.1"})
