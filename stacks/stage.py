"""The whole system as one Stage: what ``app.py`` deploys and what each pipeline stage deploys."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aspects, Environment, Stack, Stage
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.pod_identity import RestrictPodIdentityTrust
from ray_pd_eks.config import AppConfig
from stacks.app_stack import InClusterStackProps
from stacks.cluster_stack import ClusterStack
from stacks.gpu_addons_stack import GpuAddonsStack
from stacks.gpu_stack import GpuNodesStack
from stacks.network_stack import NetworkStack
from stacks.readiness_stack import ReadinessStack
from stacks.workload_stack import WorkloadStack


def environment(config: AppConfig) -> Environment | None:
    """Explicit account/region when configured; otherwise environment-agnostic stacks that
    take the account and region of the credentials used at deploy time."""
    if config.account or config.region:
        return Environment(account=config.account or None, region=config.region or None)
    return None


class RayPdEksStage(Stage):
    r"""Six stacks; dependencies follow what each needs, so independent ones deploy side by
    side (``cdk deploy --concurrency``, and CDK Pipelines by itself)::

        Network -+-> Cluster --+--> Workload ------------+--> Readiness
                 |             \--> GpuAddons ----------+
                 \-> GpuNodes ------^ (GpuAddons after both)

    ``GpuNodes`` needs the Network stack only: it waits for the control plane with a custom
    resource (one poll after ACTIVE) instead of for the whole Cluster stack. ``cdk destroy``
    removes dependents first; GpuNodes, which no stack dependency orders against Cluster,
    starts no later than it (the order the CDK CLI destroys independent stacks in), and the
    Cluster stack's delete guard holds the cluster's delete until the node group is gone
    (docs/teardown.md). See docs/architecture.md ("Stacks").
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: AppConfig, **kwargs: Any):
        kwargs.setdefault("env", environment(config))
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.network = NetworkStack(
            self,
            "Network",
            config=config,
            description="ray-pd-eks: VPC and subnets",
        )
        self.cluster = ClusterStack(
            self,
            "Cluster",
            config=config,
            vpc=self.network.vpc,
            control_plane_subnets=self.network.network.control_plane_subnets,
            egress_route_table_ids=self.network.egress_route_table_ids,
            load_balancer_route_table_ids=self.network.load_balancer_route_table_ids,
            default_security_group_id=self.network.default_security_group_id,
            gpu_nodes_stack_name=self.stack_name("GpuNodes"),
            gpu_nodes_stack_path=self.stack_path("GpuNodes"),
            description="ray-pd-eks: EKS control plane, add-ons, NAT gateway, S3 endpoint",
        )
        self.gpu_nodes = GpuNodesStack(
            self,
            "GpuNodes",
            config=config,
            vpc=self.network.vpc,
            gpu_route_table_id=self.network.gpu_route_table_id,
            cluster_stack_name=self.cluster.stack_name,
            description="ray-pd-eks: GPU AZ and subnet, EFA GPU node group, capacity watch",
        )
        self.workload = WorkloadStack(
            self,
            "Workload",
            **self._in_cluster("ray-pd-eks: node warm-up, system nodes, KubeRay, the RayService"),
        )
        self.gpu_addons = GpuAddonsStack(
            self,
            "GpuAddons",
            **self._in_cluster("ray-pd-eks: GPU device plugins and the Cluster Autoscaler"),
        )
        self.readiness = ReadinessStack(
            self,
            "Readiness",
            alarm_topic=(
                self.workload.observability.topic.topic if self.workload.observability else None
            ),
            endpoint=self.workload.endpoint,
            nat_public_ip=self.cluster.egress.public_ip,
            **self._in_cluster("ray-pd-eks: readiness check of the endpoint"),
        )
        if self.gpu_nodes.stack_name != self.stack_name("GpuNodes"):
            raise ValueError(
                f"the GpuNodes stack is named {self.gpu_nodes.stack_name}, not "
                f"{self.stack_name('GpuNodes')} as the Cluster stack's kept Providers assume"
            )
        if self.gpu_nodes.node.path != self.stack_path("GpuNodes"):
            raise ValueError(
                f"the GpuNodes stack's path is {self.gpu_nodes.node.path}, not "
                f"{self.stack_path('GpuNodes')} as the Cluster stack's delete guard says"
            )
        # Every Pod Identity role, whoever builds it, trusts this cluster only.
        Aspects.of(self).add(RestrictPodIdentityTrust(as_icluster(self.cluster.cluster)))
        self.cluster.add_stack_dependency(self.network)
        # GpuNodes: the Network stack only (its references make it so); no dependency on the
        # Cluster stack, so the two deploy side by side.
        self.workload.add_stack_dependency(self.cluster)
        self.gpu_addons.add_stack_dependency(self.gpu_nodes)
        self.gpu_addons.add_stack_dependency(self.cluster)
        self.readiness.add_stack_dependency(self.workload)
        self.readiness.add_stack_dependency(self.gpu_nodes)
        self.readiness.add_stack_dependency(self.gpu_addons)

    def _in_cluster(self, description: str) -> InClusterStackProps:
        """The props of a stack that deploys into the Cluster stack's cluster."""
        return InClusterStackProps(
            config=self.config,
            cluster=self.cluster.cluster,
            providers=self.cluster.providers,
            description=description,
        )

    def stack_name(self, construct_id: str) -> str:
        """The name CDK gives this Stage's stack ``construct_id`` (``<stage name>-<id>``), for
        a stack that must name another before it exists (checked once both do)."""
        return f"{self.stage_name}-{construct_id}"

    def stack_path(self, construct_id: str) -> str:
        """The CDK path of this Stage's stack ``construct_id`` (what ``cdk destroy`` selects),
        for a message that must name another stack before it exists."""
        return f"{self.node.path}/{construct_id}"

    @property
    def stacks(self) -> tuple[Stack, ...]:
        """Every stack, in deploy order."""
        return (
            self.network,
            self.cluster,
            self.gpu_nodes,
            self.workload,
            self.gpu_addons,
            self.readiness,
        )
