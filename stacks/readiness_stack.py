"""Readiness layer: the readiness check that proves the endpoint, and its facts as outputs.

It deploys last, after both the workload stack (the RayService exists) and the GPU node stack
(GPU nodes joined, GPU and EFA device plugins running), so it waits only for what happens
inside the cluster: the Serve app reaching RUNNING on EFA and a real chat completion.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_sns as sns
from constructs import Construct

from pd_constructs.endpoint.endpoint import ApplicationEndpoint
from pd_constructs.network.network_policy import RAY_PORTS
from pd_constructs.readiness.endpoint_probe import EndpointProbe, probe_skip_reason
from pd_constructs.readiness.kv_probe import KvProbe
from pd_constructs.readiness.readiness import ReadinessCheck, config_hash
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.config import AppConfig
from ray_pd_eks.kv_shapes import kv_bytes_per_token
from stacks.app_stack import InClusterStack, InClusterStackProps

# Readiness facts surfaced as stack outputs (and to the pipeline's post-deploy step).
READINESS_OUTPUTS = (
    "AppStatus",
    "GpuNodes",
    "PrefillNode",
    "DecodeNode",
    "KvBackend",
    "KvProvider",
    "KvTransfer",
    "IntegrityProbe",
    "RayTokenEnforced",
    "Models",
)


def gpu_placement(config: AppConfig) -> str:
    """What the user configured about where the GPU nodes run. The readiness check runs again
    when it changes (a move replaces the GPU nodes), without importing anything from the GPU
    stack: an import of the AZ would pin it (CloudFormation never changes an export in use)."""
    return "|".join(
        (
            config.gpu_node_type,
            config.gpu_az,
            config.gpu_capacity_reservation_id,
            config.gpu_placement_group_name,
        )
    )


class ReadinessStack(InClusterStack):
    """The readiness check and, with ``kvProbeIntervalMinutes``, the scheduled KV probe, whose
    alarms notify ``alarm_topic`` (the workload stack's, when observability is on); with the
    workload stack's ``endpoint``, the probe through its load balancer (from ``nat_public_ip``
    when it is internet-facing), unless :func:`probe_skip_reason` says why not."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic | None = None,
        endpoint: ApplicationEndpoint | None = None,
        nat_public_ip: str = "",
        **props: Unpack[InClusterStackProps],
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config, cluster = self.config, self.cluster
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
            ray_auth_secret=config.ray_auth_secret_name,
            metrics_port=RAY_PORTS.metrics_export,
            kv_bytes_per_token=kv_bytes_per_token(
                config.model_source, config.dtype, config.kv_cache_dtype
            ),
            gpu_workers_privileged=config.workers_privileged,
            # At least the group's minimum: it may hold more while decode has scaled out.
            expected_gpu_nodes=config.gpu_node_min,
            gpus_per_worker=config.tensor_parallel_size,
            timeout=Duration.minutes(config.readiness_timeout_minutes),
            # Hash of the manifest as rendered for review (region left symbolic) and of the
            # configured GPU placement: stable, and it changes exactly when the RayService or
            # the GPU nodes do.
            manifest_fingerprint=config_hash(
                {
                    "rayservice": render_rayservice(config, image=config.image_uri("-")),
                    "gpuPlacement": gpu_placement(config),
                }
            ),
            log_policy=self.log_policy,
            provider_scope=self.providers,
        )
        self.kv_probe: KvProbe | None = None
        if config.kv_probe_interval_minutes:
            self.kv_probe = KvProbe(
                self,
                "KvProbe",
                readiness=self.readiness,
                interval_minutes=config.kv_probe_interval_minutes,
                kv_backend=config.kv_backend,
                serving_mode=config.serving_mode,
                ray_service_name=config.ray_service_name,
                log_policy=self.log_policy,
                alarm_topic=alarm_topic,
            )
        self.outputs: dict[str, CfnOutput] = {}
        for name in READINESS_OUTPUTS:
            self.outputs[f"Readiness{name}"] = CfnOutput(
                self, f"Readiness{name}", value=self.readiness.attribute(name)
            )
        self.endpoint_probe: EndpointProbe | None = None
        skipped = probe_skip_reason(config)
        if endpoint is not None and not skipped:
            self.endpoint_probe = EndpointProbe(
                self,
                "EndpointProbe",
                cluster=cluster,
                config=config,
                endpoint=endpoint,
                nat_public_ip=nat_public_ip,
                after=self.readiness.resource,
                provider_scope=self.providers,
                fingerprint=self.readiness.properties["ConfigHash"],
                log_policy=self.log_policy,
            )
        self.outputs["ReadinessEndpointProbe"] = CfnOutput(
            self,
            "ReadinessEndpointProbe",
            value=self.endpoint_probe.summary if self.endpoint_probe else skipped,
            description="The deploy's chat completion through the load balancer, or why not",
        )
