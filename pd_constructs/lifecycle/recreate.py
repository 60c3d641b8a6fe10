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

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.lifecycle.kubernetes_waiter import (
    Handler,
    KubernetesWaiter,
    Polling,
    group_rbac,
    rbac_rule,
)
from ray_pd_eks.logs import LogPolicy

RECREATE_GROUP = "ray-pd-eks:recreate"
# Must match the handler's QUERY_INTERVAL_SECONDS / LAMBDA_TIMEOUT_SECONDS.
QUERY_INTERVAL = Duration.seconds(15)
HANDLER_TIMEOUT = Duration.minutes(2)
# Deleting a RayCluster's pods takes their grace period (Ray's default 30 s) plus KubeRay's
# reconcile; 15 minutes leaves room for a node that is slow to confirm.
DEFAULT_TIMEOUT = Duration.minutes(15)


def recreate_rbac(*, namespace: str, ray_service: str) -> list[dict[str, Any]]:
    """A Role (and its binding) with exactly what the handler calls."""
    return group_rbac(
        name="ray-pd-eks-recreate",
        group=RECREATE_GROUP,
        namespace=namespace,
        rules=[
            rbac_rule("ray.io", ["rayservices"], ["get", "delete"], names=[ray_service]),
            rbac_rule("ray.io", ["rayclusters"], ["get"]),
            rbac_rule("", ["pods"], ["list"]),
        ],
    )


class RayServiceRecreate(KubernetesWaiter):
    """Deletes the RayService ``ray_service_name`` when the running Ray cluster's spec hash is
    not ``cluster_spec_hash``, then waits (up to ``timeout``, default 15 minutes) until its
    pods are gone; completes at once when the spec is unchanged or the RayService does not exist.
    Make the RayService manifest depend on this construct. ``Delete`` returns at once.
    ``provider_scope`` (default: here) takes its functions and Provider (an earlier stack).

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
        log_policy: LogPolicy,
        timeout: Duration = DEFAULT_TIMEOUT,
        provider_scope: Construct | None = None,
    ) -> None:
        if not 3 <= timeout.to_minutes() <= 60:
            raise ValueError(
                f"RayServiceRecreate timeout {timeout.to_human_string()}: use 3 to 60 minutes"
            )
        # Its on-event function runs outside the VPC, like the readiness check's: no Kubernetes
        # call, only DescribeStacks.
        super().__init__(
            scope,
            construct_id,
            cluster=cluster,
            purpose="RayService recreate",
            kubernetes_group=RECREATE_GROUP,
            rbac=recreate_rbac(namespace=namespace, ray_service=ray_service_name),
            on_event=Handler(
                "recreate.on_event",
                Duration.seconds(30),
                "RayService recreate: starts, or answers a rollback at once",
            ),
            polling=Polling(
                is_complete=Handler(
                    "recreate.is_complete",
                    HANDLER_TIMEOUT,
                    "RayService recreate: deletes it on a Ray cluster change, waits for pods",
                ),
                interval=QUERY_INTERVAL,
                total_timeout=timeout,
            ),
            resource_type="Custom::RayServiceRecreate",
            properties={
                "Namespace": namespace,
                "RayServiceName": ray_service_name,
                "ClusterSpecHash": cluster_spec_hash,
                "TimeoutSeconds": str(int(timeout.to_seconds())),
            },
            log_policy=log_policy,
            provider_scope=provider_scope,
        )
