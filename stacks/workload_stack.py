"""Workload layer: namespace, KubeRay operator, the RayService, and the readiness check."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.readiness import ReadinessCheck, config_hash
from pd_constructs.workload import PdWorkload, render_rayservice
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_retention

# Readiness facts surfaced as stack outputs (and to the pipeline's post-deploy step).
READINESS_OUTPUTS = ("AppStatus", "GpuNodes", "PrefillNode", "DecodeNode", "KvBackend", "Models")


class WorkloadStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: AppConfig,
        cluster: eks.Cluster,
        **kwargs: Any,
    ):
        super().__init__(scope, construct_id, **kwargs)
        self.workload = PdWorkload(
            self,
            "Workload",
            cluster=cluster,
            config=config,
            image=config.image_uri(Aws.REGION),
            region=Aws.REGION,
        )
        self.readiness = ReadinessCheck(
            self,
            "Readiness",
            cluster=cluster,
            namespace=config.namespace,
            ray_service_name=config.ray_service_name,
            application_name=config.application_name,
            model_id=config.model_id,
            kv_backend=config.kv_backend,
            serving_mode=config.serving_mode,
            expected_gpu_nodes=config.gpu_node_count,
            timeout=Duration.minutes(config.readiness_timeout_minutes),
            # Hash of the manifest as rendered for review (region left symbolic): stable, and
            # it changes exactly when the RayService does.
            manifest_fingerprint=config_hash(
                render_rayservice(config, image=config.image_uri("-"))
            ),
            log_retention=log_retention(config),
        )
        # The check runs after the RayService exists; RBAC needs the namespace.
        self.readiness.node.add_dependency(self.workload.rayservice)
        self.readiness.rbac.node.add_dependency(self.workload.namespace)

        serve_svc = f"{config.ray_service_name}-serve-svc"
        self.outputs: dict[str, CfnOutput] = {
            "Namespace": CfnOutput(self, "Namespace", value=config.namespace),
            "RayServiceName": CfnOutput(self, "RayServiceName", value=config.ray_service_name),
            "ServeService": CfnOutput(
                self, "ServeService", value=f"{serve_svc}.{config.namespace}:8000"
            ),
            "PortForwardCommand": CfnOutput(
                self,
                "PortForwardCommand",
                value=f"kubectl port-forward -n {config.namespace} svc/{serve_svc} 8000:8000",
            ),
        }
        for name in READINESS_OUTPUTS:
            self.outputs[f"Readiness{name}"] = CfnOutput(
                self, f"Readiness{name}", value=self.readiness.attribute(name)
            )
