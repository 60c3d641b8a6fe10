"""Workload layer: namespace, KubeRay operator, the RayService, and the readiness check."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.workload import PdWorkload
from ray_pd_eks.config import AppConfig


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
            self, "Workload", cluster=cluster, config=config, image=config.image_uri(Aws.REGION)
        )
        serve_svc = f"{config.ray_service_name}-serve-svc"
        CfnOutput(self, "Namespace", value=config.namespace)
        CfnOutput(self, "RayServiceName", value=config.ray_service_name)
        CfnOutput(self, "ServeService", value=f"{serve_svc}.{config.namespace}:8000")
        CfnOutput(
            self,
            "PortForwardCommand",
            value=f"kubectl port-forward -n {config.namespace} svc/{serve_svc} 8000:8000",
        )
