"""The Helm charts the app installs, vendored: each one's folder under ``assets/charts/``, where
it came from, and the SHA-256 of its files, which the tests pin.

The stacks install every chart from its folder (a CDK asset the kubectl provider reads from
the bootstrap bucket), never from a chart repository at deploy time: a chart repository can
serve different bytes under the same version, and the KubeRay chart installs the operator
that the admission policies trust. ``scripts/vendor_chart.py`` copies a chart from its
project's repository at the release's commit and prints the hash to record here. A chart
version without a folder here cannot be installed (``kuberayVersion`` is checked at synth).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

CHARTS_DIR = Path(__file__).resolve().parent.parent / "assets" / "charts"


@dataclass(frozen=True)
class VendoredChart:
    """A chart's folder and provenance: ``repository`` (GitHub owner/name), ``commit`` (the
    release's commit, ``ref`` its tag when it has one) and ``path`` (the chart's folder there);
    ``sha256`` is :func:`chart_tree_sha256` of the vendored folder."""

    chart: str
    version: str
    repository: str
    ref: str
    commit: str
    path: str
    sha256: str

    @property
    def folder(self) -> Path:
        return CHARTS_DIR / f"{self.chart}-{self.version}"


def chart_tree_sha256(folder: Path) -> str:
    """SHA-256 over every file of ``folder``: one line ``<relative path>\\0<sha256 of the
    file>\\n`` per file, in path order. Independent of timestamps and of how the files were
    copied; any changed, added or removed file changes it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(folder).as_posix()
        digest.update(f"{rel}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


VENDORED_CHARTS: tuple[VendoredChart, ...] = (
    VendoredChart(
        chart="kuberay-operator",
        version="1.7.0",
        repository="ray-project/kuberay",
        ref="v1.7.0",
        commit="59d663aeec13760646da3db9c1cf8cfe883e30b7",
        path="helm-chart/kuberay-operator",
        sha256="23d81bf08b7d16457cb8e6c9397198c24a05164318ce229aeabc94c5d84ce444",
    ),
    VendoredChart(
        chart="nvidia-device-plugin",
        version="0.20.0",
        repository="NVIDIA/k8s-device-plugin",
        ref="v0.20.0",
        commit="1b826acc6af3079d8923bac395c3124b8861a9a6",
        path="deployments/helm/nvidia-device-plugin",
        sha256="dd47e1cdb01315340deb5aeef97f0d6e93e820e377261b4742b264fbc3579e21",
    ),
    VendoredChart(
        chart="cluster-autoscaler",
        version="9.59.0",
        repository="kubernetes/autoscaler",
        ref="cluster-autoscaler-chart-9.59.0",
        commit="5a0b98e45f896e98132737240ac131a519d3b33d",
        path="cluster-autoscaler/charts/cluster-autoscaler",
        sha256="ffe5210b4f4a987ef774d9068fc6f3a68a607360cea5120867a78a7b8095bc12",
    ),
    # aws/eks-charts tags no chart release: the commit is the one that set the version
    # ("chore(efa-device-plugin): add latest EFA instance types (#1337)", "aws-load-balancer-
    # controller: v3.5.0 (#1354)"), the last to touch the chart's folder before it was
    # published at that version.
    VendoredChart(
        chart="aws-efa-k8s-device-plugin",
        version="v0.5.30",
        repository="aws/eks-charts",
        ref="",
        commit="bfe91c4b9257c80f754ad4b3d6a9a3c239b2b8ec",
        path="stable/aws-efa-k8s-device-plugin",
        sha256="ce733ecc8a475eb4d41ddd4295a4eae138141c1a7a7ef2da03516572b260839b",
    ),
    VendoredChart(
        chart="aws-load-balancer-controller",
        version="3.5.0",
        repository="aws/eks-charts",
        ref="",
        commit="5239609242f3430be50fb0b714a24d3ef2b47983",
        path="stable/aws-load-balancer-controller",
        sha256="a5df275adc39c7a7ccfac2be6550332685f387ed663cf4991b41d112297cd11d",
    ),
)


def vendored(chart: str, version: str) -> VendoredChart | None:
    """The vendored chart of that name and version, or None."""
    for entry in VENDORED_CHARTS:
        if (entry.chart, entry.version) == (chart, version):
            return entry
    return None


def vendored_versions(chart: str) -> tuple[str, ...]:
    return tuple(e.version for e in VENDORED_CHARTS if e.chart == chart)


__all__ = [
    "CHARTS_DIR",
    "VENDORED_CHARTS",
    "VendoredChart",
    "chart_tree_sha256",
    "vendored",
    "vendored_versions",
]
