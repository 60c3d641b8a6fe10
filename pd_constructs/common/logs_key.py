"""A KMS key for CloudWatch Logs log groups of fixed names.

CloudWatch Logs encrypts a log group with a customer managed key only if the key policy lets
the regional service principal ``logs.<region>.amazonaws.com`` use it, and AWS documents
narrowing that to the log groups by the encryption context CloudWatch Logs sends
(``kms:EncryptionContext:aws:logs:arn`` = the log group's ARN): CloudWatch Logs User Guide,
"Encrypt log data in CloudWatch Logs using AWS Key Management Service", step 2 (key policy).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

LOGS_KEY_ACTIONS = (
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
)


def log_group_arn(name: str) -> str:
    """The ARN CloudWatch Logs puts in the encryption context for the group ``name``."""
    return f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{name}"


def allow_cloudwatch_logs(key: kms.Key, log_group_names: Sequence[str]) -> None:
    """Let CloudWatch Logs use ``key`` for ``log_group_names`` only."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchLogsForTheseLogGroups",
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.{Aws.URL_SUFFIX}")],
            actions=list(LOGS_KEY_ACTIONS),
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": [
                        log_group_arn(n) for n in log_group_names
                    ]
                }
            },
        )
    )


class LogsKey(Construct):
    """A rotating key that only CloudWatch Logs may use, and only for ``log_group_names``.

    Deleted with the stack (7-day pending window) unless ``removal_policy`` retains it: a
    retained log group stays readable only while its key exists, so ``retainLogs`` retains the
    key too.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        log_group_names: Sequence[str],
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Resource",
            description=description,
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=removal_policy,
        )
        allow_cloudwatch_logs(self.key, log_group_names)
