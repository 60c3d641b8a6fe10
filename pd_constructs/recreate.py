"""Ray cluster changes are applied, not silently ignored: a custom resource, ordered before the
RayService manifest, that deletes the RayService when its Ray cluster spec changed and waits
until its pods are gone (handler: ``assets/lambda/readiness/recreate.py``).

Why a custom resource and not the manifest's own replacement: ``aws_eks_v2.KubernetesManifest``
runs ``kubectl apply`` on Update (aws-cdk-lib 2.275, ``kubectl-handler/apply``), which KubeRay
under ``upgradeStrategy: None`` ignores for ``rayClusterConfig``; and forcing a replacement (a new
logical id per spec) would create the new manifest first and then delete the old one, which is
the same RayService object: the deploy would end with no RayService at all.

Least privilege inside the cluster: the polling function's EKS access entry maps it to its own
Kubernetes group, bound to a Role that may get and delete exactly the one RayService, get
RayClusters and list pods in the namespace. The readiness check keeps its read-only group.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from pd_constructs._lambda import PYTHON_RUNTIME, api_server_only_security_group, lambda_code
from pd_constructs.eks_types import as_icluster
from pd_constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge
from pd_constructs.rollback import grant_describe_own_stack
from pd_constructs.waiter import logged_waiter_provider

RECREATE_GROUP = "ray-pd-eks:recreate"
# Must match the handler's QUERY_INTERVAL_SECONDS / LAMBDA_TIMEOUT_SECONDS.
QUERY_INTERVAL = Duration.seconds(15)
HANDLER_TIMEOUT = Duration.minutes(2)
# Deleting a RayCluster's pods takes their grace period (Ray's default 30 s) plus KubeRay's
# reconcile; 15 minutes leaves room for a node that is slow to confirm.
DEFAULT_TIMEOUT = Duration.minutes(15)


def recreate_rbac(*, namespace: str, ray_service: str) -> list[dict[str, Any]]:
    """A Role (and its binding) with exactly what the handler calls."""
    name = "ray-pd-eks-recreate"
    labels = {"app.kubernetes.io/part-of": "ray-pd-eks"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": [
                {
                    "apiGroups": ["ray.io"],
                    "resources": ["rayservices"],
                    "resourceNames": [ray_service],
                    "verbs": ["get", "delete"],
                },
                {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "Group", "name": RECREATE_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    ]


class RayServiceRecreate(Construct):
    """Deletes the RayService ``ray_service_name`` when the running Ray cluster's spec hash is
    not ``cluster_spec_hash``, then waits (up to ``timeout``, default 15 minutes) until its
    pods are gone; completes at once when the spec is unchanged or the RayService does not exist.
    Make the RayService manifest depend on this construct. ``Delete`` returns at once.

    ``resource`` exposes ``Action`` (``created``/``recreated``/``unchanged``),
    ``ClusterSpecHash`` and ``Summary`` (one sentence, with the downtime when recreated).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        namespace: str,
        ray_service_name: str,
        cluster_spec_hash: str,
        log_retention: logs.RetentionDays,
        log_removal_policy: RemovalPolicy,
        timeout: Duration = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(scope, construct_id)
        if not 3 <= timeout.to_minutes() <= 60:
            raise ValueError(
                f"RayServiceRecreate timeout {timeout.to_human_string()}: use 3 to 60 minutes"
            )
        self.security_group = api_server_only_security_group(
            self, cluster=cluster, purpose="RayService recreate"
        )
        log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=log_removal_policy
        )
        common: dict[str, Any] = {
            "runtime": PYTHON_RUNTIME,
            "code": lambda_code("readiness"),
            "log_group": log_group,
        }
        # Outside the VPC, like the readiness check's: no Kubernetes call, only DescribeStacks.
        on_event = lambda_.Function(
            self,
            "OnEvent",
            handler="recreate.on_event",
            timeout=Duration.seconds(30),
            description="RayService recreate: starts, or answers a rollback at once",
            **common,
        )
        grant_describe_own_stack(on_event)
        is_complete = lambda_.Function(
            self,
            "IsComplete",
            handler="recreate.is_complete",
            timeout=HANDLER_TIMEOUT,
            description="RayService recreate: deletes it on a Ray cluster change, waits for pods",
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self.security_group],
            **common,
        )
        role = is_complete.role
        assert role is not None
        self.access_entry = eks.CfnAccessEntry(
            self,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=role.role_arn,
            kubernetes_groups=[RECREATE_GROUP],
            type="STANDARD",
        )
        self.rbac = eks.KubernetesManifest(
            self,
            "Rbac",
            cluster=as_icluster(cluster),
            manifest=recreate_rbac(namespace=namespace, ray_service=ray_service_name),
        )
        provider = logged_waiter_provider(
            self,
            on_event=on_event,
            is_complete=is_complete,
            query_interval=QUERY_INTERVAL,
            timeout=timeout,
            log_group=log_group,
            log_retention=log_retention,
            log_removal_policy=log_removal_policy,
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::RayServiceRecreate",
            properties={
                "ClusterName": cluster.cluster_name,
                "ClusterEndpoint": cluster.cluster_endpoint,
                "ClusterCertificateAuthorityData": cluster.cluster_certificate_authority_data,
                "Namespace": namespace,
                "RayServiceName": ray_service_name,
                "ClusterSpecHash": cluster_spec_hash,
                "TimeoutSeconds": str(int(timeout.to_seconds())),
            },
        )
        self.resource.node.add_dependency(self.access_entry, self.rbac)
        acknowledge(
            on_event,
            "AwsSolutions-IAM4",
            "AWSLambdaBasicExecutionRole only lets the function write its own logs.",
            findings=[LAMBDA_BASIC],
        )
        acknowledge(
            is_complete,
            "AwsSolutions-IAM4",
            "AWSLambdaBasicExecutionRole and AWSLambdaVPCAccessExecutionRole only let the "
            "function write its own logs and attach to the VPC.",
            findings=[LAMBDA_BASIC, LAMBDA_VPC],
        )

    def attribute(self, name: str) -> str:
        return self.resource.get_att_string(name)
