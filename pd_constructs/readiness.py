"""The deploy proves the endpoint works: a custom resource that waits until the Serve app is
RUNNING on EFA and answers a real chat completion (handler: ``assets/lambda/readiness/``).

Least privilege inside the cluster: the Lambda role's EKS access entry maps it to one
Kubernetes group, bound to read-only rules on exactly what the handler reads, plus the service
proxy of the two Ray services it calls. No cluster-admin, no ``AmazonEKSViewPolicy`` (which
does not cover ``ray.io``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from pd_constructs._lambda import PYTHON_RUNTIME, api_server_only_security_group, lambda_code
from pd_constructs.eks_types import as_icluster
from pd_constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge
from pd_constructs.rollback import grant_describe_own_stack
from pd_constructs.waiter import EVIDENCE_REMOVAL_POLICY, logged_waiter_provider

READINESS_GROUP = "ray-pd-eks:readiness"
QUERY_INTERVAL = Duration.seconds(30)
# One poll spends at most POLL_BUDGET_SECONDS on API calls; the Lambda timeout leaves room for
# the slowest call started just inside the budget (see the handler's constants).
POLL_BUDGET_SECONDS = 180
HANDLER_TIMEOUT = Duration.minutes(5)
SERVE_PORT = 8000
DASHBOARD_PORT = 8265


def readiness_rbac(
    *, namespace: str, ray_service: str, ray_auth_secret: str = ""
) -> list[dict[str, Any]]:
    """ClusterRole for nodes (cluster-scoped), Role for what lives in the namespace; with
    ``ray_auth_secret``, ``get`` on that one Secret (the Ray token the dashboard requires)."""
    serve, head = f"{ray_service}-serve-svc", f"{ray_service}-head-svc"
    name = "ray-pd-eks-readiness"
    subjects = [{"kind": "Group", "name": READINESS_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]
    labels = {"app.kubernetes.io/part-of": "ray-pd-eks"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            # The handler only lists (tests/test_rbac.py proves every grant is used).
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": subjects,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": [
                {
                    "apiGroups": ["ray.io"],
                    "resources": ["rayservices"],
                    "resourceNames": [ray_service],
                    "verbs": ["get"],
                },
                {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
                {
                    # The proxy's resource name is the URL segment "<service>:<port>". The chat
                    # completion is a POST through the proxy, which RBAC calls "create".
                    "apiGroups": [""],
                    "resources": ["services/proxy"],
                    "resourceNames": [f"{serve}:{SERVE_PORT}"],
                    "verbs": ["get", "create"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["services/proxy"],
                    "resourceNames": [f"{head}:{DASHBOARD_PORT}"],
                    "verbs": ["get"],
                },
                *(
                    [
                        {
                            "apiGroups": [""],
                            "resources": ["secrets"],
                            "resourceNames": [ray_auth_secret],
                            "verbs": ["get"],
                        }
                    ]
                    if ray_auth_secret
                    else []
                ),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        },
    ]


def config_hash(manifest: Any) -> str:
    """Changes whenever the RayService does, so CloudFormation re-runs the check on Update."""
    text = json.dumps(manifest, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ReadinessCheck(Construct):
    """Waits (up to ``timeout``, at most one hour) for the endpoint to prove itself; fails the
    deploy with the reason when it cannot. ``Delete`` returns at once.

    Its log groups (the functions' and the waiter's) are retained on delete with
    ``log_retention``, even when the app's other logs go with the stack: they hold the reason a
    failed deploy failed.

    ``ray_auth_secret`` names the Secret with the Ray token (Ray token authentication): the
    function may ``get`` that one Secret and sends the token to the dashboard.

    The facts it found are attributes of ``resource`` (``AppStatus``, ``PrefillNode``,
    ``DecodeNode``, ``KvBackend``, ``Models``, ``GpuNodes``, ``CompletionSample``, ...).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        namespace: str,
        ray_service_name: str,
        application_name: str,
        model_id: str,
        kv_backend: str,
        expected_gpu_nodes: int,
        gpus_per_worker: int = 1,
        serving_mode: str = "pd",
        ray_auth_secret: str = "",
        timeout: Duration,
        manifest_fingerprint: str,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        minutes = timeout.to_minutes()
        if minutes > 60:
            raise ValueError(f"ReadinessCheck timeout {minutes} min: CloudFormation allows 60")

        self.security_group = api_server_only_security_group(
            self, cluster=cluster, purpose="Readiness check"
        )
        # Kept on delete, whatever retainLogs says: when a first deploy fails, CloudFormation
        # deletes the stack, and these logs hold the only record of why (docs/lifecycle.md).
        log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=EVIDENCE_REMOVAL_POLICY
        )
        common: dict[str, Any] = {
            "runtime": PYTHON_RUNTIME,
            "code": lambda_code("readiness"),
            "log_group": log_group,
            "environment": {"POLL_BUDGET_SECONDS": str(POLL_BUDGET_SECONDS)},
        }
        # Outside the VPC: it makes no Kubernetes call, only CloudFormation's DescribeStacks on
        # an Update, to tell a rollback (answered at once) from a deploy. So the VPC function's
        # security group stays limited to the API server and STS (docs/lifecycle.md).
        on_event = lambda_.Function(
            self,
            "OnEvent",
            handler="handler.on_event",
            timeout=Duration.seconds(30),
            description="Readiness check: starts the wait, or answers a rollback at once",
            **common,
        )
        grant_describe_own_stack(on_event)
        is_complete = lambda_.Function(
            self,
            "IsComplete",
            handler="handler.is_complete",
            timeout=HANDLER_TIMEOUT,
            description="Readiness check: one poll of nodes, RayService, endpoint and EFA",
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
            kubernetes_groups=[READINESS_GROUP],
            type="STANDARD",
        )
        self.rbac = eks.KubernetesManifest(
            self,
            "Rbac",
            cluster=as_icluster(cluster),
            manifest=readiness_rbac(
                namespace=namespace,
                ray_service=ray_service_name,
                ray_auth_secret=ray_auth_secret,
            ),
        )
        provider = logged_waiter_provider(
            self,
            on_event=on_event,
            is_complete=is_complete,
            query_interval=QUERY_INTERVAL,
            timeout=timeout,
            log_group=log_group,
            log_retention=log_retention,
            log_removal_policy=EVIDENCE_REMOVAL_POLICY,
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::RayServiceReadiness",
            properties={
                "ClusterName": cluster.cluster_name,
                "ClusterEndpoint": cluster.cluster_endpoint,
                "ClusterCertificateAuthorityData": cluster.cluster_certificate_authority_data,
                "Namespace": namespace,
                "RayServiceName": ray_service_name,
                "ApplicationName": application_name,
                "ModelId": model_id,
                "KvBackend": kv_backend,
                "ServingMode": serving_mode,
                "RayAuthSecret": ray_auth_secret,
                "ExpectedGpuNodes": str(expected_gpu_nodes),
                "GpusPerWorker": str(gpus_per_worker),
                "TimeoutSeconds": str(int(timeout.to_seconds())),
                "QueryIntervalSeconds": str(int(QUERY_INTERVAL.to_seconds())),
                "ConfigHash": manifest_fingerprint,
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
