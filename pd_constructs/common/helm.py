"""One small construct per Helm component: chart coordinates pinned in one place, values in a
YAML file under ``assets/helm-values/``, overrides deep-merged in code. Every chart is installed
from its vendored folder (``assets/charts/``, ray_pd_eks/charts.py), never fetched by version
from its repository at deploy time; ``repository`` stays as the chart's published home."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import Aws, CfnMapping, Duration, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.namespaces import OPERATOR_NAMESPACE
from pd_constructs.common.templates import deep_merge, load_yaml
from ray_pd_eks.charts import vendored
from ray_pd_eks.eks_images import EKS_IMAGE_REGISTRIES

HELM_TIMEOUT = Duration.minutes(10)


@dataclass(frozen=True)
class HelmRelease:
    """Where a chart comes from and where it is installed."""

    repository: str
    chart: str
    version: str
    release: str
    namespace: str
    values_file: str  # under assets/helm-values/

    def values(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The file's values with ``overrides`` deep-merged in."""
        base = load_yaml(f"helm-values/{self.values_file}") or {}
        return deep_merge(base, overrides or {})


EFA_DEVICE_PLUGIN = HelmRelease(
    repository="https://aws.github.io/eks-charts",
    chart="aws-efa-k8s-device-plugin",
    version="v0.5.30",
    release="aws-efa-k8s-device-plugin",
    namespace="kube-system",
    values_file="efa-device-plugin.yaml",
)
# The plugin's image inside EKS's registry. Chart v0.5.30's values default
# `image.repository` to the us-west-2 registry (602401143452.dkr.ecr.us-west-2.amazonaws.com/
# eks/aws-efa-k8s-device-plugin) in every region, and `image.tag` to v0.5.20; the app sets the
# repository to the deploy region's registry and keeps the chart's tag
# (efa_device_plugin_repository below, docs/operations.md#efa-device-plugin-image).
EFA_DEVICE_PLUGIN_IMAGE_PATH = "eks/aws-efa-k8s-device-plugin"


def efa_device_plugin_repository(scope: Construct) -> str:
    """The EFA device plugin's image repository in EKS's registry of ``scope``'s region.

    An explicit region is looked up here (``region`` is validated against the table at synth);
    an environment-agnostic stack gets ``Fn::FindInMap`` over a ``CfnMapping`` of the whole
    table, resolved by CloudFormation in the deploy region (in a region missing from the
    table, CloudFormation cannot resolve it and the stack's deploy fails)."""
    stack = Stack.of(scope)
    region = stack.region
    if not Token.is_unresolved(region):
        return f"{EKS_IMAGE_REGISTRIES[region]}/{EFA_DEVICE_PLUGIN_IMAGE_PATH}"
    mapping = CfnMapping(
        scope,
        "EksImageRegistries",
        mapping={r: {"registry": host} for r, host in EKS_IMAGE_REGISTRIES.items()},
    )
    return f"{mapping.find_in_map(Aws.REGION, 'registry')}/{EFA_DEVICE_PLUGIN_IMAGE_PATH}"


NVIDIA_DEVICE_PLUGIN = HelmRelease(
    repository="https://nvidia.github.io/k8s-device-plugin",
    chart="nvidia-device-plugin",
    version="0.20.0",
    release="nvidia-device-plugin",
    namespace="kube-system",
    values_file="nvidia-device-plugin.yaml",
)

# The controller that binds the stack's ALB target group to the Ray serve service. Its IAM
# policy is derived from this version's source (pd_constructs/endpoint/endpoint.py,
# CONTROLLER_CALLS).
LOAD_BALANCER_CONTROLLER = HelmRelease(
    repository="https://aws.github.io/eks-charts",
    chart="aws-load-balancer-controller",
    version="3.5.0",  # app v3.5.0
    release="aws-load-balancer-controller",
    namespace="kube-system",
    values_file="aws-load-balancer-controller.yaml",
)
LOAD_BALANCER_CONTROLLER_APP_VERSION = "v3.5.0"


# Scales the GPU node group when it has a range (docs/scaling.md). Chart 9.59.0's default
# image is Cluster Autoscaler 1.35.0; the image tag is set per Kubernetes minor below, as the
# autoscaler's releases track Kubernetes minors.
CLUSTER_AUTOSCALER = HelmRelease(
    repository="https://kubernetes.github.io/autoscaler",
    chart="cluster-autoscaler",
    version="9.59.0",
    release="cluster-autoscaler",
    namespace="kube-system",
    values_file="cluster-autoscaler.yaml",
)
# Cluster Autoscaler release per Kubernetes minor (tags cluster-autoscaler-1.35.2 and -1.36.1
# of kubernetes/autoscaler).
CLUSTER_AUTOSCALER_IMAGE_TAGS = {"1.35": "v1.35.2", "1.36": "v1.36.1"}


KUBERAY_CHART = "kuberay-operator"
KUBERAY_RELEASE = "kuberay-operator"
KUBERAY_VALUES_FILE = "kuberay-operator.yaml"
# The kuberay-operator chart's own values that name its objects (chart 1.7.0 values.yaml:
# nameOverride, fullnameOverride, serviceAccount). tests/test_operator_identity.py compares
# them with the chart's values.yaml kept in tests/schemas/kuberay-v1.7.0/.
KUBERAY_CHART_NAMING_VERSION = "1.7.0"
KUBERAY_CHART_NAMING: Mapping[str, Any] = {
    "nameOverride": "kuberay-operator",
    "fullnameOverride": "kuberay-operator",
    "serviceAccount": {"create": True, "name": "kuberay-operator"},
}


def kuberay_operator(version: str) -> HelmRelease:
    """The KubeRay operator chart; its version is a setting (``kuberayVersion``)."""
    return HelmRelease(
        repository="https://ray-project.github.io/kuberay-helm/",
        chart=KUBERAY_CHART,
        version=version,
        release=KUBERAY_RELEASE,
        namespace=OPERATOR_NAMESPACE,
        values_file=KUBERAY_VALUES_FILE,
    )


def _trunc63(name: str) -> str:
    return name[:63].removesuffix("-")  # Helm's `trunc 63 | trimSuffix "-"`


def chart_name(chart: str, values: Mapping[str, Any]) -> str:
    """``kuberay-operator.name`` of the chart's templates/_helpers.tpl (v1.7.0): the
    ``app.kubernetes.io/name`` label of the operator's pod (templates/deployment.yaml)."""
    return _trunc63(values.get("nameOverride") or chart)


def chart_fullname(chart: str, release: str, values: Mapping[str, Any]) -> str:
    """``kuberay-operator.fullname`` (templates/_helpers.tpl, v1.7.0): ``fullnameOverride``,
    else the release name if it contains the chart's name, else ``<release>-<name>``."""
    if values.get("fullnameOverride"):
        return _trunc63(str(values["fullnameOverride"]))
    name = values.get("nameOverride") or chart
    return _trunc63(release if name in release else f"{release}-{name}")


def chart_service_account(chart: str, release: str, values: Mapping[str, Any]) -> str:
    """``kuberay-operator.serviceAccount.name`` (templates/_helpers.tpl, v1.7.0): with
    ``serviceAccount.create``, its ``name`` or else the fullname; without, its ``name`` or
    ``default``. The chart's Deployment runs the operator as it (``serviceAccountName``), in
    the release's namespace (templates/serviceaccount.yaml, templates/deployment.yaml)."""
    account = values.get("serviceAccount") or {}
    if account.get("create"):
        return str(account.get("name") or chart_fullname(chart, release, values))
    return str(account.get("name") or "default")


@dataclass(frozen=True)
class OperatorIdentity:
    """Who the KubeRay operator is to the API server: the chart's service account in the
    release's namespace, and the name label its pod carries."""

    namespace: str
    service_account: str
    pod_name_label: str

    @property
    def user(self) -> str:
        """The user name its requests carry (``request.userInfo.username``)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def kuberay_operator_identity(release: HelmRelease | None = None) -> OperatorIdentity:
    """Derived from the one place the chart is installed from: the release (namespace, name)
    and the chart's naming values with ours merged over them, as Helm does."""
    # The naming above is chart 1.7.0's; the release and our values do not depend on it.
    release = release or kuberay_operator(KUBERAY_CHART_NAMING_VERSION)
    values = deep_merge(KUBERAY_CHART_NAMING, release.values())
    return OperatorIdentity(
        namespace=release.namespace,
        service_account=chart_service_account(release.chart, release.release, values),
        pod_name_label=chart_name(release.chart, values),
    )


class HelmAddon(Construct):
    """Installs one pinned chart with ``helm upgrade --install --wait`` through the kubectl
    provider, from the chart's vendored folder (``ChartAsset``, a CDK asset the provider reads
    from the bootstrap bucket). The primary child, ``Resource``, is the ``eks.HelmChart``. A
    release without a vendored chart fails synth."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        release: HelmRelease,
        overrides: Mapping[str, Any] | None = None,
        timeout: Duration = HELM_TIMEOUT,
    ) -> None:
        super().__init__(scope, construct_id)
        self.release = release
        self.values = release.values(overrides)
        chart = vendored(release.chart, release.version)
        if chart is None:
            raise ValueError(
                f"chart {release.chart} {release.version} is not vendored: add it with "
                "scripts/vendor_chart.py and record it in ray_pd_eks/charts.py"
            )
        self.vendored = chart
        self.chart_asset = s3_assets.Asset(self, "ChartAsset", path=str(chart.folder))
        self.chart = eks.HelmChart(
            self,
            "Resource",
            cluster=as_icluster(cluster),
            chart_asset=self.chart_asset,
            release=release.release,
            namespace=release.namespace,
            create_namespace=True,
            values=self.values,
            wait=True,
            atomic=True,
            timeout=timeout,
        )
