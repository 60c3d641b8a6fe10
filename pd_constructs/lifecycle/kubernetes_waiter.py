"""The one shape of every custom resource whose handler calls the cluster's Kubernetes API (the
readiness check, the RayService recreate, the Ray token writer): a CDK ``Provider`` whose
handler in the VPC reaches only the API server, with its EKS access entry and the RBAC that
access entry's group is bound to. Handlers live in ``assets/lambda/readiness/``, beside the
Kubernetes client they share (``kube.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.lambda_functions import (
    PYTHON_RUNTIME,
    api_server_only_security_group,
    lambda_code,
    shared_layer,
)
from pd_constructs.common.nag import (
    LAMBDA_BASIC,
    LAMBDA_VPC,
    acknowledge,
    acknowledge_basic_execution_role,
    nag_flatten,
    suppress_provider_framework,
)
from pd_constructs.lifecycle.rollback import grant_describe_named_stack, grant_describe_own_stack
from pd_constructs.lifecycle.waiter import logged_waiter_provider
from ray_pd_eks.logs import LogPolicy

RBAC_API_GROUP = "rbac.authorization.k8s.io"
# The asset folder of every handler that calls Kubernetes (they share its client, kube.py).
KUBERNETES_HANDLERS = "readiness"


def rbac_rule(
    api_group: str, resources: Sequence[str], verbs: Sequence[str], names: Sequence[str] = ()
) -> dict[str, Any]:
    """One RBAC rule: ``verbs`` on ``resources`` of ``api_group`` (``""``: the core group),
    on the objects ``names`` only when given."""
    rule: dict[str, Any] = {"apiGroups": [api_group], "resources": list(resources)}
    if names:
        rule["resourceNames"] = list(names)
    return {**rule, "verbs": list(verbs)}


def group_rbac(
    *,
    name: str,
    group: str,
    namespace: str,
    rules: Sequence[Mapping[str, Any]],
    cluster_rules: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """What the Kubernetes group ``group`` may do, all objects named ``name`` and labelled as
    part of ray-pd-eks: with ``cluster_rules``, a ClusterRole and its ClusterRoleBinding; then a
    Role in ``namespace`` with ``rules`` and its RoleBinding."""
    labels = {"app.kubernetes.io/part-of": "ray-pd-eks"}
    subjects = [{"kind": "Group", "name": group, "apiGroup": RBAC_API_GROUP}]
    cluster_scoped: list[dict[str, Any]] = [
        {
            "apiVersion": f"{RBAC_API_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": list(cluster_rules),
        },
        {
            "apiVersion": f"{RBAC_API_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {"apiGroup": RBAC_API_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        },
    ]
    return [
        *(cluster_scoped if cluster_rules else []),
        {
            "apiVersion": f"{RBAC_API_GROUP}/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": list(rules),
        },
        {
            "apiVersion": f"{RBAC_API_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": RBAC_API_GROUP, "kind": "Role", "name": name},
            "subjects": subjects,
        },
    ]


# CloudFormation refuses to change a custom resource's ServiceToken ("Modifying service token
# is not allowed"; the AWS::CloudFormation::CustomResource reference says updates are not
# supported): a resource whose Provider moved to another stack gets a new logical id, so an
# upgrade creates it anew (and deletes the old one, which answers a Delete at once) instead
# of failing (docs/lifecycle.md, "Upgrading").
MOVED_RESOURCE_ID = "Check"


def _resource_id(provider_scope: Construct | None) -> str:
    return "Resource" if provider_scope is None else MOVED_RESOURCE_ID


@dataclass(frozen=True)
class Handler:
    """One Lambda entry point: ``handler`` as ``module.function`` in
    ``assets/lambda/readiness/``, its ``timeout`` and the function's ``description``."""

    handler: str
    timeout: Duration
    description: str


@dataclass(frozen=True)
class Polling:
    """What makes a :class:`KubernetesWaiter` wait: ``is_complete``, called every ``interval``
    until it reports complete, fails, or ``total_timeout`` has passed."""

    is_complete: Handler
    interval: Duration
    total_timeout: Duration


class KubernetesWaiter(Construct):
    """A custom resource (``resource``, type ``resource_type``) whose handler calls the cluster's
    API server as the Kubernetes group ``kubernetes_group``, which ``rbac`` binds (a Role,
    RoleBinding, ...; applied as ``Rbac`` and in place before the resource runs). The handler
    runs in the cluster's private subnets behind a security group that reaches only the API
    server (:func:`~pd_constructs.common.lambda_functions.api_server_only_security_group`); its
    role's EKS access entry (``AccessEntry``, type STANDARD, no access policy) maps it to the
    group. The
    properties always carry ``ClusterName``, ``ClusterEndpoint`` and
    ``ClusterCertificateAuthorityData``, then ``properties``.

    Two shapes:

    * With ``polling``, a waiter (``is_complete``, never a sleeping Lambda): ``OnEvent`` runs
      outside the VPC (it calls only CloudFormation's ``DescribeStacks``, on its own stack, to
      answer a rollback Update at once), ``IsComplete`` polls from the VPC as ``polling``
      says, and the Provider's waiter state machine logs every transition
      (:func:`~pd_constructs.lifecycle.waiter.logged_waiter_provider`).
    * Without it, one ``Function`` in the VPC answers every event at once through a plain
      ``Provider``.

    ``function`` is the function that calls the API server (``Function``, or ``IsComplete``),
    ``on_event`` the Provider's on-event handler (the same function without ``polling``).

    ``objects`` are further manifests by construct id (the Secret the handler fills), applied
    before the resource runs. Every log group (``Logs``, and ``WaiterLogs`` of a waiter) keeps
    ``log_policy``; ``environment`` goes to every function.

    Subclass it rather than nest it: its children (ids as above) then sit directly under the
    subclass, so the logical ids are those the readiness check, the recreate and the token
    writer had before they shared it; a child construct would have added a level to every
    path. For the same reason (templates byte-identical, resource order included) the
    children are created in the order each shape always had: a waiter's RBAC after its
    functions, a one-shot's ``objects`` and RBAC before them.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        purpose: str,
        kubernetes_group: str,
        rbac: Sequence[Mapping[str, Any]],
        on_event: Handler,
        polling: Polling | None = None,
        resource_type: str,
        properties: Mapping[str, Any],
        log_policy: LogPolicy,
        environment: Mapping[str, str] | None = None,
        objects: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        provider_scope: Construct | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster = cluster
        # Where the machinery goes (security group, log groups, functions, access entry,
        # Provider): here, or under ``provider_scope`` (in an earlier stack, created beside
        # the cluster), leaving only the objects, the RBAC and the resource itself here.
        home: Construct = (
            self if provider_scope is None else Construct(provider_scope, construct_id)
        )
        self.provider_home = home
        self.objects = {
            name: eks.KubernetesManifest(
                self, name, cluster=as_icluster(cluster), manifest=[dict(o) for o in manifest]
            )
            for name, manifest in (objects or {}).items()
        }
        if polling is None:
            self.rbac = self._rbac(rbac)
        self.security_group = api_server_only_security_group(home, cluster=cluster, purpose=purpose)
        log_group = log_policy.log_group(home, "Logs")
        common: dict[str, Any] = {
            "runtime": PYTHON_RUNTIME,
            "code": lambda_code(KUBERNETES_HANDLERS),
            "layers": [shared_layer(home)],
            "log_group": log_group,
        }
        if environment is not None:
            common["environment"] = dict(environment)
        in_vpc: dict[str, Any] = {
            "vpc": cluster.vpc,
            "vpc_subnets": ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            "security_groups": [self.security_group],
        }
        provider: cr.Provider
        # (function, whether it runs in the VPC)
        functions: list[tuple[lambda_.Function, bool]] = []
        if polling is None:
            self.function = self._function(home, "Function", on_event, **in_vpc, **common)
            self.on_event = self.function
            functions.append((self.function, True))
        else:
            self.on_event = self._function(home, "OnEvent", on_event, **common)
            self._grant_describe_resource_stack(self.on_event)
            self.function = self._function(
                home, "IsComplete", polling.is_complete, **in_vpc, **common
            )
            functions += [(self.on_event, False), (self.function, True)]
        role = self.function.role
        assert role is not None
        self.access_entry = eks.CfnAccessEntry(
            home,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=role.role_arn,
            kubernetes_groups=[kubernetes_group],
            type="STANDARD",
        )
        if polling is None:
            provider = cr.Provider(
                home, "Provider", on_event_handler=self.function, log_group=log_group
            )
        else:
            self.rbac = self._rbac(rbac)
            provider = logged_waiter_provider(
                home,
                on_event=self.on_event,
                is_complete=self.function,
                query_interval=polling.interval,
                timeout=polling.total_timeout,
                log_group=log_group,
                log_policy=log_policy,
            )
        self.resource = CustomResource(
            self,
            _resource_id(provider_scope),
            service_token=provider.service_token,
            resource_type=resource_type,
            properties={
                "ClusterName": cluster.cluster_name,
                "ClusterEndpoint": cluster.cluster_endpoint,
                "ClusterCertificateAuthorityData": cluster.cluster_certificate_authority_data,
                **properties,
            },
        )
        self.resource.node.add_dependency(*self.objects.values(), self.access_entry, self.rbac)
        for function, vpc in functions:
            if vpc:
                acknowledge(
                    function,
                    "AwsSolutions-IAM4",
                    "AWSLambdaBasicExecutionRole and AWSLambdaVPCAccessExecutionRole only let "
                    "the function write its own logs and attach to the VPC.",
                    findings=[LAMBDA_BASIC, LAMBDA_VPC],
                )
            else:
                acknowledge_basic_execution_role(function)
        if polling is None:
            suppress_provider_framework(provider, self.function)

    def _rbac(self, manifest: Sequence[Mapping[str, Any]]) -> eks.KubernetesManifest:
        return eks.KubernetesManifest(
            self,
            "Rbac",
            cluster=as_icluster(self.cluster),
            manifest=[dict(o) for o in manifest],
        )

    def _grant_describe_resource_stack(self, fn: lambda_.Function) -> None:
        """DescribeStacks on the stack of the custom resource (whose rollback it tells), which
        is the function's own unless the machinery lives in an earlier stack."""
        resource_stack = Stack.of(self)
        if Stack.of(fn) is resource_stack:
            grant_describe_own_stack(fn)
            return
        arn = grant_describe_named_stack(fn, resource_stack.stack_name)
        acknowledge(
            fn,
            "AwsSolutions-IAM5",
            "cloudformation:DescribeStacks on the one stack that holds this function's custom "
            "resource (its ARN ends in an id CloudFormation assigns, hence the trailing *).",
            findings=[f"Resource::{nag_flatten(Stack.of(fn), arn)}"],
        )

    def _function(
        self, scope: Construct, construct_id: str, handler: Handler, **props: Any
    ) -> lambda_.Function:
        return lambda_.Function(
            scope,
            construct_id,
            handler=handler.handler,
            timeout=handler.timeout,
            description=handler.description,
            **props,
        )

    def attribute(self, name: str) -> str:
        """One attribute of the custom resource's ``Data``."""
        return self.resource.get_att_string(name)
