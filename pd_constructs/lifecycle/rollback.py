"""Rollback-safe custom resources: the one permission a handler needs to tell CloudFormation's
rollback Update from a deploy.

CloudFormation rolls an updated custom resource back by sending it another Update with the
previous properties; nothing in the event says "rollback". The handlers of this app (readiness
check, GPU capacity watch, GPU AZ chooser, RayService recreate) call ``DescribeStacks`` on the
event's ``StackId`` and, while the stack is ``UPDATE_ROLLBACK_IN_PROGRESS``, answer at once
with the current physical id and the previous ``Data`` instead of checking again: a rollback
must not be failed (``UPDATE_ROLLBACK_FAILED``) by the very state that failed the deploy.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_


def grant_describe_own_stack(fn: lambda_.Function) -> None:
    """``cloudformation:DescribeStacks`` on the function's own stack only (its ``AWS::StackId``,
    the exact ARN CloudFormation puts in the event's ``StackId``)."""
    fn.add_to_role_policy(
        iam.PolicyStatement(
            actions=["cloudformation:DescribeStacks"], resources=[Stack.of(fn).stack_id]
        )
    )


def grant_describe_named_stack(fn: lambda_.Function, stack_name: str) -> str:
    """``cloudformation:DescribeStacks`` on one other stack of the same account and region, by
    name, for a function that serves a custom resource in that stack; returns the ARN (which
    ends in ``/*``: the stack id CloudFormation assigns)."""
    stack = Stack.of(fn)
    arn = stack.format_arn(
        service="cloudformation",
        resource="stack",
        resource_name=f"{stack_name}/*",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )
    fn.add_to_role_policy(
        iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[arn])
    )
    return arn
