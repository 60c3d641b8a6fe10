"""The custom-resource waiter both long checks use: a CDK ``Provider`` with ``is_complete``,
whose Step Functions waiter logs every state transition (never the event payloads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.lambda_functions import handler_function
from pd_constructs.common.nag import (
    acknowledge,
    acknowledge_basic_execution_role,
    suppress_provider_framework,
)
from ray_pd_eks.config import WAITER_DEADLINE_MINUTES
from ray_pd_eks.logs import LogPolicy

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
    log_policy: LogPolicy,
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
            destination=log_policy.log_group(scope, "WaiterLogs"),
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


@dataclass(frozen=True)
class Polling:
    """How a waiter polls: a look every ``interval``, each look (the ``IsComplete`` function)
    at most ``handler_timeout``. Both must match the handler's ``QUERY_INTERVAL_SECONDS`` and
    ``LAMBDA_TIMEOUT_SECONDS``, from which it derives when to give up with its own message
    before the Provider's total timeout."""

    interval: Duration
    handler_timeout: Duration


def checked_waiter_timeout(
    what: str, timeout: Duration, *, polling: Polling, too_short: str
) -> int:
    """``timeout`` in whole seconds, once it is at most :data:`MAX_TIMEOUT` and at least two
    polls and one handler run; else ``ValueError`` naming ``what`` (the construct),
    with ``too_short`` (what to use instead) when it is too short."""
    query_interval, handler_timeout = polling.interval, polling.handler_timeout
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


@dataclass(frozen=True)
class FunctionWaiter:
    """A waiter's two functions and their ``provider`` (:func:`function_waiter`)."""

    on_event: lambda_.Function
    is_complete: lambda_.Function
    provider: cr.Provider

    def resource(
        self, scope: Construct, *, resource_type: str, properties: Mapping[str, Any]
    ) -> CustomResource:
        """Its custom resource (id ``Resource``) in ``scope``."""
        return CustomResource(
            scope,
            "Resource",
            service_token=self.provider.service_token,
            resource_type=resource_type,
            properties=dict(properties),
        )


def function_waiter(
    scope: Construct,
    *,
    folder: str,
    what: str,
    start: str,
    poll: str,
    log_policy: LogPolicy,
    polling: Polling,
    timeout: Duration,
) -> FunctionWaiter:
    """A waiter's machinery in ``scope``, from ``assets/lambda/<folder>``: ``OnEvent``
    (``handler.on_event``, 30 s, described "<what>: <start>") and ``IsComplete``
    (``handler.is_complete``, ``polling.handler_timeout``, "<what>: <poll>"), both writing to
    the one log group ``Logs``, and their :func:`logged_waiter_provider`, polling every
    ``polling.interval`` for at most ``timeout``; the functions' basic execution roles
    acknowledged. The functions' own permissions are the caller's."""
    on_event = handler_function(
        scope,
        folder=folder,
        construct_id="OnEvent",
        description=f"{what}: {start}",
        log_policy=log_policy,
        timeout=Duration.seconds(30),
    )
    is_complete = handler_function(
        scope,
        folder=folder,
        construct_id="IsComplete",
        handler="handler.is_complete",
        description=f"{what}: {poll}",
        log_policy=log_policy,
        timeout=polling.handler_timeout,
        log_group=on_event.log_group,
    )
    provider = logged_waiter_provider(
        scope,
        on_event=on_event,
        is_complete=is_complete,
        query_interval=polling.interval,
        timeout=timeout,
        log_group=on_event.log_group,
        log_policy=log_policy,
    )
    for fn in (on_event, is_complete):
        acknowledge_basic_execution_role(fn)
    return FunctionWaiter(on_event, is_complete, provider)
