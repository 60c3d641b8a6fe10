"""The custom-resource waiter both long checks use: a CDK ``Provider`` with ``is_complete``,
whose Step Functions waiter logs every state transition (never the event payloads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.nag import acknowledge, suppress_provider_framework
from ray_pd_eks.config import WAITER_DEADLINE_MINUTES

# The log groups of the two waiters (readiness check, GPU capacity watch) outlive their stack,
# whatever ``retainLogs`` says: a failed first deploy rolls back by deleting the stack, and
# these logs are the only record of why. They still expire after ``logRetentionDays``.
EVIDENCE_REMOVAL_POLICY = RemovalPolicy.RETAIN
# CloudFormation waits at most one hour for a custom resource; every waiter ends by this.
MAX_TIMEOUT = Duration.minutes(WAITER_DEADLINE_MINUTES)


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


def checked_waiter_timeout(
    what: str,
    timeout: Duration,
    *,
    query_interval: Duration,
    handler_timeout: Duration,
    too_short: str,
) -> int:
    """``timeout`` in whole seconds, once it is at most :data:`MAX_TIMEOUT` and at least two
    polls and one handler run; else ``ValueError`` naming ``what`` (the construct),
    with ``too_short`` (what to use instead) when it is too short."""
    timeout_s = int(timeout.to_seconds())
    if timeout_s > MAX_TIMEOUT.to_seconds():
        raise ValueError(
            f"{what} timeout {timeout.to_human_string()}: CloudFormation waits at most 60 "
            "minutes for a custom resource: every waiter ends with its own message by "
            f"{WAITER_DEADLINE_MINUTES} minutes"
        )
    if timeout_s < 2 * query_interval.to_seconds() + handler_timeout.to_seconds():
        raise ValueError(f"{what} timeout {timeout.to_human_string()}: {too_short}")
    return timeout_s


def waiter_resource(
    scope: Construct,
    *,
    on_event: lambda_.Function,
    is_complete: lambda_.Function,
    query_interval: Duration,
    timeout: Duration,
    log_retention: logs.RetentionDays,
    log_removal_policy: RemovalPolicy,
    resource_type: str,
    properties: Mapping[str, Any],
) -> CustomResource:
    """The custom resource (id ``Resource``) of a waiter whose two functions share
    ``on_event``'s log group, and its :func:`logged_waiter_provider`, in ``scope``."""
    provider = logged_waiter_provider(
        scope,
        on_event=on_event,
        is_complete=is_complete,
        query_interval=query_interval,
        timeout=timeout,
        log_group=on_event.log_group,
        log_retention=log_retention,
        log_removal_policy=log_removal_policy,
    )
    return CustomResource(
        scope,
        "Resource",
        service_token=provider.service_token,
        resource_type=resource_type,
        properties=dict(properties),
    )
