"""Node warm-up: pull the Ray LLM image and fill the model cache as soon as each node joins.

Created in the workload stack with nothing but the cluster to wait for (not the node
groups, not the device plugins, and never the KubeRay operator or the RayService, which come
later in that stack), so the ~20 GB image pull and the weights download run while the rest of
the deploy proceeds. Rendering is pure, like :mod:`pd_constructs.serving.workload`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.namespaces import WARMUP_NAMESPACE
from pd_constructs.common.templates import render
from pd_constructs.network.network_policy import render_warmup_network_policies
from pd_constructs.serving.admission import render_gpu_node_policy, render_warmup_pod_policy
from pd_constructs.serving.model_access import (
    credential_annotations,
    fetch_init_containers,
    node_cache_volume,
    prefetch_container,
    service_account_name,
    token_volume,
)
from pd_constructs.serving.namespace import pod_namespace
from pd_constructs.serving.workload import worker_resources
from ray_pd_eks.config import AppConfig

# A pause image from EKS Distro on ECR Public (the image Karpenter's and the Cluster
# Autoscaler's headroom examples use), which the nodes reach through the NAT gateway as they do
# the prefetch image; a ~300 KB pull. Whether the AMI caches this tag is not relied on (the
# AMI's own sandbox image is named by its build). Pinned to its digest at deploy time like every
# other image (pd_constructs/serving/images.py): a tag that does not resolve fails that step,
# by name.
PAUSE_IMAGE = "public.ecr.aws/eks-distro/kubernetes/pause:3.10"
WARM_SPARE_PRIORITY_CLASS = "ray-pd-eks-gpu-warm-spare"
# The Cluster Autoscaler's default --expendable-pods-priority-cutoff (cluster-autoscaler 1.35.2
# and 1.36.1, config/flags/flags.go; not set in assets/helm-values/cluster-autoscaler.yaml).
# A pod is expendable only *below* it (core/utils/expendable.go, IsExpendablePod), so a
# placeholder at the cutoff still makes the autoscaler add a node, and the FAQ's
# overprovisioning example uses exactly this value.
CLUSTER_AUTOSCALER_EXPENDABLE_CUTOFF = -10
WARM_SPARE_PRIORITY = CLUSTER_AUTOSCALER_EXPENDABLE_CUTOFF


def render_warmup_namespace() -> dict[str, Any]:
    return dict(render("manifests/warmup-namespace.yaml", {"NAMESPACE": WARMUP_NAMESPACE}))


def render_image_prepull(*, image: str) -> dict[str, Any]:
    """DaemonSet on system and GPU nodes that pulls ``image`` and keeps it in use."""
    return dict(
        render("manifests/image-prepull.yaml", {"NAMESPACE": WARMUP_NAMESPACE, "IMAGE": image})
    )


def render_model_prefetch(
    config: AppConfig,
    *,
    region: str,
    prefetch_image: str | None = None,
    aws_cli_image: str | None = None,
) -> dict[str, Any]:
    """DaemonSet on GPU nodes that fills the node's model cache: the S3 copy when
    ``modelS3Uri`` is set, else a Hugging Face download (with the token when configured).

    Neither runs in the ~20 GB Ray image: the S3 copy uses the AWS CLI image and the Hugging
    Face download a small Python image (``prefetch_image``, default ``prefetchImage``), so the
    weights download beside the image pull instead of after it. ``aws_cli_image`` defaults to
    ``awsCliImage``."""
    fetch = fetch_init_containers(config, region=region, aws_cli_image=aws_cli_image)
    if config.model_s3_uri:
        init = fetch
    else:
        image = prefetch_image or config.prefetch_image
        init = [*fetch, prefetch_container(config, image=image)]
    volumes = [node_cache_volume(config)]
    if config.hf_token_secret_arn:
        volumes.append(token_volume())
    return dict(
        render(
            "manifests/model-prefetch.yaml",
            {
                "NAMESPACE": WARMUP_NAMESPACE,
                "SERVICE_ACCOUNT": service_account_name(config),
                "ANNOTATIONS": credential_annotations(config, [c["name"] for c in init] + ["done"]),
                "INIT_CONTAINERS": init,
                "HOLD_IMAGE": init[-1]["image"],
                "VOLUMES": volumes,
            },
        )
    )


def render_warm_spares(config: AppConfig, *, image: str) -> list[dict[str, Any]]:
    """The placeholders' PriorityClass and their Deployment of ``gpuWarmSpareNodes`` pause pods
    (``image``), each asking for what a Ray GPU worker asks for (assets/manifests/
    gpu-warm-spare.yaml says why each field is what it is)."""
    return list(
        render(
            "manifests/gpu-warm-spare.yaml",
            {
                "NAMESPACE": WARMUP_NAMESPACE,
                "PRIORITY_CLASS": WARM_SPARE_PRIORITY_CLASS,
                "PRIORITY": WARM_SPARE_PRIORITY,
                "REPLICAS": config.gpu_warm_spare_nodes,
                "IMAGE": image,
                "RESOURCES": worker_resources(config),
            },
        )
    )


class NodeWarmup(Construct):
    """The warm-up namespace, its default-deny NetworkPolicy, its admission policy and the
    cluster-wide GPU-node one, the pre-pull and prefetch DaemonSets and, when the prefetch
    needs AWS access, its Pod Identity service account.
    ``image`` (the Ray image), ``prefetch_image`` and ``aws_cli_image`` (default: as
    configured) and ``region`` may be CloudFormation tokens (digests resolved at deploy time,
    the deploy region). With ``gpuWarmSpareNodes`` also the warm spares' placeholders
    (``pause_image``, required then), after the namespace and the admission policies."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        image: str,
        region: str,
        prefetch_image: str | None = None,
        aws_cli_image: str | None = None,
        pause_image: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # What warm-up pods may ask of their nodes, and (cluster-wide) that the GPU nodes serve
        # only our namespaces (pd_constructs/serving/admission.py): in force before the DaemonSets'
        # pods, and early in the deploy, beside the namespace.
        self.admission_manifest = [
            *render_warmup_pod_policy(config),
            *render_gpu_node_policy(config),
        ]
        self.namespace, self.network_policies, self.admission, self.service_account = pod_namespace(
            self,
            cluster=cluster,
            config=config,
            name=WARMUP_NAMESPACE,
            namespace=render_warmup_namespace(),
            network_policies=render_warmup_network_policies(config),
            admission=self.admission_manifest,
        )
        self.manifests = [
            render_image_prepull(image=image),
            render_model_prefetch(
                config, region=region, prefetch_image=prefetch_image, aws_cli_image=aws_cli_image
            ),
        ]
        self.daemon_sets = eks.KubernetesManifest(
            self, "DaemonSets", cluster=as_icluster(cluster), manifest=self.manifests
        )
        self.daemon_sets.node.add_dependency(self.namespace, self.admission)
        self.warm_spares: eks.KubernetesManifest | None = None
        if config.gpu_warm_spare_nodes:
            if pause_image is None:
                raise ValueError("NodeWarmup: gpuWarmSpareNodes needs pause_image")
            self.warm_spares = eks.KubernetesManifest(
                self,
                "WarmSpares",
                cluster=as_icluster(cluster),
                manifest=render_warm_spares(config, image=pause_image),
            )
            self.warm_spares.node.add_dependency(self.namespace)
            self.warm_spares.node.add_dependency(self.admission)
        if self.service_account:
            # Pod Identity injects credentials when a pod is created: association first.
            self.daemon_sets.node.add_dependency(self.service_account)
