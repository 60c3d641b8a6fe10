"""Metrics, dashboard, alarms and logs on AWS-managed parts (``observability=cloudwatch``).

What you get by default:

- the EKS add-on ``amazon-cloudwatch-observability`` (``cloudwatchAddonVersion``, >= 8.0) with
  its ``cloudwatch-agent`` service account on EKS Pod Identity (``CloudWatchAgentServerPolicy``
  narrowed to this cluster's log groups: :func:`agent_statements`)
  and ``preserveOnDelete`` off, so ``cdk destroy`` uninstalls it;
- its log groups created first, with ``logRetentionDays``/``retainLogs``, so container logs
  outlive pods and nodes and still expire;
- PodMonitors for the Ray head and GPU workers (``assets/manifests/podmonitors.yaml``);
- PromQL alarms (:func:`pd_constructs.observability.promql.alarm_specs`) on one SNS topic
  encrypted with a rotating KMS key, with an optional e-mail subscription (``alarmEmail``);
- a CloudWatch dashboard: the alarms' state, then one graph per panel of
  :func:`pd_constructs.observability.promql.dashboard_panels` (the PromQL the tests parse),
  then what each panel means.

CDK 2.275 has no PromQL dashboard widget (its widgets graph CloudWatch namespace metrics and
metric math only), so each graph is a CloudWatch ``chart`` widget written here
(:class:`PromQLChartWidget`) in the shape AWS deploys through ``AWS::CloudWatch::Dashboard``:
see :data:`CHART_PLOT_OPTIONS` and docs/observability.md for the sources and how sure that is.
"""

from __future__ import annotations

import copy
from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.logs_key import LogsKey
from pd_constructs.common.nag import acknowledge
from pd_constructs.common.templates import render
from pd_constructs.observability.promql import AlarmSpec, Panel, alarm_specs, dashboard_panels
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import LogPolicy
from ray_pd_eks.monitoring import (
    CLOUDWATCH_ADDON_NAME,
    CLOUDWATCH_AGENT_POLICY,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    addon_configuration,
    alarm_name_prefix,
    dashboard_name,
    dashboard_url,
    log_group_names,
)

ADDON_NAME = CLOUDWATCH_ADDON_NAME
AGENT_NAMESPACE = "amazon-cloudwatch"
AGENT_SERVICE_ACCOUNT = CLOUDWATCH_AGENT_SERVICE_ACCOUNT
AGENT_POLICY = CLOUDWATCH_AGENT_POLICY
SCRAPE_INTERVAL = "30s"  # the agent's own default for monitors
EVALUATION_INTERVAL = Duration.minutes(1)


def render_podmonitors(config: AppConfig) -> list[dict[str, Any]]:
    """The head and worker PodMonitors of the RayService."""
    return list(
        render(
            "manifests/podmonitors.yaml",
            {
                "NAME": config.ray_service_name,
                "NAMESPACE": config.namespace,
                "INTERVAL": SCRAPE_INTERVAL,
            },
        )
    )


# -- the dashboard's graphs --------------------------------------------------------------------
#
# CloudWatch graphs PromQL only in a ``"type": "chart"`` widget: the Dashboard Body Structure
# reference (CloudWatch user guide, CloudWatch-Dashboard-Body-Structure) lists "Properties of a
# Chart Widget Object", and CloudWatch rejects PromQL ``data.queries`` in a ``metric`` widget
# ("Should have required property 'metrics'": aws-solutions-library-samples/
# guidance-for-claude-code-with-amazon-bedrock issue #759, PR #760). The property table of that
# section could not be read here, so the widget below uses only the keys and values of the chart
# widgets AWS deploys through AWS::CloudWatch::Dashboard in that repository
# (deployment/infrastructure/claude-code-dashboard.yaml, v2.5.2, commit 4d11e8c): ``title``,
# ``view``, ``region``, ``data.queries`` (``id``, ``type: cloudwatch-metrics``, ``language:
# PromQL``, ``query``, ``step``) and the whole ``plotOptions`` block below. The tests hold every
# widget to tests/schemas/cloudwatch-dashboard-chart-widget.schema.json, written from the same
# source.

CHART_VIEW = "line"
CHART_WIDTH = 12
CHART_HEIGHT = 6
# One point a minute: the alarms' evaluation interval, two scrapes.
CHART_STEP_SECONDS = int(EVALUATION_INTERVAL.to_seconds())
# Verbatim the sample's block (every chart widget there carries it whole; a lineOptions without
# all five fields is reported to fail CloudWatch's validation).
CHART_PLOT_OPTIONS: dict[str, Any] = {
    "legend": {"position": "bottom", "show": True},
    "xAxis": {"type": "datetime"},
    "yAxis": [{"type": "linear"}],
    "style": {
        "lineOptions": {
            "filled": False,
            "stacked": False,
            "width": 2,
            "pattern": "solid",
            "spline": False,
        },
        "numberOptions": {"sparkline": True},
        "pieOptions": {"innerSize": "50%"},
        "barOptions": {},
        "gaugeOptions": {},
    },
}
# The label that names each line after its query's legend (``p50``, ``errors/s``, ...).
LEGEND_LABEL = "legend"


def legend_query(legend: str, query: str) -> str:
    """``query`` with ``legend="<legend>"`` on every series it returns, so a graph's lines keep
    their own labels (``deployment``, the node, the status code) and say which query they are:
    the AWS sample gives a static ``label`` only to queries of one series, and a static label
    would name the Prefill and Decode lines of ``p50`` alike. The source label is the new label
    itself, absent, so ``.*`` matches its empty value and the replacement is set."""
    if not legend or any(c in legend for c in '"\\$'):
        raise ValueError(f"legend {legend!r} must be non-empty, without quotes, \\ or $")
    return f'label_replace({query}, "{LEGEND_LABEL}", "{legend}", "{LEGEND_LABEL}", ".*")'


def chart_properties(panel: Panel, region: str) -> dict[str, Any]:
    """The ``properties`` of the chart widget that graphs ``panel``: one query per legend, ids
    ``q1``, ``q2``, ... (GetMetricData's id rule: a lowercase letter first)."""
    return {
        "title": panel.title,
        "view": CHART_VIEW,
        "region": region,
        "data": {
            "queries": [
                {
                    "id": f"q{i}",
                    "type": "cloudwatch-metrics",
                    "language": "PromQL",
                    "query": legend_query(legend, query),
                    "step": CHART_STEP_SECONDS,
                }
                for i, (legend, query) in enumerate(panel.queries, start=1)
            ]
        },
        "plotOptions": copy.deepcopy(CHART_PLOT_OPTIONS),
    }


class PromQLChartWidget(cw.ConcreteWidget):
    """A dashboard graph of one panel's PromQL (a CloudWatch ``chart`` widget), in the stack's
    region; the dashboard places it like any CDK widget."""

    def __init__(
        self, panel: Panel, *, width: int = CHART_WIDTH, height: int = CHART_HEIGHT
    ) -> None:
        super().__init__(width, height)
        self.panel = panel

    def to_json(self) -> list[Any]:
        return [
            {
                "type": "chart",
                "x": self._x,
                "y": self._y,
                "width": self.width,
                "height": self.height,
                "properties": chart_properties(self.panel, Aws.REGION),
            }
        ]


def panel_guide_markdown(panels: tuple[Panel, ...]) -> str:
    """What each graph shows, under the graphs."""
    lines = ["### Reading the panels", ""]
    lines += [f"- **{p.title}**: {p.meaning}" for p in panels]
    lines += [
        "",
        f"Each line is named by its series' labels and `{LEGEND_LABEL}`. A graph's PromQL: "
        "edit the widget, or paste it into CloudWatch Query Studio (PromQL). "
        "What to do about each: docs/observability.md.",
    ]
    return "\n".join(lines)


def agent_statements(cluster_name: str) -> list[iam.PolicyStatement]:
    """The agent's and Fluent Bit's rights: ``CloudWatchAgentServerPolicy`` (the policy EKS
    recommends for the add-on's ``cloudwatch-agent``) narrowed to what this add-on
    configuration uses (assets/addons/cloudwatch-observability.yaml). Logs: only this
    cluster's Container Insights log groups and their streams. Metrics: ``PutMetricData``
    takes no resource, and no ``cloudwatch:namespace`` condition is set because the OTLP
    metrics the agent sends (OTel Container Insights, the PodMonitors) carry no namespace.
    Dropped: X-Ray (Application Signals is not enabled) and ``ssm:GetParameter`` (the add-on
    configures the agent through its own ConfigMap, not SSM)."""
    groups = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:"
    prefix = f"/aws/containerinsights/{cluster_name}/"
    assert all(name.startswith(prefix) for name in log_group_names(cluster_name).values())
    return [
        iam.PolicyStatement(
            sid="WriteClusterLogs",
            actions=[
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
            ],
            # The groups and every stream in them (…:log-group:<name>:log-stream:<stream>).
            resources=[f"{groups}{prefix}*"],
        ),
        iam.PolicyStatement(
            sid="FindLogGroups",
            actions=["logs:DescribeLogGroups"],
            resources=[f"{groups}*"],
        ),
        iam.PolicyStatement(
            sid="Metrics",
            actions=["cloudwatch:PutMetricData", "ec2:DescribeTags", "ec2:DescribeVolumes"],
            resources=["*"],
        ),
    ]


class CloudWatchAgentIdentity(Construct):
    """The IAM role of the add-on's ``cloudwatch-agent`` service account, assumed through EKS
    Pod Identity (the association is the add-on's own, so it goes with the add-on), allowed
    :func:`agent_statements` for ``cluster_name``."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Resource",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"),
            description="CloudWatch agent and Fluent Bit of the amazon-cloudwatch-observability "
            "add-on (EKS Pod Identity), this cluster's log groups only",
        )
        for statement in agent_statements(cluster_name):
            self.role.add_to_principal_policy(statement)
        # EKS Pod Identity needs sts:TagSession besides sts:AssumeRole.
        assert self.role.assume_role_policy is not None
        self.role.assume_role_policy.add_statements(
            iam.PolicyStatement(
                actions=["sts:TagSession"],
                principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")],
            )
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Logs: this cluster's Container Insights log groups and their streams only; "
            "DescribeLogGroups, PutMetricData and EC2 Describe calls take no resource scope.",
            findings=[
                "Resource::*",
                "Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:*",
                "Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
                f"/aws/containerinsights/{cluster_name}/*",
            ],
        )


class AlarmTopic(Construct):
    """The SNS topic every alarm notifies, encrypted with its own rotating KMS key (CloudWatch
    cannot publish to a topic under the AWS-managed SNS key), TLS-only, optionally with an
    e-mail subscription."""

    def __init__(
        self, scope: Construct, construct_id: str, *, email: str, alarm_name_prefix: str
    ) -> None:
        """``alarm_name_prefix``: every alarm that may publish is named with it; the key
        grant and the topic policy admit CloudWatch only for those alarms of this account."""
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Encryption of the ray-pd-eks alarm topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        alarms = f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:"
        from_our_alarms = {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": f"{alarms}{alarm_name_prefix}*"},
        }
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisStack",
                principals=[cloudwatch],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=from_our_alarms,
            )
        )
        self.topic = sns.Topic(self, "Resource", master_key=self.key, enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[cloudwatch],
                resources=[self.topic.topic_arn],
                conditions=from_our_alarms,
            )
        )
        if email:
            self.topic.add_subscription(subs.EmailSubscription(email))


class PdObservability(Construct):
    """Everything ``observability=cloudwatch`` adds, in the workload stack. ``namespace`` is the
    Ray namespace's manifest (the PodMonitors live there)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        namespace: Construct,
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        names = log_group_names(config.cluster_name)
        # Container stdout (application), node and data-plane logs: encrypted with this
        # stack's key, usable by CloudWatch Logs for these groups only.
        self.logs_key = LogsKey(
            self,
            "LogsKey",
            description=f"Encryption of EKS cluster {config.cluster_name}'s container logs",
            log_group_names=list(names.values()),
            removal_policy=log_policy.removal_policy,
        )
        self.log_groups = {
            cid: logs.LogGroup(
                self,
                f"{cid}Logs",
                log_group_name=name,
                retention=log_policy.retention,
                removal_policy=log_policy.removal_policy,
                encryption_key=self.logs_key.key,
            )
            for cid, name in names.items()
        }
        self.agent = CloudWatchAgentIdentity(
            self, "AgentIdentity", cluster_name=config.cluster_name
        )
        self.addon = eks.Addon(
            self,
            "Addon",
            cluster=as_icluster(cluster),
            addon_name=ADDON_NAME,
            addon_version=config.cloudwatch_addon_version,
            configuration_values=addon_configuration(config.gpu_node_telemetry),
            preserve_on_delete=False,
        )
        cfn_addon = self.addon.node.default_child
        assert isinstance(cfn_addon, eks.CfnAddon)
        cfn_addon.pod_identity_associations = [
            eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=self.agent.role.role_arn, service_account=AGENT_SERVICE_ACCOUNT
            )
        ]
        # Pod Identity hands out credentials only once its agent runs; the log groups exist
        # before Fluent Bit would create them without retention.
        agent_addon = cluster.eks_pod_identity_agent
        if agent_addon is not None:
            self.addon.node.add_dependency(agent_addon)
        for group in self.log_groups.values():
            self.addon.node.add_dependency(group)

        self.podmonitors_manifest = render_podmonitors(config)
        self.podmonitors = eks.KubernetesManifest(
            self,
            "PodMonitors",
            cluster=as_icluster(cluster),
            manifest=self.podmonitors_manifest,
            # The monitoring.coreos.com CRDs arrive with the add-on in the same deploy.
            skip_validation=True,
        )
        self.podmonitors.node.add_dependency(self.addon, namespace)

        self.topic = AlarmTopic(
            self,
            "AlarmTopic",
            email=config.alarm_email,
            alarm_name_prefix=alarm_name_prefix(config),
        )
        self.alarms = [self._alarm(config, spec) for spec in alarm_specs(config)]
        self.dashboard_name = dashboard_name(config)
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=self.dashboard_name,
            default_interval=Duration.hours(3),
        )
        self.dashboard.add_widgets(
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=24, height=4)
        )
        panels = dashboard_panels(config)
        graphs = [PromQLChartWidget(p) for p in panels]
        per_row = 24 // CHART_WIDTH
        for i in range(0, len(graphs), per_row):
            self.dashboard.add_widgets(*graphs[i : i + per_row])
        self.dashboard.add_widgets(
            cw.TextWidget(
                markdown=panel_guide_markdown(panels), width=24, height=len(panels) // 2 + 3
            )
        )
        self.dashboard_url = dashboard_url(Aws.REGION, self.dashboard_name)

    def _alarm(self, config: AppConfig, spec: AlarmSpec) -> cw.PromQLAlarm:
        alarm = cw.PromQLAlarm(
            self,
            f"{spec.id}Alarm",
            alarm_name=f"{alarm_name_prefix(config)}{spec.id}",
            alarm_description=spec.meaning,
            query=spec.query,
            evaluation_interval=EVALUATION_INTERVAL,
            pending_period=Duration.minutes(spec.pending_minutes) if spec.pending_minutes else None,
            recovery_period=Duration.minutes(spec.recovery_minutes),
        )
        action = cw_actions.SnsAction(self.topic.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm
