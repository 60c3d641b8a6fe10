"""The custom-resource waiter both long checks use: a CDK ``Provider`` with ``is_complete``,
whose Step Functions waiter logs every state transition (never the event payloads)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.nag import acknowledge, suppress_provider_framework

# The log groups of the two waiters (readiness check, GPU capacity watch) outlive their stack,
# whatever ``retainLogs`` says: a failed first deploy rolls back by deleting the stack, and
# these logs are the only record of why. They still expire after ``logRetentionDays``.
EVIDENCE_REMOVAL_POLICY = RemovalPolicy.RETAIN


def logged_waiter_provider(
    scope: Construct,
    *,
    on_event: lambda_.Function,
    is_complete: lambda_.Function,
    query_interval: Duration,
    timeout: Duration,
    log_group: logs.ILogGroup,
    log_retention: logs.RetentionDays,
    log_removal_policy: RemovalPolicy,
) -> cr.Provider:
    """``Provider`` (id ``Provider``) and its waiter's log group (id ``WaiterLogs``) in
    ``scope``, with the cdk-nag acknowledgments of what aws-cdk-lib generates for them."""
    provider = cr.Provider(
        scope,
        "Provider",
        on_event_handler=on_event,
        is_complete_handler=is_complete,
        query_interval=query_interval,
        total_timeout=timeout,
        log_group=log_group,
        # Every state transition is logged, without the event payloads.
        disable_waiter_state_machine_logging=False,
        waiter_state_machine_log_options=cr.LogOptions(
            destination=logs.LogGroup(
                scope, "WaiterLogs", retention=log_retention, removal_policy=log_removal_policy
            ),
            level=sfn.LogLevel.ALL,
            include_execution_data=False,
        ),
    )
    suppress_provider_framework(provider, on_event, is_complete)
    acknowledge(
        provider.node.find_child("waiter-state-machine"),
        "AwsSolutions-IAM5",
        "CloudWatch Logs delivery for Step Functions (logs:CreateLogDelivery and friends) "
        "supports no resource-level permissions; AWS documents Resource * for it.",
        findings=["Resource::*"],
    )
    acknowledge(
        provider,
        "AwsSolutions-SF2",
        "The Provider framework's waiter state machine offers no X-Ray setting; every "
        "transition is logged to CloudWatch instead.",
    )
    return provider
