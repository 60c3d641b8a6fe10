"""Shared settings for the app's own Python Lambda functions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.eks_types import control_plane_security_group
from pd_constructs.common.nag import acknowledge_basic_execution_role, suppress_provider_framework
from ray_pd_eks.logs import LogPolicy

ASSETS = Path(__file__).resolve().parents[2] / "assets"
# The newest Python runtime Lambda offers; handlers use only the standard library and boto3.
PYTHON_RUNTIME = lambda_.Runtime.PYTHON_3_14


# The helpers every handler shares (the rollback check, event and property helpers): one
# plain folder with ``python/pd_lambda/``, shipped as a Lambda layer (assets/lambda/layer/).
SHARED_LAYER_FOLDER = "layer"
SHARED_LAYER_ID = "SharedHandlerLayer"


def lambda_code(folder: str) -> lambda_.Code:
    """A plain-folder asset under ``assets/lambda/`` (no bundling, so no Docker)."""
    return lambda_.Code.from_asset(str(ASSETS / "lambda" / folder), exclude=["__pycache__"])


def handler_function(
    scope: Construct,
    *,
    folder: str,
    description: str,
    log_policy: LogPolicy,
    timeout: Duration | None = None,
    construct_id: str = "Function",
    handler: str = "handler.on_event",
    log_group: logs.ILogGroup | None = None,
) -> lambda_.Function:
    """A custom resource's function ``construct_id`` (default ``Function``; ``handler``,
    default ``handler.on_event``, in ``assets/lambda/<folder>``, with the shared layer) and its
    log group ``Logs``, in ``scope``. A waiter's second function (``is_complete``) passes the
    first one's ``log_group`` instead of getting one of its own."""
    if log_group is None:
        log_group = log_policy.log_group(scope, "Logs")
    return lambda_.Function(
        scope,
        construct_id,
        runtime=PYTHON_RUNTIME,
        handler=handler,
        code=lambda_code(folder),
        layers=[shared_layer(scope)],
        timeout=timeout or Duration.minutes(1),
        log_group=log_group,
        description=description,
    )


def function_resource(
    scope: Construct,
    *,
    folder: str,
    description: str,
    log_policy: LogPolicy,
    resource_type: str,
    properties: Mapping[str, Any],
    timeout: Duration | None = None,
) -> tuple[lambda_.Function, CustomResource]:
    """A custom resource answered at once by its function (:func:`handler_function`: its
    ``on_event`` does the work), in ``scope``: the function, its ``Provider`` (id ``Provider``,
    logging to the function's log group) and the resource (id ``Resource``), with the cdk-nag
    acknowledgments of the function's basic execution role and of the Provider framework.
    Returns ``(function, resource)``; the function's own permissions are the caller's."""
    function = handler_function(
        scope,
        folder=folder,
        description=description,
        log_policy=log_policy,
        timeout=timeout,
    )
    provider = cr.Provider(
        scope, "Provider", on_event_handler=function, log_group=function.log_group
    )
    resource = CustomResource(
        scope,
        "Resource",
        service_token=provider.service_token,
        resource_type=resource_type,
        properties=dict(properties),
    )
    acknowledge_basic_execution_role(function)
    suppress_provider_framework(provider, function)
    return function, resource


def shared_layer(scope: Construct) -> lambda_.ILayerVersion:
    """The layer of the shared handler helpers (``import pd_lambda``), one per stack: created
    in ``scope``'s stack on first use (id ``SharedHandlerLayer``), then reused by every
    function of that stack. Every function of the app's own handlers takes it."""
    stack = Stack.of(scope)
    found = stack.node.try_find_child(SHARED_LAYER_ID)
    if isinstance(found, lambda_.LayerVersion):
        return found
    return lambda_.LayerVersion(
        stack,
        SHARED_LAYER_ID,
        code=lambda_code(SHARED_LAYER_FOLDER),
        compatible_runtimes=[PYTHON_RUNTIME],
        description="ray-pd-eks: helpers the custom-resource handlers share (pd_lambda)",
    )


def api_server_only_security_group(
    scope: Construct, *, cluster: eks.Cluster, purpose: str
) -> ec2.SecurityGroup:
    """The security group of a function that calls Kubernetes: HTTPS to the control plane's
    security group (the private API endpoint's network interfaces) and nothing else, with the
    matching ingress on that group, which EKS attaches to the control plane's interfaces only
    (:func:`pd_constructs.common.eks_types.control_plane_security_group`), so the rule opens no node
    and no pod.

    Nothing else is needed: the EKS token is an STS request presigned locally (kube.eks_token
    makes no network call), and CloudFormation's DescribeStacks on a rollback is called by the
    on-event functions outside the VPC. Creates ``SecurityGroup``, ``ClusterEgress`` and
    ``ClusterIngress`` in ``scope``; ``purpose`` names the function in the descriptions.
    """
    control_plane = control_plane_security_group(cluster)
    group = ec2.SecurityGroup(
        scope,
        "SecurityGroup",
        vpc=cluster.vpc,
        description=f"{purpose}: HTTPS to the EKS API endpoint only",
        allow_all_outbound=False,
    )
    # A rule of its own, not inline in the group: the group (and a function in it) is then
    # created without waiting for the cluster, whose security group only this rule names.
    ec2.CfnSecurityGroupEgress(
        scope,
        "ClusterEgress",
        group_id=group.security_group_id,
        destination_security_group_id=control_plane.security_group_id,
        ip_protocol="tcp",
        from_port=443,
        to_port=443,
        description="Kubernetes API",
    )
    ec2.CfnSecurityGroupIngress(
        scope,
        "ClusterIngress",
        group_id=control_plane.security_group_id,
        source_security_group_id=group.security_group_id,
        ip_protocol="tcp",
        from_port=443,
        to_port=443,
        description=f"{purpose} to the Kubernetes API",
    )
    return group
