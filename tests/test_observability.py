"""Observability: the CloudWatch add-on, the PodMonitors, the PromQL alarms and the dashboard.

Nothing here can run against CloudWatch offline, so the parts are checked against what they
must agree with: every PromQL expression is parsed by a real PromQL parser, every series it
selects is in the one list of names taken from the Ray/vLLM sources (``ray_pd_eks.metrics``),
the PodMonitors validate against prometheus-operator's CRD schema (kept in tests/schemas/), and
they select the port the rendered RayService declares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml

from pd_constructs.network.network_policy import RAY_PORTS
from pd_constructs.observability.observability import (
    ADDON_NAME,
    AGENT_NAMESPACE,
    AGENT_SERVICE_ACCOUNT,
    CHART_PLOT_OPTIONS,
    CHART_STEP_SECONDS,
    LEGEND_LABEL,
    chart_properties,
    legend_query,
    panel_guide_markdown,
    render_podmonitors,
)
from pd_constructs.observability.promql import (
    MISSING_IS_NORMAL,
    MISSING_IS_WATCHED,
    MISSING_IS_ZERO,
    alarm_specs,
    dashboard_panels,
)
from pd_constructs.serving.workload import RAY_METRIC_CARDINALITY, render_rayservice
from ray_pd_eks import metrics
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.monitoring import (
    addon_configuration,
    alarm_name_prefix,
    dashboard_name,
    log_group_names,
)
from tests.arns import own_arn
from tests.conftest import ALARM_EMAIL
from tests.netpol import Cluster, External, Pod
from tests.synth import TEST_REGION, Synthesized, resolve
from tests.test_network_policies import World

SCHEMAS = Path(__file__).resolve().parent / "schemas"
# Every alarm exists only with the agent on the GPU nodes (gpuNodeTelemetry).
TELEMETRY = DEFAULTS.with_overrides({"gpuNodeTelemetry": True})
CONFIGS = {
    "default": TELEMETRY,
    "variant": TELEMETRY.with_overrides(
        {"modelId": "llama-3.1.8b", "rayServiceName": "svc", "decodeReplicas": 2, "gpuNodeCount": 3}
    ),
}


# -- PromQL: parsed, and every name from the one list ---------------------------------------


def selected_series(query: str) -> set[str]:
    """Every metric name a PromQL expression selects, found by walking the parsed AST."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        selector = node.vector_selector if isinstance(node, promql_parser.MatrixSelector) else node
        if isinstance(selector, promql_parser.VectorSelector):
            name = selector.name or next(
                (m.value for m in selector.matchers.matchers if m.name == "__name__"), None
            )
            assert name, f"selector without a metric name in {query}"
            names.add(name)
        for child in _children(node):
            visit(child)

    visit(promql_parser.parse(query))
    return names


def _children(node: Any) -> list[Any]:
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.expr, *([node.param] if node.param is not None else [])]
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr)):
        return [node.expr]
    if isinstance(node, promql_parser.SubqueryExpr):
        return [node.expr]
    return []


def every_query(config: AppConfig) -> list[tuple[str, str]]:
    queries = [(f"alarm {a.id}", a.query) for a in alarm_specs(config)]
    queries += [
        (f"panel {p.title}: {leg}", q) for p in dashboard_panels(config) for leg, q in p.queries
    ]
    return queries


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_every_query_parses_and_selects_only_listed_series(config_name: str) -> None:
    used: set[str] = set()
    for where, query in every_query(CONFIGS[config_name]):
        names = selected_series(query)
        assert names, where
        assert names <= metrics.SERIES, f"{where} selects unlisted {names - metrics.SERIES}"
        used |= names
    # The list holds nothing the dashboard and alarms do not use (one place, no dead names).
    unused = {m.name for m in metrics.METRICS if not set(m.series) & used}
    assert unused == set()


HISTOGRAM_FUNCTIONS = frozenset(
    {"histogram_quantile", "histogram_sum", "histogram_count", "histogram_avg"}
)


PRESENCE_FUNCTIONS = ("absent", "absent_over_time")


def histogram_misuse(query: str) -> list[str]:
    """How ``query`` reads histograms in a way CloudWatch cannot answer: a classic-histogram
    series (``_bucket``/``_sum``/``_count``), a grouping by ``le``, or a histogram family used
    outside a ``histogram_*`` function (CloudWatch stores OTLP histograms as exponential
    histograms, PromQL native histograms)."""
    families = {m.name for m in metrics.METRICS if m.kind == "histogram"}
    found: list[str] = []

    def visit(node: Any, inside: bool) -> None:
        if isinstance(node, promql_parser.Call) and node.func.name in HISTOGRAM_FUNCTIONS:
            inside = True
        # A presence check reads whether a series exists, of any type.
        if isinstance(node, promql_parser.Call) and node.func.name in PRESENCE_FUNCTIONS:
            inside = True
        modifier = node.modifier if isinstance(node, promql_parser.AggregateExpr) else None
        if modifier is not None and "le" in list(modifier.labels):
            found.append("grouping by le")
        selector = node.vector_selector if isinstance(node, promql_parser.MatrixSelector) else node
        if isinstance(selector, promql_parser.VectorSelector) and selector.name:
            name = selector.name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name.removesuffix(suffix) in families:
                    found.append(f"classic series {name}")
            if name in families and not inside:
                found.append(f"{name} outside a histogram_* function")
        for child in _children(node):
            visit(child, inside)

    visit(promql_parser.parse(query), False)
    return found


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_histograms_are_queried_as_cloudwatch_stores_them(config_name: str) -> None:
    uses = 0
    for where, query in every_query(CONFIGS[config_name]):
        assert histogram_misuse(query) == [], where
        uses += "histogram_" in query
    assert uses >= 5  # TTFT and inter-token alarms and panels, NIXL, HTTP latency


def test_the_histogram_check_rejects_the_classic_form() -> None:
    classic = (
        "histogram_quantile(0.95, sum by (le) "
        "(rate(ray_vllm_time_to_first_token_seconds_bucket[5m])))"
    )
    assert histogram_misuse(classic) == [
        "grouping by le",
        "classic series ray_vllm_time_to_first_token_seconds_bucket",
    ]
    assert histogram_misuse("rate(ray_vllm_nixl_bytes_transferred[5m])") == [
        "ray_vllm_nixl_bytes_transferred outside a histogram_* function"
    ]


def test_the_name_check_rejects_a_series_that_is_not_listed() -> None:
    names = selected_series(
        "sum(rate(ray_vllm_time_to_first_token_seconds_count[5m])) + vllm:num_requests_waiting"
    )
    assert names == {"ray_vllm_time_to_first_token_seconds_count", "vllm:num_requests_waiting"}
    assert not names <= metrics.SERIES


def test_the_parser_rejects_malformed_promql() -> None:
    with pytest.raises(Exception, match="unclosed"):
        promql_parser.parse("sum(rate(up[5m])")


def test_utf8_resource_labels_parse_as_cloudwatch_quotes_them() -> None:
    (panel,) = [p for p in dashboard_panels(DEFAULTS) if p.title == "GPU per node"]
    expr = promql_parser.parse(panel.queries[0][1])
    assert isinstance(expr, promql_parser.AggregateExpr)
    assert expr.modifier is not None
    assert list(expr.modifier.labels) == ["@resource.k8s.node.name"]


def test_phases_are_the_deployments_the_pd_builder_names() -> None:
    assert metrics.serve_deployment_names("qwen3.5-9b") == (
        "Prefill:qwen3_5-9b",
        "Decode:qwen3_5-9b",
    )
    (ttft,) = [a for a in alarm_specs(TELEMETRY) if a.id == "TtftP95"]
    assert 'deployment=~"Prefill:qwen3_5-9b|Decode:qwen3_5-9b"' in ttft.query
    # vLLM series are joined to Serve's deployment through the replica id.
    assert "on (ReplicaId) group_left (deployment)" in ttft.query
    assert '"ReplicaId", "$1", "replica", "(.+)"' in ttft.query


def test_aggregated_serving_splits_by_its_one_llm_server_deployment(
    token_app: Synthesized,
) -> None:
    assert token_app.config.serving_mode == "aggregated"
    assert metrics.serve_deployment_names("qwen3.5-9b", "aggregated") == ("LLMServer:qwen3_5-9b",)
    queries = [
        a["Properties"]["EvaluationCriteria"]["PromQLCriteria"]["Query"]
        for a in token_app.resources("Workload", "AWS::CloudWatch::Alarm").values()
    ]
    joined = [q for q in queries if "group_left (deployment)" in q]
    assert joined and all('deployment=~"LLMServer:qwen3_5-9b"}' in q for q in joined)


def test_every_ray_query_is_scoped_to_the_rayservice() -> None:
    for where, query in every_query(CONFIGS["variant"]):
        names = selected_series(query)
        if names & {s for m in metrics.METRICS if m.name.startswith("ray_") for s in m.series}:
            assert query.count('ray_service="svc"') >= len(re.findall(r"\bray_\w+\{", query)), where


# -- alarms ------------------------------------------------------------------------------------


def test_alarms_carry_the_thresholds_of_the_settings() -> None:
    c = TELEMETRY.with_overrides(
        {
            "alarmTtftP95Seconds": 1.5,
            "alarmInterTokenP95Seconds": 0.05,
            "alarmErrorPercent": 2.5,
            "alarmKvCachePercent": 95,
        }
    )
    by_id = {a.id: a for a in alarm_specs(c)}
    assert by_id["TtftP95"].query.endswith("> 1.5")
    assert by_id["InterTokenP95"].query.endswith("> 0.05")
    assert by_id["ErrorRatio"].query.endswith("> 0.025")
    assert by_id["KvCacheFull"].query.endswith("> 0.95")
    assert by_id["WorkersDown"].query.endswith("< 2")
    (down,) = [a for a in alarm_specs(CONFIGS["variant"]) if a.id == "WorkersDown"]
    assert down.query.endswith("< 3")


def test_synthesized_alarms_are_the_promql_alarms_wired_to_the_topic(
    token_app: Synthesized,
) -> None:
    app = token_app  # every alarm: the agent runs on the GPU nodes there (gpuNodeTelemetry)
    alarms = app.resources("Workload", "AWS::CloudWatch::Alarm")
    (topic_id,) = app.resources("Workload", "AWS::SNS::Topic")
    specs = {a.id: a for a in alarm_specs(app.config)}
    assert len(alarms) >= 9 and len(alarms) == len(specs)
    seen = {}
    for alarm in alarms.values():
        props = alarm["Properties"]
        name = props["AlarmName"]
        assert name.startswith(alarm_name_prefix(app.config))
        spec = specs[name.removeprefix(alarm_name_prefix(app.config))]
        criteria = props["EvaluationCriteria"]["PromQLCriteria"]
        assert criteria["Query"] == spec.query
        assert criteria.get("PendingPeriod", 0) == spec.pending_minutes * 60
        assert criteria["RecoveryPeriod"] == spec.recovery_minutes * 60
        assert props["EvaluationInterval"] == 60
        assert props["AlarmActions"] == [{"Ref": topic_id}]
        assert props["OKActions"] == [{"Ref": topic_id}]
        seen[spec.id] = criteria.get("PendingPeriod", 0)
    # The issue's durations: KV cache 10 min, requests waiting 5 min, any NIXL failure at once.
    assert (seen["KvCacheFull"], seen["RequestsWaiting"], seen["NixlFailedTransfers"]) == (
        600,
        300,
        0,
    )


# -- what an empty query means ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_alarm_says_what_no_series_means(name: str) -> None:
    """A PromQL alarm has no TreatMissingData: no series is OK. Each alarm takes a stance, and
    each watched family is in the MetricsMissing alarm, which fires when it is absent."""
    specs = alarm_specs(CONFIGS[name])
    *alarms, watchdog = specs
    assert watchdog.id == "MetricsMissing"
    stances = {a.id: a.missing for a in alarms}
    assert stances == {
        "TtftP95": MISSING_IS_WATCHED,
        "InterTokenP95": MISSING_IS_WATCHED,
        "ErrorRatio": MISSING_IS_NORMAL,  # the error counter appears with the first error
        "KvCacheFull": MISSING_IS_WATCHED,
        "RequestsWaiting": MISSING_IS_WATCHED,
        "NixlFailedTransfers": MISSING_IS_NORMAL,  # the failure counter: the first failure
        "HeadDown": MISSING_IS_ZERO,
        "WorkersDown": MISSING_IS_ZERO,
    }
    for alarm in alarms:
        if alarm.missing == MISSING_IS_ZERO:
            # Nothing answering is 0, which breaches.
            assert alarm.query == f"({alarm.probe} or vector(0)) {alarm.comparison}"
        else:
            assert alarm.query == f"{alarm.probe} {alarm.comparison}"
        if alarm.missing == MISSING_IS_WATCHED:
            # Every family the alarm selects is watched (an absent one would blind it).
            assert selected_series(alarm.probe) <= set(alarm.watched), alarm.id
            assert alarm.watched
            for family in alarm.watched:
                assert f"absent_over_time({family}{{" in watchdog.query
                assert f'"metric", "{family}"' in watchdog.query
    assert watchdog.query.endswith(" == 1") and watchdog.pending_minutes == 15


def test_without_gpu_node_telemetry_the_gpu_workers_alarms_are_left_out_not_blind() -> None:
    """Nothing scrapes the GPU workers then (the agent scrapes its own node only): alarms on
    their series would never see one, so they are not created."""
    ids = [a.id for a in alarm_specs(DEFAULTS.with_overrides({"gpuNodeTelemetry": False}))]
    assert ids == ["ErrorRatio", "HeadDown"]
    assert {a.id for a in alarm_specs(TELEMETRY)} >= {"TtftP95", "WorkersDown", "MetricsMissing"}


def test_thresholds_of_the_settings_reach_the_template(token_app: Synthesized) -> None:
    queries = {
        a["Properties"]["AlarmName"]: a["Properties"]["EvaluationCriteria"]["PromQLCriteria"][
            "Query"
        ]
        for a in token_app.resources("Workload", "AWS::CloudWatch::Alarm").values()
    }
    prefix = alarm_name_prefix(token_app.config)
    assert queries[f"{prefix}TtftP95"].endswith("> 1.5")
    assert queries[f"{prefix}KvCacheFull"].endswith("> 0.95")


def test_topic_is_encrypted_with_a_rotating_key_cloudwatch_may_use(
    default_app: Synthesized,
) -> None:
    topic = default_app.only("Workload", "AWS::SNS::Topic")
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = default_app.templates["Workload"]["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Delete" and key["Properties"]["PendingWindowInDays"] == 7
    cw_grants = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    (grant,) = cw_grants
    assert set(grant["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    prefix = alarm_name_prefix(default_app.config)
    # Only this account's alarms of this stack (their names share the prefix) may use the key.
    our_alarms = {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnLike": {"aws:SourceArn": own_arn("cloudwatch", f"alarm:{prefix}*")},
    }
    assert grant["Condition"] == our_alarms
    policy = default_app.only("Workload", "AWS::SNS::TopicPolicy")["Properties"]
    statements = policy["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in json.dumps(s) for s in statements)
    (publish,) = [
        s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert publish["Action"] == "sns:Publish"
    assert publish["Condition"] == our_alarms
    # Every alarm is named with that prefix, so each one may still publish.
    alarms = default_app.resources("Workload", "AWS::CloudWatch::Alarm")
    assert alarms and all(a["Properties"]["AlarmName"].startswith(prefix) for a in alarms.values())


def test_container_and_control_plane_logs_are_encrypted_with_the_stacks_key(
    default_app: Synthesized,
) -> None:
    for stack, prefix in (("Workload", "/aws/containerinsights/"), ("Cluster", "/aws/eks/")):
        groups = {
            lid: g
            for lid, g in default_app.resources(stack, "AWS::Logs::LogGroup").items()
            if str(g["Properties"].get("LogGroupName", "")).startswith(prefix)
        }
        assert groups, stack
        keys = {g["Properties"]["KmsKeyId"]["Fn::GetAtt"][0] for g in groups.values()}
        (key_id,) = keys
        key = default_app.templates[stack]["Resources"][key_id]
        assert key["Properties"]["EnableKeyRotation"] is True
        (logs,) = [
            s
            for s in key["Properties"]["KeyPolicy"]["Statement"]
            if s.get("Sid") == "CloudWatchLogsForTheseLogGroups"
        ]
        assert "logs." in json.dumps(logs["Principal"])  # logs.<region>.<suffix>
        arns = logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
        names = sorted(json.dumps(a).split(":log-group:")[1].split('"')[0] for a in arns)
        assert names == sorted(g["Properties"]["LogGroupName"] for g in groups.values())


def test_alarm_email_subscribes_only_when_set(
    default_app: Synthesized, token_app: Synthesized
) -> None:
    assert default_app.resources("Workload", "AWS::SNS::Subscription") == {}
    sub = token_app.only("Workload", "AWS::SNS::Subscription")["Properties"]
    assert (sub["Protocol"], sub["Endpoint"]) == ("email", ALARM_EMAIL)


# -- the add-on, its identity and its logs ----------------------------------------------------


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' rule: an empty key with Exists matches every taint; otherwise keys must be
    equal; an empty effect matches every effect; Equal compares values."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator", "Equal")
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return operator == "Exists" or toleration.get("value", "") == taint.get("value", "")


def test_addon_is_v8_or_newer_removed_on_destroy_and_tolerates_the_gpu_taint(
    default_app: Synthesized,
) -> None:
    (addon,) = [
        a
        for a in default_app.resources("Workload", "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == ADDON_NAME
    ]
    props = addon["Properties"]
    major = int(re.match(r"v(\d+)\.", props["AddonVersion"])[1])  # type: ignore[index]
    assert major >= 8
    assert props["PreserveOnDelete"] is False
    values = json.loads(props["ConfigurationValues"])
    assert values == addon_configuration()
    # By default the token that may `get nodes/proxy` (the agent's, shared by Fluent Bit) is
    # kept off the GPU nodes: both components tolerate no taint.
    assert values["agent"]["tolerations"] == []
    assert values["containerLogs"]["fluentBit"]["tolerations"] == []
    assert values["tolerations"] == [{"operator": "Exists"}]  # DCGM, node-exporter stay
    assert values["containerLogs"]["enabled"] is True
    assert values["otelContainerInsights"]["enabled"] is True
    # Classic Container Insights (the agent's EMF performance logs) would bill the same
    # metrics twice.
    assert values["containerInsights"] == {"enabled": False}
    # Application Signals (on in the chart by default) would instrument workloads behind a
    # Service with the ADOT SDK and bill requests and spans nothing here reads.
    assert values["applicationSignals"] == {"enabled": False}
    assert values["dcgmExporter"]["enabled"] is True
    (gpu_group,) = [
        g
        for stack in default_app.templates
        for g in default_app.resources(stack, "AWS::EKS::Nodegroup").values()
        if g["Properties"].get("Taints")
    ]
    for taint in gpu_group["Properties"]["Taints"]:
        k8s_taint = {**taint, "effect": {"NO_SCHEDULE": "NoSchedule"}[taint["Effect"]]}
        k8s_taint = {
            "key": taint["Key"],
            "value": taint.get("Value"),
            "effect": k8s_taint["effect"],
        }
        assert any(_tolerates(t, k8s_taint) for t in values["tolerations"]), taint


@pytest.mark.parametrize("component", ["kubeStateMetrics", "manager"])
def test_the_add_ons_wide_identities_stay_off_the_gpu_nodes(
    default_app: Synthesized, component: str
) -> None:
    """kube-state-metrics reads Secrets cluster-wide, and the agent operator (`manager`) may
    create DaemonSets and Deployments in every namespace: both on the system nodes only, where
    no GPU worker's root reaches their tokens (docs/security.md)."""
    (addon,) = [
        a
        for a in default_app.resources("Workload", "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == ADDON_NAME
    ]
    values = json.loads(addon["Properties"]["ConfigurationValues"])
    ksm = values[component]
    # Its own empty list replaces the root's "every taint" (the chart's tolerations helper).
    assert ksm["tolerations"] == []
    assert any(
        _tolerates(t, {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"})
        for t in values["tolerations"]
    )
    (system,) = [
        g["Properties"]
        for stack in default_app.templates
        for g in default_app.resources(stack, "AWS::EKS::Nodegroup").values()
        if not g["Properties"].get("Taints")
    ]
    assert ksm["nodeSelector"] == {"role": "system"}
    assert system["Labels"]["role"] == "system"


def test_toleration_rule_is_kubernetes_rule() -> None:
    gpu = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    assert _tolerates({"operator": "Exists"}, gpu)
    assert _tolerates({"key": "nvidia.com/gpu", "operator": "Exists"}, gpu)
    assert not _tolerates({"key": "other", "operator": "Exists"}, gpu)
    assert not _tolerates({"key": "nvidia.com/gpu", "value": "false"}, gpu)
    assert not _tolerates({"operator": "Exists", "effect": "NoExecute"}, gpu)


def test_agent_identity_is_pod_identity_with_the_agent_policy(default_app: Synthesized) -> None:
    (addon,) = default_app.resources("Workload", "AWS::EKS::Addon").values()
    (assoc,) = addon["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == AGENT_SERVICE_ACCOUNT
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    role = default_app.templates["Workload"]["Resources"][role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    # Not the managed policy: its actions narrowed to this cluster's log groups.
    assert "ManagedPolicyArns" not in role
    statements = _role_statements(default_app, role_id)
    by_sid = {s["Sid"]: s for s in statements}
    assert set(by_sid) == {"WriteClusterLogs", "FindLogGroups", "Metrics"}
    logs = json.dumps(by_sid["WriteClusterLogs"]["Resource"])
    assert ":log-group:/aws/containerinsights/ray-llm-multinode/*" in logs
    assert sorted(by_sid["WriteClusterLogs"]["Action"]) == [
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:DescribeLogStreams",
        "logs:PutLogEvents",
    ]
    actions = {
        a
        for s in statements
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert not {a for a in actions if a.startswith(("xray:", "ssm:"))}
    agents = [
        a
        for stack in default_app.templates
        for a in default_app.resources(stack, "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "eks-pod-identity-agent"
    ]
    assert len(agents) == 1


def test_log_groups_exist_before_the_addon_with_retention_and_removal(
    default_app: Synthesized,
) -> None:
    wanted = set(log_group_names(DEFAULTS.cluster_name).values())
    groups = {
        lid: g
        for lid, g in default_app.resources("Workload", "AWS::Logs::LogGroup").items()
        if g["Properties"].get("LogGroupName") in wanted
    }
    assert {g["Properties"]["LogGroupName"] for g in groups.values()} == wanted
    assert "/aws/containerinsights/ray-llm-multinode/application" in wanted
    assert not any(name.endswith("/performance") for name in wanted)  # classic CI is off
    for g in groups.values():
        assert g["Properties"]["RetentionInDays"] == DEFAULTS.log_retention_days
        assert g["DeletionPolicy"] == "Delete"
    (addon,) = default_app.resources("Workload", "AWS::EKS::Addon").values()
    assert set(groups) <= set(addon["DependsOn"])
    # Its Deployments (operator, cluster scraper) need a node to become ACTIVE.
    (system_group,) = [
        lid
        for lid, g in default_app.resources("Workload", "AWS::EKS::Nodegroup").items()
        if g["Properties"]["Labels"].get("role") == "system"
    ]
    assert system_group in addon["DependsOn"]


# -- PodMonitors --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def podmonitor_schema() -> Any:
    """The CRD's schema, checked against its metaschema once (``jsonschema.validate`` checked
    it again on every call)."""
    text = (SCHEMAS / "monitoring.coreos.com_podmonitors.yaml").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["group"] == "monitoring.coreos.com"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = dict(v1["schema"]["openAPIV3Schema"])
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    return validator(schema)


def _podmonitors(app: Synthesized) -> list[dict[str, Any]]:
    out = []
    for r in app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource").values():
        out += [
            m for m in json.loads(resolve(r["Properties"]["Manifest"])) if m["kind"] == "PodMonitor"
        ]
    return out


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_podmonitors_validate_against_the_prometheus_operator_crd(
    config_name: str, podmonitor_schema: Any
) -> None:
    monitors = render_podmonitors(CONFIGS[config_name])
    assert [m["metadata"]["name"] for m in monitors] == [
        f"{CONFIGS[config_name].ray_service_name}-head",
        f"{CONFIGS[config_name].ray_service_name}-workers",
    ]
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        podmonitor_schema.validate(monitor)


def test_the_schema_rejects_a_broken_podmonitor(podmonitor_schema: Any) -> None:
    monitor = render_podmonitors(DEFAULTS)[0]
    broken = json.loads(json.dumps(monitor))
    broken["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "rename"
    with pytest.raises(jsonschema.ValidationError):
        podmonitor_schema.validate(broken)
    del broken["spec"]["selector"]
    with pytest.raises(jsonschema.ValidationError):
        podmonitor_schema.validate(broken)


def test_podmonitors_scrape_the_metrics_port_the_rayservice_declares(
    default_app: Synthesized,
) -> None:
    monitors = _podmonitors(default_app)
    assert [m["metadata"]["name"] for m in monitors] == ["ray-llm-head", "ray-llm-workers"]
    rs = render_rayservice(DEFAULTS, image=DEFAULTS.image_uri(TEST_REGION))
    cluster = rs["spec"]["rayClusterConfig"]
    (worker_group,) = cluster["workerGroupSpecs"]
    pods = {"head": cluster["headGroupSpec"], "worker": worker_group}
    for monitor in monitors:
        spec = monitor["spec"]
        assert spec["namespaceSelector"] == {"matchNames": [DEFAULTS.namespace]}
        assert monitor["metadata"]["namespace"] == DEFAULTS.namespace
        node_type = spec["selector"]["matchLabels"]["ray.io/node-type"]
        group = pods[node_type]
        (endpoint,) = spec["podMetricsEndpoints"]
        (container,) = group["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        # The port Ray exports on (rayStartParams) is the one declared under that name.
        assert ports[endpoint["port"]] == RAY_PORTS.metrics_export == 8080
        assert group["rayStartParams"]["metrics-export-port"] == str(RAY_PORTS.metrics_export)
        targets = {r["targetLabel"]: r for r in endpoint["relabelings"]}
        # The labels every Ray query selects on (pd_constructs/observability/promql.py).
        assert targets["ray_service"]["replacement"] == DEFAULTS.ray_service_name
        assert targets["ray_io_node_type"]["sourceLabels"] == [
            "__meta_kubernetes_pod_label_ray_io_node_type"
        ]


def test_ray_pods_bound_metric_cardinality_with_a_level_ray_knows() -> None:
    # ray/_private/telemetry/metric_cardinality.py (Ray 2.58): legacy, recommended, low.
    assert RAY_METRIC_CARDINALITY in ("legacy", "recommended", "low")
    rs = render_rayservice(DEFAULTS, image="img")
    cluster = rs["spec"]["rayClusterConfig"]
    (worker_group,) = cluster["workerGroupSpecs"]
    for group in (cluster["headGroupSpec"], worker_group):
        (container,) = group["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_metric_cardinality_level"] == RAY_METRIC_CARDINALITY


# -- dashboard and outputs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / "cloudwatch-dashboard-chart-widget.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def dashboard_widgets(app: Synthesized) -> list[dict[str, Any]]:
    dash = app.only("Workload", "AWS::CloudWatch::Dashboard")["Properties"]
    assert dash["DashboardName"] == dashboard_name(app.config)
    return list(json.loads(resolve(dash["DashboardBody"]))["widgets"])


def test_dashboard_graphs_every_panel_under_the_alarms(
    default_app: Synthesized, chart_validator: jsonschema.Draft202012Validator
) -> None:
    widgets = dashboard_widgets(default_app)
    panels = dashboard_panels(DEFAULTS)
    assert dashboard_name(DEFAULTS) == "ray-llm-multinode-ray-llm"
    assert [w["type"] for w in widgets] == ["alarm"] + ["chart"] * len(panels) + ["text"]
    status, *charts, guide = widgets
    assert len(status["properties"]["alarms"]) == len(alarm_specs(DEFAULTS))
    assert status["y"] == 0 and status["width"] == 24
    for panel, chart in zip(panels, charts, strict=True):
        chart_validator.validate(chart)
        props = chart["properties"]
        assert props["title"] == panel.title
        assert props["region"] == TEST_REGION
        assert props["view"] == "line"
        assert props["plotOptions"] == CHART_PLOT_OPTIONS
        queries = props["data"]["queries"]
        assert [q["id"] for q in queries] == [f"q{i}" for i in range(1, len(panel.queries) + 1)]
        assert all(q["step"] == CHART_STEP_SECONDS == 60 for q in queries)
        assert all("label" not in q for q in queries)  # lines are named by their labels
        for (legend, query), deployed in zip(panel.queries, queries, strict=True):
            # What CloudWatch runs is the panel's query, parsed, with only the legend added.
            assert deployed["query"] == legend_query(legend, query)
            tree = promql_parser.parse(deployed["query"])
            assert isinstance(tree, promql_parser.Call) and tree.func.name == "label_replace"
            assert selected_series(deployed["query"]) == selected_series(query)
    # Two graphs a row, under the alarms, never overlapping.
    assert [(c["x"], c["y"]) for c in charts] == [
        (12 * (i % 2), status["height"] + 6 * (i // 2)) for i in range(len(charts))
    ]
    assert guide["y"] == status["height"] + 6 * ((len(charts) + 1) // 2)
    assert guide["properties"]["markdown"] == panel_guide_markdown(panels)
    for panel in panels:
        assert f"- **{panel.title}**: {panel.meaning}" in guide["properties"]["markdown"]
    titles = [p.title for p in panels]
    for topic in ("Requests and errors", "NIXL KV transfer", "GPU per node", "EFA per node"):
        assert topic in titles


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_every_panel_renders_a_chart_widget_of_the_schema(
    config_name: str, chart_validator: jsonschema.Draft202012Validator
) -> None:
    for panel in dashboard_panels(CONFIGS[config_name]):
        props = chart_properties(panel, "eu-west-1")
        widget = {"type": "chart", "x": 12, "y": 4, "width": 12, "height": 6, "properties": props}
        chart_validator.validate(widget)
        for q in props["data"]["queries"]:
            promql_parser.parse(q["query"])


def _a_chart() -> dict[str, Any]:
    (panel, *_) = dashboard_panels(DEFAULTS)
    props = chart_properties(panel, "us-west-2")
    return {"type": "chart", "x": 0, "y": 0, "width": 12, "height": 6, "properties": props}


def _set(widget: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``widget`` with ``path`` (dotted, list indexes as numbers) set, or deleted
    when ``value`` is ``DELETE``."""
    out = json.loads(json.dumps(widget))
    *parents, last = path.split(".")
    node: Any = out
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return out


DELETE = object()
ONE_QUERY = {
    "id": "a",
    "type": "cloudwatch-metrics",
    "language": "PromQL",
    "query": "up",
    "step": 60,
}


@pytest.mark.parametrize(
    ("path", "ok", "bad"),
    [
        ("x", [0, 23], [-1, 24]),
        ("y", [0, 999], [-1]),
        ("width", [1, 24], [0, 25]),
        ("height", [1, 1000], [0, 1001]),
        # The widget that carries PromQL is a chart (a metric widget with data.queries is what
        # CloudWatch refused in aws-solutions-library-samples/...-amazon-bedrock issue #759).
        ("type", ["chart"], ["metric", "text"]),
        ("properties.region", ["us-east-1", "ap-southeast-2"], ["", "us-east", "${Region}"]),
        ("properties.data.queries.0.id", ["a", "q1", "cacheCreate"], ["1q", "Q1", "q-1", ""]),
        ("properties.data.queries.0.language", ["PromQL"], ["promql", "SQL"]),
        ("properties.data.queries.0.type", ["cloudwatch-metrics"], ["metric"]),
        ("properties.data.queries.0.step", [1, 60], [0, "60"]),
        ("properties.data.queries.0.query", ["up"], [""]),
        ("properties.data.queries", [[ONE_QUERY], [ONE_QUERY, {**ONE_QUERY, "id": "b"}]], [[]]),
        ("properties.view", ["line", "number"], ["timeSeries", "singleValue"]),
        ("properties.metrics", [], [[["AWS/EC2", "CPUUtilization"]]]),
        ("properties.stacked", [], [True]),
        ("properties.plotOptions.style.lineOptions.width", [1, 2], [0]),
        ("properties.plotOptions.style.lineOptions.spline", [False], [DELETE]),
        ("properties.plotOptions.style.lineOptions.filled", [True], [DELETE]),
        ("properties.plotOptions", [CHART_PLOT_OPTIONS], [DELETE, {}]),
    ],
)
def test_the_chart_schema_at_and_past_its_limits(
    path: str, ok: list[Any], bad: list[Any], chart_validator: jsonschema.Draft202012Validator
) -> None:
    for value in ok:
        chart_validator.validate(_set(_a_chart(), path, value))
    for value in bad:
        with pytest.raises(jsonschema.ValidationError):
            chart_validator.validate(_set(_a_chart(), path, value))


def test_legends_are_labels_a_query_can_carry() -> None:
    assert (
        legend_query("p50", "up") == f'label_replace(up, "{LEGEND_LABEL}", "p50", "legend", ".*")'
    )
    for legend in ("", 'a"b', "a\\b", "$1"):
        with pytest.raises(ValueError, match="legend"):
            legend_query(legend, "up")
    for panel in dashboard_panels(DEFAULTS):
        for legend, query in panel.queries:
            legend_query(legend, query)  # every legend of the table is one


def test_dashboard_url_is_an_output(default_app: Synthesized) -> None:
    out = default_app.templates["Workload"]["Outputs"]["DashboardUrl"]["Value"]
    url = resolve(out)
    assert url == (
        f"https://{TEST_REGION}.console.aws.amazon.com/cloudwatch/home?region={TEST_REGION}"
        "#dashboards/dashboard/ray-llm-multinode-ray-llm"
    )


def test_observability_none_creates_none_of_it(variant_app: Synthesized) -> None:
    assert variant_app.config.observability == "none"
    for stack, template in variant_app.templates.items():
        types = {r["Type"] for r in template["Resources"].values()}
        assert not types & {
            "AWS::CloudWatch::Alarm",
            "AWS::CloudWatch::Dashboard",
            "AWS::SNS::Topic",
        }, stack
        addons = [
            r["Properties"]["AddonName"]
            for r in template["Resources"].values()
            if r["Type"] == "AWS::EKS::Addon"
        ]
        assert ADDON_NAME not in addons, stack
        names = json.dumps(template)
        assert "containerinsights" not in names and "PodMonitor" not in names, stack
        assert "DashboardUrl" not in template.get("Outputs", {}), stack


# -- settings (the numeric limits are in tests/test_limits.py) ---------------------------------


@pytest.mark.parametrize(
    ("key", "ok", "bad"),
    [
        (
            "cloudwatchAddonVersion",
            ["v8.0.0-eksbuild.1", "v12.3.4-eksbuild.10"],
            ["v7.9.9-eksbuild.1", "8.0.0", "v8.0.0"],
        ),
        ("observability", ["cloudwatch", "none"], ["prometheus", ""]),
        (
            "alarmEmail",
            ["", "a@b.co", "on-call+pd@ops.example.com"],
            ["oncall", "a@b", "a b@c.com", "a@@b.com"],
        ),
    ],
)
def test_observability_settings_at_and_past_their_limits(
    key: str, ok: list[Any], bad: list[Any]
) -> None:
    for value in ok:
        AppConfig.from_context({key: value})
    for value in bad:
        with pytest.raises(ConfigError, match=rf"'{key}' = .*must be"):
            AppConfig.from_context({key: value})


# -- NetworkPolicies: every scrape target stays reachable ---------------------------------------


def test_every_scrape_target_is_reachable_under_the_rendered_policies(
    default_app: Synthesized,
) -> None:
    """The CloudWatch agent is a host-network DaemonSet that scrapes the targets on its own
    node (the add-on's default; no monitor asks for the cluster scraper). NetworkPolicy pod
    selectors never match host-network pods, so no podSelector rule could admit it; the VPC
    CNI's agent admits a pod's own node, which is exactly where each scrape comes from. So the
    metrics port needs no allow that would also open it to other pods."""
    world = World(default_app)
    cluster = Cluster(
        namespaces={**{n: {} for n in world.cluster.namespaces}, AGENT_NAMESPACE: {}},
        policies=world.cluster.policies,
    )
    targets = {"head": [world.head], "worker": world.workers}
    scraped = 0
    for monitor in _podmonitors(default_app):
        assert "cloudwatch.aws.amazon.com/scraper" not in monitor["metadata"].get("annotations", {})
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        for pod in targets[monitor["spec"]["selector"]["matchLabels"]["ray.io/node-type"]]:
            assert cluster.selecting(pod, "Ingress"), "the Ray pods are isolated"
            port = pod.ports[endpoint["port"]]
            agent_here = External(ip="10.0.200.5", node=pod.node)
            agent_elsewhere = External(ip="10.0.200.6", node="another-node")
            assert cluster.allowed(agent_here, pod, port), pod.name
            assert not cluster.allowed(agent_elsewhere, pod, port), pod.name
            # The GPU workers' metrics port also admits the API server's own /28 subnets (the
            # readiness check's NIXL counters), which no pod shares.
            assert not cluster.allowed(world.neighbour, pod, port), pod.name
            scraped += 1
    assert scraped == 1 + len(world.workers)
    # The agent's own targets (DCGM exporter, kube-state-metrics) live in the add-on's
    # namespace, which no policy isolates: reachable from any node.
    dcgm = Pod("dcgm-exporter", AGENT_NAMESPACE, {"k8s-app": "dcgm-exporter"}, ip="10.0.200.20")
    assert not cluster.selecting(dcgm, "Ingress")
    assert cluster.allowed(External(ip="10.0.1.5", node="sys-1"), dcgm, 9400)


def _role_statements(app: Synthesized, role_id: str) -> list[dict[str, Any]]:
    out = []
    for policy in app.resources("Workload", "AWS::IAM::Policy").values():
        if {r["Ref"] for r in policy["Properties"]["Roles"]} == {role_id}:
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def test_the_replica_start_buckets_reach_past_the_scale_out_goal() -> None:
    """Serve's replica start histogram ends at 4 minutes by default; the head's environment
    extends it so the "Replica start" panel can tell a 6-minute scale-out (the goal, and a
    bucket edge) from the modelled 7.1 and from a stuck one. Serve's parser takes the value:
    positive milliseconds, strictly ascending (Ray 2.58 constants_utils.parse_latency_buckets)."""
    from pd_constructs.serving.workload import REPLICA_START_BUCKETS_MS, render_rayservice
    from ray_pd_eks import timeline

    buckets = list(REPLICA_START_BUCKETS_MS)
    assert all(b > 0 for b in buckets) and sorted(set(buckets)) == buckets
    # Serve's own buckets, kept as they are up to a minute.
    assert buckets[:13] == [5, 20, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000]
    assert 6 * 60000 in buckets  # the scale-out goal is a bucket edge
    model = timeline.scale_out_model(
        fast_pull=True, disk_mbps=timeline.NVME_MBPS, weights_in_s3=False
    ).minutes
    assert buckets[-1] >= 4 * model * 60000  # room above the model, for what goes wrong
    # One bucket a minute from 1 to 10 minutes.
    minutes = [b // 60000 for b in buckets if 60000 <= b <= 600000]
    assert minutes == list(range(1, 11))
    spec = render_rayservice(DEFAULTS, image="img:1")["spec"]["rayClusterConfig"]
    (head,) = [
        c
        for c in spec["headGroupSpec"]["template"]["spec"]["containers"]
        if c["name"] == "ray-head"
    ]
    env = {e["name"]: e.get("value") for e in head["env"]}
    value = env["RAY_SERVE_REPLICA_STARTUP_SHUTDOWN_LATENCY_BUCKETS_MS"]
    assert [float(x) for x in value.split(",")] == [float(b) for b in buckets]
    # The controller runs on the head: the workers do not need it.
    for group in spec["workerGroupSpecs"]:
        for c in group["template"]["spec"]["containers"]:
            names = {e["name"] for e in c.get("env") or []}
            assert "RAY_SERVE_REPLICA_STARTUP_SHUTDOWN_LATENCY_BUCKETS_MS" not in names


def test_the_replica_start_panel_reads_serves_controller_histograms() -> None:
    (panel,) = [p for p in dashboard_panels(DEFAULTS) if p.title == "Replica start"]
    queries = dict(panel.queries)
    assert queries["start to serving p99 min"] == (
        "histogram_quantile(0.99, sum by (deployment) (increase("
        'ray_serve_replica_startup_latency_ms{ray_service="ray-llm"}[1h]))) / 60000'
    )
    assert "ray_serve_replica_initialization_latency_ms" in queries["engine start p99 min"]
    assert queries["replicas started"].startswith("histogram_count(sum by (deployment) ")


def test_gpu_node_telemetry_puts_the_agent_and_fluent_bit_back_on_the_gpu_nodes() -> None:
    """The explicit trade-off: GPU/EFA metrics and the workers' logs in CloudWatch, with the
    agent's `nodes/proxy` token within reach of root on a GPU node."""
    on = addon_configuration(gpu_node_telemetry=True)
    assert "agent" not in on  # the root "every taint" toleration applies
    assert "tolerations" not in on["containerLogs"].get("fluentBit", {})
    off = addon_configuration()
    assert {k: v for k, v in off.items() if k != "agent"} == {
        **on,
        "containerLogs": {**on["containerLogs"], "fluentBit": {"tolerations": []}},
    }
    assert DEFAULTS.gpu_node_telemetry is False
    assert DEFAULTS.with_overrides({"gpuNodeTelemetry": True}).gpu_node_telemetry is True
