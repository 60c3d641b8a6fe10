"""What the readiness check is told: the custom resource's ``ResourceProperties`` as
:class:`Props` (everything the check needs, nothing looked up elsewhere), and
:class:`ReadinessError`, the terminal failure every step raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pd_lambda import props as props_helpers

DEFAULT_TIMEOUT_SECONDS = 3300  # readinessTimeoutMinutes' default, below CloudFormation's hour
DEFAULT_QUERY_INTERVAL_SECONDS = 30
SERVE_PORT = 8000
DASHBOARD_PORT = 8265
METRICS_PORT = 8080  # RAY_PORTS.metrics_export; the construct passes it as MetricsPort
KV_BACKENDS = ("LIBFABRIC", "UCX")
SERVING_MODES = ("pd", "aggregated")

# The RayService and the cluster it runs in: what every custom resource of this folder that
# talks to the cluster is given first (the readiness check, the RayService recreate).
RAYSERVICE_PROPERTIES = (
    "ClusterName",
    "ClusterEndpoint",
    "ClusterCertificateAuthorityData",
    "Namespace",
    "RayServiceName",
)
REQUIRED_PROPERTIES = (
    *RAYSERVICE_PROPERTIES,
    "ApplicationName",
    "ModelId",
    "KvBackend",
    "ExpectedGpuNodes",
)


class ReadinessError(Exception):
    """A terminal failure: the deploy should stop now, with this message as the reason."""


@dataclass(frozen=True)
class RayServiceProps:
    """The RayService and the cluster it runs in (``RAYSERVICE_PROPERTIES``), which names the
    custom resource: ``<cluster>/<namespace>/<rayservice>``."""

    cluster_name: str
    endpoint: str
    ca_data: str
    namespace: str
    rayservice: str

    @property
    def physical_id(self) -> str:
        return f"{self.cluster_name}/{self.namespace}/{self.rayservice}"

    @staticmethod
    def rayservice_fields(properties: Mapping[str, Any]) -> dict[str, str]:
        """The fields above, from properties that have every one of ``RAYSERVICE_PROPERTIES``."""
        return {
            "cluster_name": str(properties["ClusterName"]),
            "endpoint": str(properties["ClusterEndpoint"]),
            "ca_data": str(properties["ClusterCertificateAuthorityData"]),
            "namespace": str(properties["Namespace"]),
            "rayservice": str(properties["RayServiceName"]),
        }


@dataclass(frozen=True)
class Props(RayServiceProps):
    """The custom resource's ``ResourceProperties``: everything the check needs, nothing looked
    up elsewhere. ``ConfigHash`` and ``ServiceToken`` are accepted and ignored."""

    app_name: str
    model_id: str
    kv_backend: str
    expected_gpu_nodes: int
    serving_mode: str = "pd"  # optional property ServingMode: pd / aggregated
    # Optional property GpusPerWorker: the GPUs of one engine replica (tensorParallelSize),
    # which each worker pod requests.
    gpus_per_worker: int = 1
    # Optional property RayAuthSecret: the Secret with the Ray token the dashboard requires
    # (rayClusterConfig.authOptions.secretName); empty = the dashboard takes no token.
    ray_auth_secret: str = ""
    # Optional property MetricsPort: the Ray pods' Prometheus port (KubeRay's ``metrics``).
    metrics_port: int = METRICS_PORT
    # Optional property KvBytesPerToken: the model's KV bytes per prompt token
    # (ray_pd_eks/kv_shapes.py), the byte check's floor; 0 = unknown, the generic floor.
    kv_bytes_per_token: int = 0
    # Optional property GpuWorkersPrivileged: whether the GPU workers run privileged
    # (gpuWorkerPrivileged with EFA); "false" adds the setting to EFA failures' messages.
    workers_privileged: bool = True
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    query_interval_seconds: int = DEFAULT_QUERY_INTERVAL_SECONDS

    @property
    def serve_service(self) -> str:
        return f"{self.rayservice}-serve-svc"

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        props_helpers.require(
            properties, REQUIRED_PROPERTIES, construct="readiness", error=ReadinessError
        )
        endpoint = str(properties["ClusterEndpoint"])
        if not endpoint.startswith("https://"):
            raise ReadinessError(
                f"ClusterEndpoint must be the cluster's https:// endpoint, got {endpoint!r}"
            )
        kv_backend = str(properties["KvBackend"]).upper()
        if kv_backend not in KV_BACKENDS:
            raise ReadinessError(
                f"KvBackend must be one of {', '.join(KV_BACKENDS)}, got "
                f"{properties['KvBackend']!r}"
            )
        serving_mode = str(properties.get("ServingMode") or "pd")
        if serving_mode not in SERVING_MODES:
            raise ReadinessError(
                f"ServingMode must be one of {', '.join(SERVING_MODES)}, got {serving_mode!r}"
            )
        return cls(
            **cls.rayservice_fields(properties),
            app_name=str(properties["ApplicationName"]),
            model_id=str(properties["ModelId"]),
            kv_backend=kv_backend,
            expected_gpu_nodes=_positive_int(properties, "ExpectedGpuNodes", None),
            serving_mode=serving_mode,
            gpus_per_worker=_positive_int(properties, "GpusPerWorker", 1),
            ray_auth_secret=str(properties.get("RayAuthSecret") or ""),
            metrics_port=_positive_int(properties, "MetricsPort", METRICS_PORT),
            kv_bytes_per_token=_non_negative_int(properties, "KvBytesPerToken"),
            workers_privileged=str(properties.get("GpuWorkersPrivileged") or "true").lower()
            != "false",
            timeout_seconds=_positive_int(properties, "TimeoutSeconds", DEFAULT_TIMEOUT_SECONDS),
            query_interval_seconds=_positive_int(
                properties, "QueryIntervalSeconds", DEFAULT_QUERY_INTERVAL_SECONDS
            ),
        )


def _non_negative_int(properties: Mapping[str, Any], key: str) -> int:
    """An optional whole number >= 0 (absent = 0)."""
    raw = properties.get(key)
    if raw in (None, ""):
        return 0
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if value < 0:
        raise ReadinessError(f"{key} must be a whole number >= 0, got {raw!r}")
    return value


def _positive_int(properties: Mapping[str, Any], key: str, default: int | None) -> int:
    # CloudFormation delivers every property as a string; tests and direct calls may pass ints.
    return props_helpers.positive_int(properties, key, error=ReadinessError, default=default)
