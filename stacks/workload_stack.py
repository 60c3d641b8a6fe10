"""Workload layer: the system node group, then namespace, KubeRay operator and the RayService.

It needs the cluster and the system node only (the operator and the Ray head run there), so
it deploys beside the GPU node stack instead of after it; the Ray workers wait in Pending for
the GPU nodes, and the readiness stack's check proves the whole.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.cluster import SystemNodeGroup
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
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=cluster,
            instance_type=config.system_node_type,
            node_count=config.system_node_count,
            root_volume_gib=config.system_root_volume_gib,
        )
        self.workload = PdWorkload(
            self,
            "Workload",
            cluster=cluster,
            config=config,
            image=config.image_uri(Aws.REGION),
            region=Aws.REGION,
        )
        # The operator's Helm release waits for its pod, which needs a node.
        self.workload.operator.node.add_dependency(self.system_nodes)

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
