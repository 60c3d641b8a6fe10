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

READINESS_GROUP = "ray-pd-eks:readiness"
QUERY_INTERVAL = Duration.seconds(30)
# One poll spends at most POLL_BUDGET_SECONDS on API calls; the Lambda timeout leaves room for
# the slowest call started just inside the budget (see the handler's constants).
POLL_BUDGET_SECONDS = 180
HANDLER_TIMEOUT = Duration.minutes(5)
# The Provider's own hard stop comes this long after the check's deadline (``timeout``), so
# the check's own message always arrives first; timeout + grace stays under CloudFormation's
# hour (readinessTimeoutMinutes is at most 55).
PROVIDER_GRACE = Duration.minutes(3)
CLOUDFORMATION_LIMIT_MINUTES = 60
SERVE_PORT = 8000
DASHBOARD_PORT = 8265


def readiness_rbac(
    *, namespace: str, ray_service: str, ray_auth_secret: str = "", kv_counters: bool = True
) -> list[dict[str, Any]]:
    """ClusterRole for nodes (cluster-scoped), Role for what lives in the namespace; with
    ``ray_auth_secret``, ``get`` on that one Secret (the Ray token the dashboard requires);
    with ``kv_counters`` (P/D), ``get`` on ``pods/proxy`` to read the decode engines' NIXL
    counters from their metrics port.

    ``pods/proxy`` cannot name its pods: RBAC's resource name is ``<pod>:<port>``, and KubeRay
    generates the worker pods' names. So the grant is the namespace's ``pods/proxy`` ``get``
    only (no ``create``: no POST through it); the NetworkPolicy
    ``ray-metrics-from-api-server`` is what narrows it to the workers' metrics port, the only
    port of the Ray pods the control plane may reach besides Serve's and the dashboard's.
    """
    serve, head = f"{ray_service}-serve-svc", f"{ray_service}-head-svc"
    return group_rbac(
        name="ray-pd-eks-readiness",
        group=READINESS_GROUP,
        namespace=namespace,
        # The handler only lists (tests/test_rbac.py proves every grant is used).
        cluster_rules=[rbac_rule("", ["nodes"], ["list"])],
        rules=[
            rbac_rule("ray.io", ["rayservices"], ["get"], names=[ray_service]),
            rbac_rule("", ["pods", "events"], ["list"]),
            # The proxy's resource name is the URL segment "<service>:<port>". The chat
            # completion is a POST through the proxy, which RBAC calls "create".
            rbac_rule("", ["services/proxy"], ["get", "create"], names=[f"{serve}:{SERVE_PORT}"]),
            rbac_rule("", ["services/proxy"], ["get"], names=[f"{head}:{DASHBOARD_PORT}"]),
            *([rbac_rule("", ["pods/proxy"], ["get"])] if kv_counters else []),
            *(
                [rbac_rule("", ["secrets"], ["get"], names=[ray_auth_secret])]
                if ray_auth_secret
                else []
            ),
        ],
    )


def config_hash(manifest: Any) -> str:
    """Changes whenever the RayService does, so CloudFormation re-runs the check on Update."""
    text = json.dumps(manifest, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ReadinessCheck(KubernetesWaiter):
    """Waits (up to ``timeout``, at most one hour) for the endpoint to prove itself; fails the
    deploy with the reason when it cannot. ``Delete`` returns at once.

    Its log groups (the functions' and the waiter's) keep ``log_policy``'s retention but are
    retained on delete, even when the app's other logs go with the stack: they hold the reason a
    failed deploy failed.

    ``ray_auth_secret`` names the Secret with the Ray token (Ray token authentication): the
    function may ``get`` that one Secret and sends the token to the dashboard.

    ``provider_scope`` (default: here) takes its functions, access entry and Provider, so they
    can be created in an earlier stack, beside the cluster (docs/deploy-timeline.md).

    ``kv_bytes_per_token`` (default 0: unknown, the generic floor) is the model's KV bytes per
    prompt token (``ray_pd_eks/kv_shapes.py``), the KV byte check's floor.
    ``gpu_workers_privileged`` (default true, as the app deploys them with EFA) says whether
    the GPU workers run privileged: when not, a failure of the EFA path names
    ``gpuWorkerPrivileged``.

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
        metrics_port: int = 8080,
        kv_bytes_per_token: int = 0,
        gpu_workers_privileged: bool = True,
        timeout: Duration,
        manifest_fingerprint: str,
        log_policy: LogPolicy,
        provider_scope: Construct | None = None,
    ) -> None:
        minutes = timeout.to_minutes()
        limit = CLOUDFORMATION_LIMIT_MINUTES - int(PROVIDER_GRACE.to_minutes()) - 2
        if minutes > limit:
            raise ValueError(
                f"ReadinessCheck timeout {minutes} min: at most {limit}, so that the check's own "
                "message, then the Provider's hard stop, come before CloudFormation's hour"
            )
        # Its logs are kept on delete, whatever retainLogs says: when a first deploy fails,
        # CloudFormation deletes the stack, and these logs hold the only record of why
        # (docs/lifecycle.md). Its on-event function runs outside the VPC: it makes no
        # Kubernetes call, only CloudFormation's DescribeStacks on an Update, to tell a rollback
        # (answered at once) from a deploy (docs/lifecycle.md).
        properties: dict[str, str] = {
            "Namespace": namespace,
            "RayServiceName": ray_service_name,
            "ApplicationName": application_name,
            "ModelId": model_id,
            "KvBackend": kv_backend,
            "ServingMode": serving_mode,
            "RayAuthSecret": ray_auth_secret,
            "MetricsPort": str(metrics_port),
            "KvBytesPerToken": str(kv_bytes_per_token),
            "GpuWorkersPrivileged": "true" if gpu_workers_privileged else "false",
            "ExpectedGpuNodes": str(expected_gpu_nodes),
            "GpusPerWorker": str(gpus_per_worker),
            "TimeoutSeconds": str(int(timeout.to_seconds())),
            "QueryIntervalSeconds": str(int(QUERY_INTERVAL.to_seconds())),
            "ConfigHash": manifest_fingerprint,
        }
        super().__init__(
            scope,
            construct_id,
            cluster=cluster,
            purpose="Readiness check",
            kubernetes_group=READINESS_GROUP,
            rbac=readiness_rbac(
                namespace=namespace,
                ray_service=ray_service_name,
                ray_auth_secret=ray_auth_secret,
                kv_counters=serving_mode == "pd",
            ),
            on_event=Handler(
                "handler.on_event",
                Duration.seconds(30),
                "Readiness check: starts the wait, or answers a rollback at once",
            ),
            polling=Polling(
                is_complete=Handler(
                    "handler.is_complete",
                    HANDLER_TIMEOUT,
                    "Readiness check: one poll of nodes, RayService, endpoint and EFA",
                ),
                interval=QUERY_INTERVAL,
                total_timeout=timeout.plus(PROVIDER_GRACE),
            ),
            environment={"POLL_BUDGET_SECONDS": str(POLL_BUDGET_SECONDS)},
            resource_type="Custom::RayServiceReadiness",
            properties=properties,
            log_policy=log_policy.retained(),
            provider_scope=provider_scope,
        )
        # The scheduled KV probe (pd_constructs/readiness/kv_probe.py) runs the same check with
        # these.
        self.properties = properties
