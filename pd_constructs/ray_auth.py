"""Ray token authentication: the Secret that holds the token, and the custom resource that
fills it inside the cluster (handler: ``assets/lambda/readiness/ray_token.py``).

KubeRay 1.7 either generates a token Secret per RayCluster (named after the RayCluster, which
KubeRay names ``<rayservice>-<random>`` and renames when the RayService is recreated) or uses
``authOptions.secretName``. The stack owns a named Secret instead, so every reader gets
``get`` on exactly that name: the readiness check, the CLI (docs/security.md) and the Ray pods
through KubeRay. The Secret is applied without data; the token is generated in a Lambda at
deploy time and written straight to the API server, never into the template.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs._lambda import PYTHON_RUNTIME, api_server_only_security_group, lambda_code
from pd_constructs.eks_types import as_icluster
from pd_constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge
from pd_constructs.network import suppress_provider_framework
from pd_constructs.templates import render

TOKEN_WRITER_GROUP = "ray-pd-eks:ray-token-writer"


def render_ray_auth_secret(*, name: str, namespace: str) -> dict[str, Any]:
    """The Ray token Secret, without data."""
    return dict(render("manifests/ray-auth-secret.yaml", {"NAME": name, "NAMESPACE": namespace}))


def token_writer_rbac(*, namespace: str, secret: str) -> list[dict[str, Any]]:
    """Role: ``get`` and ``patch`` on that one Secret; RoleBinding to the writer's group."""
    name = "ray-pd-eks-ray-token-writer"
    labels = {"app.kubernetes.io/part-of": "ray-pd-eks"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [secret],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {
                    "kind": "Group",
                    "name": TOKEN_WRITER_GROUP,
                    "apiGroup": "rbac.authorization.k8s.io",
                }
            ],
        },
    ]


class RayAuthToken(Construct):
    """The Secret ``secret_name`` in ``namespace`` (``secret``, a manifest without data) and
    ``resource``, which writes a random token into it on Create and keeps it on Update.

    The writer is a Lambda function in the cluster's private subnets whose security group
    reaches only the Kubernetes API (443 into the cluster security group; the EKS token is
    presigned locally, no STS call). Its IAM role has no AWS permissions beyond its logs and
    VPC interfaces; in the cluster its access entry maps it to one group, bound to ``get`` and
    ``patch`` on that one Secret. Create the RayService after ``resource``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        namespace: str,
        secret_name: str,
        log_retention: logs.RetentionDays,
        log_removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.secret = eks.KubernetesManifest(
            self,
            "Secret",
            cluster=as_icluster(cluster),
            manifest=[render_ray_auth_secret(name=secret_name, namespace=namespace)],
        )
        self.rbac = eks.KubernetesManifest(
            self,
            "Rbac",
            cluster=as_icluster(cluster),
            manifest=token_writer_rbac(namespace=namespace, secret=secret_name),
        )
        self.security_group = api_server_only_security_group(
            self, cluster=cluster, purpose="Ray token writer"
        )
        log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=log_removal_policy
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=PYTHON_RUNTIME,
            handler="ray_token.on_event",
            code=lambda_code("readiness"),
            timeout=Duration.minutes(1),
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self.security_group],
            log_group=log_group,
            description="Writes a random Ray token into the Ray token Secret, once",
        )
        role = self.function.role
        assert role is not None
        self.access_entry = eks.CfnAccessEntry(
            self,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=role.role_arn,
            kubernetes_groups=[TOKEN_WRITER_GROUP],
            type="STANDARD",
        )
        provider = cr.Provider(
            self, "Provider", on_event_handler=self.function, log_group=log_group
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::RayAuthToken",
            properties={
                "ClusterName": cluster.cluster_name,
                "ClusterEndpoint": cluster.cluster_endpoint,
                "ClusterCertificateAuthorityData": cluster.cluster_certificate_authority_data,
                "Namespace": namespace,
                "SecretName": secret_name,
            },
        )
        self.resource.node.add_dependency(self.secret, self.rbac, self.access_entry)
        acknowledge(
            self.function,
            "AwsSolutions-IAM4",
            "AWSLambdaBasicExecutionRole and AWSLambdaVPCAccessExecutionRole only let the "
            "function write its own logs and attach to the VPC.",
            findings=[LAMBDA_BASIC, LAMBDA_VPC],
        )
        suppress_provider_framework(provider, self.function)
