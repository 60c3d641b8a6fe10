"""GPU add-ons layer: what the GPU nodes need from the Kubernetes side, through the Cluster
stack's kubectl provider: the EFA and NVIDIA device plugins and, when the GPU node group has a
range, the Cluster Autoscaler with its Pod Identity.

After the GPU node stack (its node group) and the Cluster stack (the kubectl provider), so on
``cdk destroy`` the releases go before the nodes, and on the upgrade that moved them here from
the GPU node stack, that stack's ``helm uninstall`` of the old releases is complete before
this one installs them again (docs/lifecycle.md). It imports nothing from the GPU node stack:
the device plugins select the nodes by label, and the autoscaler finds the GPU group by its
tags and its configured name prefix (the group's full name follows the GPU AZ, never exported).
"""

from __future__ import annotations

from typing import Unpack

from constructs import Construct

from pd_constructs.cluster.cluster import GpuDevicePlugins
from pd_constructs.cluster.cluster_autoscaler import GpuClusterAutoscaler
from stacks.app_stack import InClusterStack, InClusterStackProps


class GpuAddonsStack(InClusterStack):
    def __init__(
        self, scope: Construct, construct_id: str, **props: Unpack[InClusterStackProps]
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config, cluster = self.config, self.cluster
        self.device_plugins = GpuDevicePlugins(
            self, "DevicePlugins", cluster=cluster, gpu_instance_type=config.gpu_node_type
        )
        self.cluster_autoscaler: GpuClusterAutoscaler | None = None
        if config.gpu_nodes_autoscale:
            self.cluster_autoscaler = GpuClusterAutoscaler(
                self,
                "ClusterAutoscaler",
                cluster=cluster,
                # The configured names, literals: the IAM conditions name them.
                cluster_name=config.cluster_name,
                nodegroup_name_prefix=config.gpu_nodegroup_name,
                kubernetes_version=config.kubernetes_version,
            )
