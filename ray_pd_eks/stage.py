"""The whole system as one Stage: what ``app.py`` deploys and what each pipeline stage deploys."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stage
from constructs import Construct

from ray_pd_eks.config import AppConfig
from stacks.cluster_stack import ClusterStack
from stacks.network_stack import NetworkStack
from stacks.workload_stack import WorkloadStack


def environment(config: AppConfig) -> Environment | None:
    """Explicit account/region when configured; otherwise environment-agnostic stacks that
    take the account and region of the credentials used at deploy time."""
    if config.account or config.region:
        return Environment(account=config.account or None, region=config.region or None)
    return None


class RayPdEksStage(Stage):
    """Network -> Cluster -> Workload. Dependencies follow the references between them, so
    ``cdk destroy`` removes them in reverse: workload first, network last."""

    def __init__(self, scope: Construct, construct_id: str, *, config: AppConfig, **kwargs: Any):
        kwargs.setdefault("env", environment(config))
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.network = NetworkStack(
            self, "Network", config=config, description="ray-pd-eks: VPC and GPU subnet"
        )
        self.cluster = ClusterStack(
            self,
            "Cluster",
            config=config,
            vpc=self.network.vpc,
            gpu_subnet=self.network.gpu_subnet,
            description="ray-pd-eks: EKS cluster, system and EFA GPU node groups",
        )
        self.workload = WorkloadStack(
            self,
            "Workload",
            config=config,
            cluster=self.cluster.cluster,
            description="ray-pd-eks: KubeRay and the prefill/decode RayService",
        )
        self.cluster.add_stack_dependency(self.network)
        self.workload.add_stack_dependency(self.cluster)
