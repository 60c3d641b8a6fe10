"""Log group retention and removal, from the ``logRetentionDays`` and ``retainLogs`` settings."""

from __future__ import annotations

from dataclasses import dataclass, replace

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Construct

from ray_pd_eks.config import AppConfig

_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
}


@dataclass(frozen=True)
class LogPolicy:
    """What every log group of a stack keeps: ``retention`` (from ``logRetentionDays``) and
    ``removal_policy`` (from ``retainLogs``), derived once per stack by :func:`log_policy`."""

    retention: logs.RetentionDays
    removal_policy: RemovalPolicy

    def retained(self) -> LogPolicy:
        """The same retention, with the log group kept on delete whatever ``retainLogs`` says."""
        return replace(self, removal_policy=RemovalPolicy.RETAIN)

    def log_group(self, scope: Construct, construct_id: str) -> logs.LogGroup:
        """A log group ``construct_id`` in ``scope`` that keeps this policy."""
        return logs.LogGroup(
            scope, construct_id, retention=self.retention, removal_policy=self.removal_policy
        )


def log_policy(config: AppConfig) -> LogPolicy:
    return LogPolicy(log_retention(config), log_removal_policy(config))


def log_retention(config: AppConfig) -> logs.RetentionDays:
    return _RETENTION[config.log_retention_days]


def log_removal_policy(config: AppConfig) -> RemovalPolicy:
    """Logs go with the stack unless ``retainLogs`` asks to keep them (e.g. for production)."""
    return RemovalPolicy.RETAIN if config.retain_logs else RemovalPolicy.DESTROY
