"""The PromQL of the dashboard and the alarms, as data (config in, queries out).

Names come from :mod:`ray_pd_eks.metrics` only; the tests parse every expression here with a
real PromQL parser and check each selected series against that list.

Labels the queries rely on:

- ``ray_service`` and ``ray_io_node_type``: set on every series scraped through the Ray
  PodMonitors (``assets/manifests/podmonitors.yaml`` relabels them onto each target).
- ``deployment``: only on Serve's replica series; vLLM's series carry ``ReplicaId`` instead,
  so :func:`by_phase` joins them on it (``ReplicaId`` = Serve's ``replica``).
- ``"@resource.k8s.node.name"``: CloudWatch's PromQL name of the OTLP resource attribute
  ``k8s.node.name`` that the add-on adds to its GPU and EFA series (UTF-8 label names are quoted,
  CloudWatch user guide "PromQL querying").
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_pd_eks.config import AppConfig
from ray_pd_eks.metrics import serve_deployment_names

NODE = '"@resource.k8s.node.name"'
RATE_WINDOW = "5m"


# How an alarm treats a query that returns no series (a PromQL alarm has no TreatMissingData:
# no series is simply OK, so each alarm must say what "nothing" means).
MISSING_IS_ZERO = "zero"  # `or vector(0)`: nothing answering counts as 0 and breaches
MISSING_IS_WATCHED = "watched"  # the MetricsMissing alarm fires when its series are absent
MISSING_IS_NORMAL = "normal"  # no series until the first event (an error, a failed transfer)
# How long a watched family may be absent before MetricsMissing breaches, and then pends.
ABSENT_WINDOW = "15m"


@dataclass(frozen=True)
class AlarmSpec:
    """One PromQL alarm: every series the query returns is a breaching contributor.

    ``probe`` is the value the alarm compares (``query`` is ``probe`` with the comparison):
    run alone it must return series, or the alarm is blind (``alarm-queries`` runs each one).
    ``missing`` says what no series means for it (the ``MISSING_IS_*`` constants), and
    ``watched`` the metric families whose absence the ``MetricsMissing`` alarm reports.
    ``needs_gpu_nodes``: its series come from the GPU workers, which only the CloudWatch agent
    on the GPU nodes scrapes (``gpuNodeTelemetry``).
    """

    id: str
    probe: str
    comparison: str
    meaning: str
    missing: str
    pending_minutes: int = 0  # 0 = alarm on the first breaching evaluation
    recovery_minutes: int = 5
    watched: tuple[str, ...] = ()
    needs_gpu_nodes: bool = True

    @property
    def query(self) -> str:
        value = f"({self.probe} or vector(0))" if self.missing == MISSING_IS_ZERO else self.probe
        return f"{value} {self.comparison}"


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: a title, what it shows, and its queries (legend, PromQL)."""

    title: str
    meaning: str
    queries: tuple[tuple[str, str], ...]


def ray_selector(config: AppConfig, *matchers: str) -> str:
    """Label matchers of the series scraped from this RayService's pods, plus ``matchers``."""
    return "{" + ", ".join((f'ray_service="{config.ray_service_name}"', *matchers)) + "}"


def _phase_map(config: AppConfig) -> str:
    """One series per Serve replica of the prefill/decode deployments, value 1, with labels
    ``ReplicaId`` and ``deployment``. The names hold only letters, digits, ``_``, ``-`` and
    ``:`` (``modelId`` is validated), so they need no regex escaping."""
    phases = "|".join(serve_deployment_names(config.model_id, config.serving_mode))
    sel = ray_selector(config, f'deployment=~"{phases}"')
    return (
        "group by (ReplicaId, deployment) (label_replace("
        f'ray_serve_replica_processing_queries{sel}, "ReplicaId", "$1", "replica", "(.+)"))'
    )


def by_phase(config: AppConfig, expr: str) -> str:
    """``expr`` (vLLM series, keyed by ``ReplicaId``) with the Serve deployment attached, so it
    can be split into ``Prefill:<model>`` and ``Decode:<model>``."""
    return f"({expr}) * on (ReplicaId) group_left (deployment) {_phase_map(config)}"


def _quantile(config: AppConfig, q: float, histogram: str) -> str:
    """The ``q`` quantile of ``histogram`` per phase. CloudWatch stores every OTLP histogram
    (the agent turns a scraped Prometheus histogram into an explicit-bucket one) as an
    exponential histogram, which PromQL sees as one native-histogram series under the family
    name: there is no ``_bucket`` series and no ``le`` label, so the quantile is taken over the
    summed native histograms (ray_pd_eks/metrics.py, ``Metric.series``)."""
    sel = ray_selector(config)
    rate = f"rate({histogram}{sel}[{RATE_WINDOW}])"
    return f"histogram_quantile({q}, sum by (deployment) ({by_phase(config, rate)}))"


# Replicas start rarely (a deploy, a scale-out, a restart): the start panel looks back an hour.
START_WINDOW = "1h"


def _start_minutes(sel: str, which: str) -> str:
    """The p99 of Serve's ``ray_serve_replica_<which>_latency_ms`` over the last hour, per
    deployment, in minutes."""
    histogram = f"ray_serve_replica_{which}_latency_ms{sel}"
    return (
        f"histogram_quantile(0.99, sum by (deployment) (increase({histogram}[{START_WINDOW}])))"
        " / 60000"
    )


def _absent(config: AppConfig, family: str) -> str:
    """One series, labelled ``metric=<family>``, when ``family`` of this RayService has had
    no series for :data:`ABSENT_WINDOW`."""
    sel = ray_selector(config)
    return (
        f'label_replace(absent_over_time({family}{sel}[{ABSENT_WINDOW}]), "metric", "{family}", '
        '"", "")'
    )


def _all_alarm_specs(config: AppConfig) -> tuple[AlarmSpec, ...]:
    sel = ray_selector(config)
    worker = ray_selector(config, 'ray_io_node_type="worker"')
    head = ray_selector(config, 'ray_io_node_type="head"')
    w = RATE_WINDOW
    server_errors = ray_selector(config, 'error_code=~"5.."')
    errors = (
        f"sum by (application) (rate(ray_serve_num_http_error_requests_total{server_errors}[{w}]))"
    )
    requests = f"sum by (application) (rate(ray_serve_num_http_requests_total{sel}[{w}]))"
    # Every vLLM alarm joins on Serve's replica gauge (by_phase): without it, they see nothing.
    phases = ("ray_serve_replica_processing_queries",)
    failed = f"increase(ray_vllm_nixl_num_failed_transfers_total{sel}[{w}])"
    return (
        AlarmSpec(
            "TtftP95",
            _quantile(config, 0.95, "ray_vllm_time_to_first_token_seconds"),
            f"> {config.alarm_ttft_p95_seconds:g}",
            f"Time to first token p95 of a phase above {config.alarm_ttft_p95_seconds:g} s "
            "for 5 minutes: prompts queue or prefill is saturated (decode: the KV transfer "
            "is slow).",
            MISSING_IS_WATCHED,
            pending_minutes=5,
            watched=("ray_vllm_time_to_first_token_seconds", *phases),
        ),
        AlarmSpec(
            "InterTokenP95",
            _quantile(config, 0.95, "ray_vllm_inter_token_latency_seconds"),
            f"> {config.alarm_inter_token_p95_seconds:g}",
            f"Inter-token latency p95 of a phase above {config.alarm_inter_token_p95_seconds:g}"
            " s for 5 minutes: decode batches are too large or the GPU is contended.",
            MISSING_IS_WATCHED,
            pending_minutes=5,
            watched=("ray_vllm_inter_token_latency_seconds", *phases),
        ),
        AlarmSpec(
            "ErrorRatio",
            f"({errors}) / ({requests})",
            f"> {config.alarm_error_percent / 100:g}",
            f"More than {config.alarm_error_percent:g} % of HTTP requests to the Serve app "
            "end in a 5xx for 5 minutes.",
            # Serve creates the error counter at the first error: none is the healthy state.
            MISSING_IS_NORMAL,
            pending_minutes=5,
            needs_gpu_nodes=False,  # Serve's HTTP proxy runs on the head
        ),
        AlarmSpec(
            "KvCacheFull",
            f"max by (deployment) ({by_phase(config, f'ray_vllm_kv_cache_usage_perc{sel}')})",
            f"> {config.alarm_kv_cache_percent / 100:g}",
            f"An engine's KV cache above {config.alarm_kv_cache_percent:g} % for 10 minutes: "
            "requests will be preempted or wait; add replicas or lower maxModelLen.",
            MISSING_IS_WATCHED,
            pending_minutes=10,
            watched=("ray_vllm_kv_cache_usage_perc", *phases),
        ),
        AlarmSpec(
            "RequestsWaiting",
            f"sum by (deployment) ({by_phase(config, f'ray_vllm_num_requests_waiting{sel}')})",
            "> 0",
            "Requests have been waiting in an engine's queue for 5 minutes without pause: the "
            "phase is at capacity.",
            MISSING_IS_WATCHED,
            pending_minutes=5,
            watched=("ray_vllm_num_requests_waiting", *phases),
        ),
        AlarmSpec(
            "NixlFailedTransfers",
            f"sum by (deployment) ({by_phase(config, failed)})",
            "> 0",
            "A NIXL KV-cache transfer failed: the request was recomputed or failed; check the "
            "EFA panel and `python -m ray_pd_eks efa-check`.",
            # The failure counter appears with the first failure: none is the healthy state.
            MISSING_IS_NORMAL,
            recovery_minutes=10,
        ),
        AlarmSpec(
            "HeadDown",
            f"count(up{head} == 1)",
            "< 1",
            "The Ray head's metrics endpoint has not answered for 5 minutes: the head pod is "
            "down or restarting (Serve's HTTP proxy and controller run there).",
            MISSING_IS_ZERO,
            pending_minutes=5,
            needs_gpu_nodes=False,
        ),
        AlarmSpec(
            "WorkersDown",
            f"count(up{worker} == 1)",
            f"< {config.worker_replicas}",
            f"Fewer than {config.worker_replicas} GPU workers have answered for 10 minutes: a "
            "worker pod or its GPU node is gone.",
            MISSING_IS_ZERO,
            pending_minutes=10,
        ),
    )


def alarm_specs(config: AppConfig) -> tuple[AlarmSpec, ...]:
    """The alarms of ``config``: without ``gpuNodeTelemetry`` nothing scrapes the GPU workers,
    so the alarms on their series are left out rather than left blind; last, the
    ``MetricsMissing`` alarm over the families the others watch."""
    specs = tuple(
        s for s in _all_alarm_specs(config) if config.gpu_node_telemetry or not s.needs_gpu_nodes
    )
    families = sorted({f for s in specs for f in s.watched})
    if not families:
        return specs
    absent = " or ".join(_absent(config, f) for f in families)
    watchdog = AlarmSpec(
        "MetricsMissing",
        absent,
        "== 1",
        f"A metric family that an alarm reads has had no series for {ABSENT_WINDOW} (the "
        "contributor's `metric` label names it): that alarm cannot fire. A restarted, idle "
        "deployment shows it until its first request; otherwise check the scrape "
        "(`kubectl get podmonitors -A`) and run `python -m ray_pd_eks alarm-queries`.",
        # Its own query returns a series exactly when something is missing.
        MISSING_IS_NORMAL,
        pending_minutes=15,
        needs_gpu_nodes=any(s.needs_gpu_nodes for s in specs if s.watched),
    )
    return (*specs, watchdog)


def dashboard_panels(config: AppConfig) -> tuple[Panel, ...]:
    sel = ray_selector(config)
    w = RATE_WINDOW
    ns = config.namespace

    def quantiles(histogram: str) -> tuple[tuple[str, str], ...]:
        return tuple(
            (f"p{int(q * 100)}", _quantile(config, q, histogram)) for q in (0.5, 0.9, 0.99)
        )

    def per_phase(expr: str, agg: str = "sum") -> str:
        return f"{agg} by (deployment) ({by_phase(config, expr)})"

    return (
        Panel(
            "Requests and errors",
            "HTTP requests per second at the Serve proxy by status code, and 5xx errors.",
            (
                (
                    "requests/s",
                    f"sum by (status_code) (rate(ray_serve_num_http_requests_total{sel}[{w}]))",
                ),
                (
                    "errors/s",
                    "sum by (error_code) "
                    f"(rate(ray_serve_num_http_error_requests_total{sel}[{w}]))",
                ),
            ),
        ),
        Panel(
            "Time to first token per phase",
            "p50/p90/p99 of the time to the first token, per deployment (Prefill:/Decode:).",
            quantiles("ray_vllm_time_to_first_token_seconds"),
        ),
        Panel(
            "Inter-token latency per phase",
            "p50/p90/p99 of the time between two output tokens, per deployment.",
            quantiles("ray_vllm_inter_token_latency_seconds"),
        ),
        Panel(
            "Request latency and throughput",
            "End-to-end request latency and time per output token (p90) per phase, the Serve "
            "proxy's HTTP latency (p99, ms) and output tokens generated per second.",
            (
                ("e2e p90", _quantile(config, 0.9, "ray_vllm_e2e_request_latency_seconds")),
                (
                    "time per output token p90",
                    _quantile(config, 0.9, "ray_vllm_request_time_per_output_token_seconds"),
                ),
                (
                    "HTTP p99 ms",
                    "histogram_quantile(0.99, sum "
                    f"(rate(ray_serve_http_request_latency_ms{sel}[{w}])))",
                ),
                (
                    "output tokens/s",
                    per_phase(f"rate(ray_vllm_generation_tokens_total{sel}[{w}])"),
                ),
            ),
        ),
        Panel(
            "KV cache and queues per engine",
            "KV-cache usage (1 = full), running and waiting requests, prefix-cache hit ratio.",
            (
                ("KV cache used", per_phase(f"ray_vllm_kv_cache_usage_perc{sel}", "max")),
                ("running", per_phase(f"ray_vllm_num_requests_running{sel}")),
                ("waiting", per_phase(f"ray_vllm_num_requests_waiting{sel}")),
                (
                    "prefix-cache hit ratio",
                    per_phase(f"rate(ray_vllm_prefix_cache_hits_total{sel}[{w}])")
                    + " / "
                    + per_phase(f"rate(ray_vllm_prefix_cache_queries_total{sel}[{w}])"),
                ),
            ),
        ),
        Panel(
            "NIXL KV transfer",
            "Transfer time p50/p99, bytes per second moved, and failed transfers, failed "
            "notifications and expired KV requests (tracked on prefill).",
            (
                (
                    "p50",
                    _quantile(config, 0.5, "ray_vllm_nixl_xfer_time_seconds"),
                ),
                (
                    "p99",
                    _quantile(config, 0.99, "ray_vllm_nixl_xfer_time_seconds"),
                ),
                (
                    "bytes/s",
                    per_phase(f"histogram_sum(rate(ray_vllm_nixl_bytes_transferred{sel}[{w}]))"),
                ),
                (
                    "failed transfers",
                    per_phase(f"increase(ray_vllm_nixl_num_failed_transfers_total{sel}[{w}])"),
                ),
                (
                    "failed notifications",
                    per_phase(f"increase(ray_vllm_nixl_num_failed_notifications_total{sel}[{w}])"),
                ),
                (
                    "expired KV requests",
                    per_phase(f"increase(ray_vllm_nixl_num_kv_expired_reqs_total{sel}[{w}])"),
                ),
            ),
        ),
        Panel(
            "Replica start",
            "Per deployment, over the last hour: minutes from Serve starting a replica to its "
            "serving (on a new GPU node: the node's launch, join, image, weights and engine; "
            "p99), minutes of its constructor (the vLLM engine's start; p99), and how many "
            "replicas started.",
            (
                ("start to serving p99 min", _start_minutes(sel, "startup")),
                ("engine start p99 min", _start_minutes(sel, "initialization")),
                (
                    "replicas started",
                    "histogram_count(sum by (deployment) "
                    f"(increase(ray_serve_replica_startup_latency_ms{sel}[{START_WINDOW}])))",
                ),
            ),
        ),
        Panel(
            "GPU per node",
            "GPU utilisation (%) and framebuffer memory used (MiB) per GPU node (DCGM).",
            (
                ("utilisation %", f"avg by ({NODE}) (DCGM_FI_DEV_GPU_UTIL)"),
                ("memory used MiB", f"sum by ({NODE}) (DCGM_FI_DEV_FB_USED)"),
                ("memory free MiB", f"sum by ({NODE}) (DCGM_FI_DEV_FB_FREE)"),
            ),
        ),
        Panel(
            "EFA per node",
            "EFA receive/transmit bytes per second and error counters per node: drops, "
            "retransmitted packets, unresponsive remotes, impaired connections.",
            (
                ("rx bytes/s", f"sum by ({NODE}) (rate(efa_rx_bytes[{w}]))"),
                ("tx bytes/s", f"sum by ({NODE}) (rate(efa_tx_bytes[{w}]))"),
                ("rx dropped", f"sum by ({NODE}) (increase(efa_rx_dropped[{w}]))"),
                ("retransmitted packets", f"sum by ({NODE}) (increase(efa_retrans_pkts[{w}]))"),
                (
                    "unresponsive remotes",
                    f"sum by ({NODE}) (increase(efa_unresponsive_remote_events[{w}]))",
                ),
                (
                    "impaired connections",
                    f"sum by ({NODE}) (increase(efa_impaired_remote_conn_events[{w}]))",
                ),
            ),
        ),
        Panel(
            "Nodes and pods ready",
            "Ready nodes, ready pods in the Ray namespace, and Ray pods whose metrics answer.",
            (
                (
                    "nodes ready",
                    'sum(kube_node_status_condition{condition="Ready", status="true"})',
                ),
                (
                    "pods ready",
                    f'sum(kube_pod_status_ready{{namespace="{ns}", condition="true"}})',
                ),
                ("Ray pods up", f"sum by (ray_io_node_type) (up{sel})"),
            ),
        ),
    )
