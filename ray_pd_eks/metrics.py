"""The one list of metric names the dashboard and the alarms may query.

Every name was read from the source of the version that produces it, not from memory; each
entry names that file and version. The tests parse every PromQL expression of the dashboard and
the alarms and fail when one selects a series that is not listed here.

How the names come about:

- **Ray 2.58** exports every application metric through its OpenTelemetry Prometheus reader
  with the prefix ``ray_`` (``ray/_private/telemetry/open_telemetry_metric_recorder.py``,
  ``NAMESPACE = "ray"``) on the pod's metrics port (KubeRay's ``metrics``, 8080). Counters get
  the OpenMetrics ``_total`` suffix; histograms the ``_bucket``/``_sum``/``_count`` series
  there, but that is not what CloudWatch stores (next point).
- **CloudWatch** stores every OTLP histogram, explicit-bucket ones included (what the agent
  makes of a scraped Prometheus histogram), as an **exponential histogram** (CloudWatch user
  guide, "How CloudWatch stores histogram metrics", ``metrics-otel-histograms``). PromQL sees
  it as one native-histogram series named after the family: ``x`` rather than ``x_bucket``
  (no ``le`` label), ``x_sum``, ``x_count``. Quantiles are ``histogram_quantile(q, sum by
  (...) (rate(x[5m])))``, sums and counts ``histogram_sum(...)``/``histogram_count(...)``.
- **vLLM 0.26** engine metrics reach Ray through ``RayPrometheusStatLogger``
  (``vllm/v1/metrics/ray_wrappers.py``), which Ray Serve LLM 2.58 installs because
  ``LLMConfig.log_engine_metrics`` defaults to true
  (``ray/llm/_internal/serve/engines/vllm/vllm_engine.py``). The wrapper replaces every
  character outside ``[a-zA-Z0-9_]`` with ``_`` (``vllm:kv_cache_usage_perc`` becomes
  ``vllm_kv_cache_usage_perc``, exported as ``ray_vllm_kv_cache_usage_perc``) and adds the tag
  ``ReplicaId`` (the Serve replica's unique id) to vLLM's own ``model_name`` and ``engine``.
- vLLM's series do not carry the Serve deployment, so prefill and decode are told apart by
  joining on the replica: Serve's replica gauges carry ``deployment`` and ``replica`` (the same
  unique id; ``ray/serve/metrics.py`` and ``ray/serve/context.py``), and the PD builder names
  the deployments ``Prefill:<model>`` and ``Decode:<model>``
  (``ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py``, with
  ``<model>`` = the model id with ``/`` -> ``--`` and ``.`` -> ``_``,
  ``ray/llm/_internal/serve/core/server/builder.py``).
- GPU, EFA and readiness series come from the Amazon CloudWatch Observability add-on's OTel
  Container Insights pipelines (DCGM exporter, the agent's EFA receiver, kube-state-metrics),
  and ``up`` is kept by the agent for every PodMonitor target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]

_VLLM_LOGGERS = "vllm 0.26 vllm/v1/metrics/loggers.py"
_VLLM_NIXL = "vllm 0.26 vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"
_SERVE_INGRESS = "ray 2.58 ray/serve/_private/request_ingress_metrics.py"
_SERVE_REPLICA = "ray 2.58 ray/serve/_private/replica.py"
_SERVE_CONTROLLER = "ray 2.58 ray/serve/_private/deployment_state.py"
_DCGM = (
    "amazon-cloudwatch-observability chart templates/linux/dcgm-exporter-daemonset.yaml "
    "(metricsConfig)"
)
_EFA = "amazon-contributing/opentelemetry-collector-contrib receiver/awsefareceiver/metadata.yaml"
_KSM = "kube-state-metrics (the add-on's OTel Container Insights cluster scraper)"
_AGENT = "CloudWatch agent: keeps `up` for every ServiceMonitor/PodMonitor target (user guide)"


@dataclass(frozen=True)
class Metric:
    """One metric family as it is queried: ``name`` is the exported family name (counters
    already with ``_total``), ``labels`` the labels the queries here may rely on."""

    name: str
    kind: Kind
    source: str
    labels: tuple[str, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        """The series names a query can select in CloudWatch: the family name, for a histogram
        too (a native histogram there; its ``_bucket``/``_sum``/``_count`` do not exist)."""
        return (self.name,)

    @property
    def exposition_series(self) -> tuple[str, ...]:
        """The series names on the pod's own metrics port (Prometheus text format), which the
        readiness check reads through the pod proxy: a histogram's ``_bucket``/``_sum``/
        ``_count`` there."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


_VLLM_LABELS = ("model_name", "engine", "ReplicaId")

METRICS: tuple[Metric, ...] = (
    # vLLM engine (through Ray), one series set per engine replica.
    Metric("ray_vllm_time_to_first_token_seconds", "histogram", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_inter_token_latency_seconds", "histogram", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric(
        "ray_vllm_request_time_per_output_token_seconds",
        "histogram",
        _VLLM_LOGGERS,
        _VLLM_LABELS,
    ),
    Metric("ray_vllm_e2e_request_latency_seconds", "histogram", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_kv_cache_usage_perc", "gauge", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_num_requests_running", "gauge", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_num_requests_waiting", "gauge", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_prefix_cache_queries_total", "counter", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_prefix_cache_hits_total", "counter", _VLLM_LOGGERS, _VLLM_LABELS),
    Metric("ray_vllm_generation_tokens_total", "counter", _VLLM_LOGGERS, _VLLM_LABELS),
    # NIXL KV transfer (decode pulls from prefill), per engine replica.
    Metric("ray_vllm_nixl_xfer_time_seconds", "histogram", _VLLM_NIXL, _VLLM_LABELS),
    Metric("ray_vllm_nixl_bytes_transferred", "histogram", _VLLM_NIXL, _VLLM_LABELS),
    Metric("ray_vllm_nixl_num_failed_transfers_total", "counter", _VLLM_NIXL, _VLLM_LABELS),
    Metric("ray_vllm_nixl_num_failed_notifications_total", "counter", _VLLM_NIXL, _VLLM_LABELS),
    Metric("ray_vllm_nixl_num_kv_expired_reqs_total", "counter", _VLLM_NIXL, _VLLM_LABELS),
    # Ray Serve HTTP ingress and replicas.
    Metric(
        "ray_serve_num_http_requests_total",
        "counter",
        _SERVE_INGRESS,
        ("route", "method", "application", "status_code"),
    ),
    Metric(
        "ray_serve_num_http_error_requests_total",
        "counter",
        _SERVE_INGRESS,
        ("route", "error_code", "method", "application"),
    ),
    Metric(
        "ray_serve_http_request_latency_ms",
        "histogram",
        _SERVE_INGRESS,
        ("method", "route", "application", "status_code"),
    ),
    Metric(
        "ray_serve_replica_processing_queries",
        "gauge",
        _SERVE_REPLICA,
        ("deployment", "replica", "application"),
    ),
    # Serve's controller (on the head), once per replica that turns RUNNING: from the replica's
    # start (before its node exists, for a replica a scale-out waits for) and its constructor
    # (the vLLM engine's start, for an engine replica). Buckets: pd_constructs/serving/workload.py
    # REPLICA_START_BUCKETS_MS, since Serve's own stop at 4 minutes.
    Metric(
        "ray_serve_replica_startup_latency_ms",
        "histogram",
        _SERVE_CONTROLLER,
        ("deployment", "application"),
    ),
    Metric(
        "ray_serve_replica_initialization_latency_ms",
        "histogram",
        _SERVE_CONTROLLER,
        ("deployment", "application"),
    ),
    # GPUs (DCGM exporter on the GPU nodes).
    Metric("DCGM_FI_DEV_GPU_UTIL", "gauge", _DCGM),
    Metric("DCGM_FI_DEV_FB_USED", "gauge", _DCGM),
    Metric("DCGM_FI_DEV_FB_FREE", "gauge", _DCGM),
    # EFA (sysfs hw_counters of each EFA device, correlated to the pod holding it).
    Metric("efa_rx_bytes", "counter", _EFA, ("device", "port")),
    Metric("efa_tx_bytes", "counter", _EFA, ("device", "port")),
    Metric("efa_rx_dropped", "counter", _EFA, ("device", "port")),
    Metric("efa_retrans_pkts", "counter", _EFA, ("device", "port")),
    Metric("efa_unresponsive_remote_events", "counter", _EFA, ("device", "port")),
    Metric("efa_impaired_remote_conn_events", "counter", _EFA, ("device", "port")),
    # Readiness.
    Metric("kube_node_status_condition", "gauge", _KSM, ("node", "condition", "status")),
    Metric("kube_pod_status_ready", "gauge", _KSM, ("namespace", "pod", "condition")),
    Metric("up", "gauge", _AGENT),
)

BY_NAME = {m.name: m for m in METRICS}
SERIES = frozenset(s for m in METRICS for s in m.series)
EXPOSITION_SERIES = frozenset(s for m in METRICS for s in m.exposition_series)


def serve_deployment_names(model_id: str, serving_mode: str = "pd") -> tuple[str, ...]:
    """The Serve deployments running vLLM engines for ``model_id``: (prefill, decode) from the
    PD builder, or the one ``LLMServer:<model>`` of ``build_openai_app`` (``servingMode=
    aggregated``: no name prefix, so the server class name, as in
    ``ray/llm/_internal/serve/core/server/builder.py``)."""
    name = model_id.replace("/", "--").replace(".", "_")
    if serving_mode == "aggregated":
        return (f"LLMServer:{name}",)
    return f"Prefill:{name}", f"Decode:{name}"
