"""cdk-nag acknowledgments (cdk-nag 3 runs as a CDK policy-validation plugin; a rule is
suppressed with ``Validations.of(construct).acknowledge``, for that construct and below)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import IConstruct

MANAGED_POLICY = "Policy::arn:<AWS::Partition>:iam::aws:policy/"
LAMBDA_BASIC = MANAGED_POLICY + "service-role/AWSLambdaBasicExecutionRole"
LAMBDA_VPC = MANAGED_POLICY + "service-role/AWSLambdaVPCAccessExecutionRole"


def acknowledge(scope: IConstruct, rule: str, reason: str, findings: Sequence[str] = ()) -> None:
    """Acknowledge ``rule`` on ``scope``; with ``findings``, only those granular findings
    (``AwsSolutions-IAM5[Resource::*]``) rather than the whole rule."""
    rule = f"AwsSolutions::{rule}" if rule.startswith("AwsSolutions-") else rule
    ids = [f"{rule}[{f}]" for f in findings] or [rule]
    Validations.of(scope).acknowledge(*(Acknowledgment(id=i, reason=reason) for i in ids))


def acknowledge_basic_execution_role(function: IConstruct) -> None:
    """Acknowledge AwsSolutions-IAM4 for a Lambda function's AWSLambdaBasicExecutionRole only."""
    acknowledge(
        function,
        "AwsSolutions-IAM4",
        "AWSLambdaBasicExecutionRole only lets the function write its own logs.",
        findings=[LAMBDA_BASIC],
    )


def function_versions_finding(function: IConstruct) -> str:
    """The IAM5 finding for a policy that invokes every version of ``function`` (``<arn>:*``)."""
    cfn = function.node.default_child
    assert isinstance(cfn, CfnResource)
    return f"Resource::<{Stack.of(function).get_logical_id(cfn)}.Arn>:*"


def nag_flatten(stack: Stack, value: str) -> str:
    """``value`` as cdk-nag names it in a finding (its ``flattenCfnReference``): ``<Ref>``,
    ``<Resource.Attribute>``, joins concatenated. Tokens are resolved now, so they must refer
    to this stack (a cross-stack reference would become an import only at synthesis)."""
    if not Token.is_unresolved(value):
        return value

    def visit(node: Any) -> str:
        if isinstance(node, str):
            return node.replace("${", "<").replace("}", ">")
        if isinstance(node, dict) and len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Fn::Join":
                delimiter, items = arg
                return str(delimiter).join(visit(i) for i in items)
            if key == "Fn::Sub":
                return visit(arg)
            if key == "Fn::GetAtt":
                return f"<{visit(arg[0])}.{visit(arg[1])}>"
            if key == "Fn::ImportValue":
                return visit(arg)
            if key == "Ref":
                return f"<{visit(arg)}>"
        raise ValueError(f"cannot name {node!r} as cdk-nag does")

    return visit(stack.resolve(value))


def _framework_functions(provider: cr.Provider) -> list[lambda_.Function]:
    """The framework's own functions (onEvent, isComplete, onTimeout) that its roles invoke."""
    return [
        c
        for c in provider.node.children
        if isinstance(c, lambda_.Function)
        and c.node.id in ("framework-isComplete", "framework-onTimeout")
    ]


def suppress_provider_framework(provider: cr.Provider, *handlers: lambda_.IFunction) -> None:
    """The CDK Provider framework's own Lambda: runtime and invoke policy set by aws-cdk-lib."""
    acknowledge(
        provider,
        "AwsSolutions-IAM4",
        "AWSLambdaBasicExecutionRole only lets the framework function write its own logs.",
        findings=[LAMBDA_BASIC],
    )
    acknowledge(
        provider,
        "AwsSolutions-IAM5",
        "The Provider framework may invoke any version of its own handler (<arn>:*), as "
        "aws-cdk-lib generates it.",
        findings=[
            function_versions_finding(f) for f in (*handlers, *_framework_functions(provider))
        ],
    )
    acknowledge(
        provider,
        "AwsSolutions-L1",
        "The Provider framework function's Node.js runtime is chosen by aws-cdk-lib.",
    )
