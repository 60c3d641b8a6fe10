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

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.common.templates import render
from pd_constructs.lifecycle.kubernetes_waiter import (
    Handler,
    KubernetesWaiter,
    group_rbac,
    rbac_rule,
)
from ray_pd_eks.logs import LogPolicy

TOKEN_WRITER_GROUP = "ray-pd-eks:ray-token-writer"


def render_ray_auth_secret(*, name: str, namespace: str) -> dict[str, Any]:
    """The Ray token Secret, without data."""
    return dict(render("manifests/ray-auth-secret.yaml", {"NAME": name, "NAMESPACE": namespace}))


def token_writer_rbac(*, namespace: str, secret: str) -> list[dict[str, Any]]:
    """Role: ``get`` and ``patch`` on that one Secret; RoleBinding to the writer's group."""
    return group_rbac(
        name="ray-pd-eks-ray-token-writer",
        group=TOKEN_WRITER_GROUP,
        namespace=namespace,
        rules=[rbac_rule("", ["secrets"], ["get", "patch"], names=[secret])],
    )


class RayAuthToken(KubernetesWaiter):
    """The Secret ``secret_name`` in ``namespace`` (``secret``, a manifest without data) and
    ``resource``, which writes a random token into it on Create and keeps it on Update.

    The writer is a Lambda function in the cluster's private subnets whose security group
    reaches only the Kubernetes API (443 into the control plane's security group; the EKS token is
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
        log_policy: LogPolicy,
    ) -> None:
        # The writer answers Create at once: a one-shot custom resource, no polling.
        super().__init__(
            scope,
            construct_id,
            cluster=cluster,
            purpose="Ray token writer",
            kubernetes_group=TOKEN_WRITER_GROUP,
            rbac=token_writer_rbac(namespace=namespace, secret=secret_name),
            objects={"Secret": [render_ray_auth_secret(name=secret_name, namespace=namespace)]},
            on_event=Handler(
                "ray_token.on_event",
                Duration.minutes(1),
                "Writes a random Ray token into the Ray token Secret, once",
            ),
            resource_type="Custom::RayAuthToken",
            properties={"Namespace": namespace, "SecretName": secret_name},
            log_policy=log_policy,
        )
        self.secret = self.objects["Secret"]
