"""Continuous proof (``kvProbeIntervalMinutes``): the readiness check's KV probe on a schedule.

Every N minutes an EventBridge rule runs ``handler.scheduled_probe`` from the readiness asset:
one KV integrity probe with the decode engines' NIXL counters around it and, with LIBFABRIC,
the libfabric provider from the engines' logs. It runs as the readiness check's own polling
function does: the same role (so the same EKS access entry, Kubernetes group and RBAC, which
already cover every request it makes), the same API-server-only security group, in the private
subnets. Metrics go out in CloudWatch's embedded metric format through its own log group, so
the function needs neither a route to CloudWatch nor ``cloudwatch:PutMetricData``.

Alarms, on the alarm topic (with ``observability=none`` there is none, and no alarm: the metrics
are still published for the account's own monitoring):

- ``KvProbeFailed``: ``ProbeOk`` below 1 in two probes running, missing data counted as
  failing (a probe that no longer runs proves nothing);
- ``KvTransferStalled``: the probe's own request moved no KV (the transfer count did not rise
  while a request flowed);
- ``KvProviderNotEfa`` (LIBFABRIC only): an engine's libfabric provider is not ``efa``. A probe
  that cannot see the provider (NIXL logs it once, at engine start-up, and a long-running
  engine's log can rotate past it) publishes ``ProviderUnknown`` 1 and no ``ProviderEfa``: the
  alarm keeps its state through that missing data (the engine's provider cannot change while
  it runs), and nothing alarms on ``ProviderUnknown`` itself.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from pd_constructs.common.lambda_functions import PYTHON_RUNTIME, lambda_code, shared_layer
from pd_constructs.lifecycle.kubernetes_waiter import KUBERNETES_HANDLERS
from pd_constructs.readiness.readiness import ReadinessCheck
from ray_pd_eks.logs import LogPolicy

PROBE_NAMESPACE = "RayPdEks/KvProbe"  # handler.PROBE_NAMESPACE (a test keeps them equal)
PROBE_TIMEOUT = Duration.minutes(2)


class KvProbe(Construct):
    """The scheduled KV probe of ``readiness``'s endpoint, every ``interval_minutes``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        readiness: ReadinessCheck,
        interval_minutes: int,
        kv_backend: str,
        serving_mode: str,
        ray_service_name: str,
        log_policy: LogPolicy,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not 5 <= interval_minutes <= 1440:
            raise ValueError(f"KvProbe interval {interval_minutes} min: must be 5..1440")
        cluster = readiness.cluster
        properties = {
            "ClusterName": cluster.cluster_name,
            "ClusterEndpoint": cluster.cluster_endpoint,
            "ClusterCertificateAuthorityData": cluster.cluster_certificate_authority_data,
            **{k: v for k, v in readiness.properties.items() if k != "ConfigHash"},
        }
        log_group = log_policy.log_group(self, "Logs")
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=PYTHON_RUNTIME,
            code=lambda_code(KUBERNETES_HANDLERS),
            handler="handler.scheduled_probe",
            layers=[shared_layer(self)],
            timeout=PROBE_TIMEOUT,
            description="KV probe: integrity probe, NIXL counters and libfabric provider",
            role=readiness.function.role,
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[readiness.security_group],
            log_group=log_group,
            environment={
                "PROBE_PROPERTIES": cluster.stack.to_json_string(properties),
                "POLL_BUDGET_SECONDS": "90",
            },
        )
        # The probe runs only once the readiness check has passed (the endpoint exists).
        self.function.node.add_dependency(readiness.resource)
        events.Rule(
            self,
            "Schedule",
            description="Runs the KV probe",
            schedule=events.Schedule.rate(Duration.minutes(interval_minutes)),
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
        period = Duration.minutes(interval_minutes)

        def metric(name: str, statistic: str) -> cw.Metric:
            return cw.Metric(
                namespace=PROBE_NAMESPACE,
                metric_name=name,
                dimensions_map={"RayService": ray_service_name},
                statistic=statistic,
                period=period,
            )

        self.alarms: list[cw.Alarm] = []
        if alarm_topic is None:
            # observability=none: the account brings its own monitoring; the metrics are
            # published all the same (namespace RayPdEks/KvProbe) for it to alarm on.
            return
        below, at_least = (
            cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )
        # (id, applies, description, metric, statistic, comparison, periods, missing data)
        specs = (
            (
                "ProbeFailed",
                True,
                "The KV probe failed twice running (an answer without the code, a failed "
                "or missing KV transfer, or the endpoint down); its log says why",
                "ProbeOk",
                "Minimum",
                below,
                2,
                cw.TreatMissingData.BREACHING,  # a probe that no longer runs proves nothing
            ),
            (
                "TransferStalled",
                serving_mode == "pd",
                "The KV probe's request moved no KV cache: the NIXL transfer count "
                "did not rise while a request flowed",
                "KvTransferStalled",
                "Maximum",
                at_least,
                1,
                cw.TreatMissingData.NOT_BREACHING,
            ),
            (
                "ProviderNotEfa",
                serving_mode == "pd" and kv_backend == "LIBFABRIC",
                "An engine's libfabric provider is not efa: the KV cache moves at TCP "
                "speed (run python -m ray_pd_eks efa-check)",
                "ProviderEfa",
                "Minimum",
                below,
                1,
                # No ProviderEfa is an unknown provider (handler.provider_metrics), not a pass:
                # neither OK nor ALARM, the state stays.
                cw.TreatMissingData.IGNORE,
            ),
        )
        self.alarms = [
            cw.Alarm(
                self,
                alarm_id,
                alarm_description=description,
                metric=metric(name, statistic),
                threshold=1,
                comparison_operator=comparison,
                evaluation_periods=periods,
                treat_missing_data=missing,
            )
            for alarm_id, applies, description, name, statistic, comparison, periods, missing in (
                specs
            )
            if applies
        ]
        for alarm in self.alarms:
            alarm.add_alarm_action(cw_actions.SnsAction(alarm_topic))
