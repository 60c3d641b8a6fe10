"""Names the stack gives its dashboard and alarms, shared by the constructs and the CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ray_pd_eks.config import AppConfig

CLOUDWATCH_ADDON_NAME = "amazon-cloudwatch-observability"
# The add-on's service account that takes an IAM role through Pod Identity, and its policy.
CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
CLOUDWATCH_AGENT_POLICY = "CloudWatchAgentServerPolicy"
_ADDON_VALUES = (
    Path(__file__).resolve().parent.parent / "assets/addons/cloudwatch-observability.yaml"
)


# What keeps the agent's token off the GPU nodes: the CloudWatch agent (a DaemonSet the add-on's
# operator builds from `agent`) and Fluent Bit (`containerLogs.fluentBit`) run as the one
# service account `cloudwatch-agent`, whose ClusterRole holds `get nodes/proxy` (exec into any
# container through the kubelet). An empty component list replaces the root "every taint"
# toleration for that component (the chart's `amazon-cloudwatch-observability.common.
# tolerations` helper, as for kubeStateMetrics), so neither lands on the tainted GPU nodes.
# aws-observability/helm-charts, chart amazon-cloudwatch-observability:
# templates/linux/cloudwatch-agent-custom-resource.yaml and fluent-bit-daemonset.yaml.
GPU_NODE_TELEMETRY_OFF: dict[str, Any] = {
    "agent": {"tolerations": []},
    "containerLogs": {"fluentBit": {"tolerations": []}},
}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def addon_configuration(gpu_node_telemetry: bool = False) -> dict[str, Any]:
    """The add-on's configuration values (``assets/addons/cloudwatch-observability.yaml``), as
    the stack passes them and as ``preflight`` checks them against the version's schema.
    Without ``gpu_node_telemetry`` (the default) the agent and Fluent Bit stay off the GPU
    nodes (:data:`GPU_NODE_TELEMETRY_OFF`)."""
    values = dict(yaml.safe_load(_ADDON_VALUES.read_text(encoding="utf-8")))
    return values if gpu_node_telemetry else _merge(values, GPU_NODE_TELEMETRY_OFF)


def control_plane_log_group(cluster_name: str) -> str:
    """The name EKS writes the control-plane logs to; the cluster stack creates it first."""
    return f"/aws/eks/{cluster_name}/cluster"


def fixed_log_group_names(config: AppConfig) -> tuple[str, ...]:
    """The log groups whose names the deployment cannot choose (EKS and the CloudWatch add-on
    write to them by name): a copy left by ``retainLogs`` makes the next create fail with
    "already exists", so ``preflight`` looks for them."""
    names = [control_plane_log_group(config.cluster_name)]
    if config.observability_enabled:
        names += log_group_names(config.cluster_name).values()
    return tuple(names)


def resource_prefix(config: AppConfig) -> str:
    """``<clusterName>-<rayServiceName>``: unique per deployment in an account and region."""
    return f"{config.cluster_name}-{config.ray_service_name}"


def dashboard_name(config: AppConfig) -> str:
    return resource_prefix(config)


def alarm_name_prefix(config: AppConfig) -> str:
    """Every alarm of the stack is named ``<prefix><Alarm>`` (``status`` lists them by it)."""
    return f"{resource_prefix(config)}-"


def dashboard_url(region: str, name: str) -> str:
    """The CloudWatch console URL of a dashboard; ``region`` may be a CloudFormation token."""
    return (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#dashboards/dashboard/{name}"
    )


def log_group_names(cluster_name: str) -> dict[str, str]:
    """The log groups the add-on writes to (Fluent Bit: application, dataplane, host), by
    construct id. (The agent's ``performance`` group belongs to classic Container Insights,
    which is off: assets/addons/cloudwatch-observability.yaml.) The stack creates them first
    so retention and removal follow ``logRetentionDays``/``retainLogs`` instead of the add-on
    creating them without expiry."""
    base = f"/aws/containerinsights/{cluster_name}"
    return {
        "Application": f"{base}/application",
        "Dataplane": f"{base}/dataplane",
        "Host": f"{base}/host",
    }


# The alarms whose probe (the value they compare, without the comparison) returns no series in
# a healthy deployment, and why; pd_constructs/observability/promql.py marks exactly these
# MISSING_IS_NORMAL (tests/test_observability.py keeps the two in step). Every other alarm
# returning no series is blind: it can never fire.
NO_SERIES_IS_NORMAL: dict[str, str] = {
    "ErrorRatio": "none until the first 5xx",
    "NixlFailedTransfers": "none until the first failed transfer",
    "MetricsMissing": "none while every watched family has series",
}
_COMPARISON = re.compile(r"\s+(>|<|==|!=|>=|<=)\s+[-+0-9.eE]+$")
_ZERO_FALLBACK = re.compile(r"^\((?P<probe>.*) or vector\(0\)\)$", re.S)


def alarm_probe(query: str) -> str:
    """The value a deployed alarm's PromQL ``query`` compares: ``query`` without its trailing
    comparison and without the ``(... or vector(0))`` that makes nothing count as 0 (the
    inverse of ``AlarmSpec.query`` in pd_constructs/observability/promql.py). Run alone, it
    must return series, or the alarm cannot see what it watches."""
    value = _COMPARISON.sub("", query.strip())
    m = _ZERO_FALLBACK.match(value)
    return m["probe"] if m else value
