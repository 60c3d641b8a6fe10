"""The workload: namespace, KubeRay operator and the prefill/decode RayService.

Rendering is pure (``render_*`` functions: config in, Kubernetes objects out), so the same
objects feed the ``eks.KubernetesManifest`` resources, the tests and the rendered YAML that
``app.py`` writes next to the templates for review.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.eks_types import as_icluster
from pd_constructs.helm import HelmAddon, kuberay_operator
from pd_constructs.model_access import (
    MODEL_CACHE,
    VLLM_CACHE_ROOT,
    ModelFetchServiceAccount,
    cache_mount,
    credential_annotations,
    fetch_init_containers,
    model_env,
    node_cache_volume,
    serve_model_source,
    service_account_name,
    token_mount,
    token_volume,
)
from pd_constructs.network_policy import RAY_PORTS, render_ray_network_policies
from pd_constructs.ray_auth import RayAuthToken
from pd_constructs.recreate import RayServiceRecreate
from pd_constructs.templates import render
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_removal_policy, log_retention


def _gib(value: float) -> str:
    return f"{int(value)}Gi"


def render_namespace(config: AppConfig) -> dict[str, Any]:
    """The namespace, labelled for Pod Security admission at the level the workers need.

    ``privileged`` in every variant: the GPU workers mount the node's model cache as a hostPath
    volume, which ``baseline`` forbids (so a ``baseline`` namespace rejected the UCX and
    aggregated workers), and with EFA they also run privileged. ``warn``/``audit`` stay at
    ``baseline`` so every exception is reported (tests/test_pod_security.py checks each pod).
    """
    level = "privileged"
    return dict(
        render("manifests/namespace.yaml", {"NAMESPACE": config.namespace, "PSA_ENFORCE": level})
    )


def placement_group_config(config: AppConfig) -> dict[str, Any]:
    """The Ray placement group of one engine replica: one GPU bundle per tensor-parallel rank,
    ``STRICT_PACK`` so all of them land on one node (one Ray worker pod). Ray Serve LLM 2.58
    (``VLLMEngineConfig.placement_bundles``/``placement_strategy``) would otherwise build the
    same bundles with ``PACK``, which spills a replica across nodes when one cannot hold it;
    here that must fail to schedule instead, because tensor parallelism across nodes would run
    its all-reduce over the network."""
    bundles = [{"GPU": 1} for _ in range(config.tensor_parallel_size)]  # no shared dicts:
    # yaml.safe_dump would write a repeated object as an anchor and aliases
    return {"bundles": bundles, "strategy": "STRICT_PACK"}


def decode_deployment_config(config: AppConfig) -> dict[str, Any]:
    """The decode deployment's Serve options: a fixed ``num_replicas``, or, when decode scales,
    an explicit ``autoscaling_config`` (Ray Serve 2.58's ``AutoscalingConfig`` fields; Serve
    refuses ``num_replicas`` beside it). Explicit because Ray Serve LLM's own defaults for an
    LLM deployment set the target so high that nothing triggers a scale-up."""
    if not config.decode_autoscales:
        return {"num_replicas": config.decode_replicas}
    return {
        "autoscaling_config": {
            "min_replicas": config.decode_min,
            "initial_replicas": config.decode_replicas,
            "max_replicas": config.decode_max,
            "target_ongoing_requests": config.decode_target_ongoing_requests,
            "upscale_delay_s": config.decode_upscale_delay_seconds,
            "downscale_delay_s": config.decode_downscale_delay_seconds,
        }
    }


def render_serve_config(config: AppConfig) -> dict[str, Any]:
    """The Serve application (``serveConfigV2``) as a mapping: the PD app, or with
    ``servingMode: aggregated`` the same engines without disaggregation (the baseline)."""
    common = {
        "APP_NAME": config.application_name,
        "MODEL_ID": config.model_id,
        "MODEL_SOURCE": serve_model_source(config),
        "MAX_MODEL_LEN": config.max_model_len,
        "DTYPE": config.dtype,
        "GPU_MEMORY_UTILIZATION": config.gpu_memory_utilization,
        "ENFORCE_EAGER": config.enforce_eager,
        "TENSOR_PARALLEL_SIZE": config.tensor_parallel_size,
        "PLACEMENT_GROUP_CONFIG": placement_group_config(config),
    }
    if not config.is_pd:
        return dict(
            render(
                "manifests/serve-config-aggregated.yaml",
                {**common, "REPLICAS": config.worker_replicas},
            )
        )
    return dict(
        render(
            "manifests/serve-config.yaml",
            {
                **common,
                "KV_BACKENDS": [config.kv_backend],
                "PREFILL_REPLICAS": config.prefill_replicas,
                "DECODE_DEPLOYMENT_CONFIG": decode_deployment_config(config),
            },
        )
    )


# Ray's metric cardinality (ray/_private/telemetry/metric_cardinality.py, Ray 2.58): "legacy"
# keeps every label; "recommended" (the default) drops WorkerId from the per-worker task and
# actor gauges (ray_tasks, ray_actors); "low" also drops their task/actor Name label. No
# dashboard query or alarm uses those, and every series scraped is billed as OTLP ingest.
RAY_METRIC_CARDINALITY = "low"


def metrics_env() -> list[dict[str, Any]]:
    """Environment of head and workers that bounds the number of metric series."""
    return [{"name": "RAY_metric_cardinality_level", "value": RAY_METRIC_CARDINALITY}]


def worker_env(config: AppConfig) -> list[dict[str, Any]]:
    """Environment of each GPU worker; the transport part depends on ``kvBackend``, and an
    aggregated app (no KV transfer) has none."""
    env: list[dict[str, Any]] = [
        {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if config.is_pd:
        # Qwen3.5 is a hybrid (Gated-DeltaNet) model; NIXL needs this state layout for it.
        env.append({"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "DS"})
    env += [
        *model_env(config),
        *metrics_env(),
        # vLLM's own caches (torch.compile and CUDA-graph artefacts when enforceEager is off)
        # on the node cache too, so a restarted worker skips the recompilation.
        {"name": "VLLM_CACHE_ROOT", "value": VLLM_CACHE_ROOT},
    ]
    if not config.is_pd:
        return env
    # A fixed NIXL handshake port (Ray Serve LLM would pick a random one), so the
    # NetworkPolicy between the workers can name it.
    env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(RAY_PORTS.nixl_side_channel)})
    if config.uses_efa_transport:
        env.append({"name": "FI_PROVIDER", "value": "efa"})
    else:
        # The walkthrough's fallback for nodes without EFA: NIXL over UCX on TCP sockets, on
        # ports the NetworkPolicy allows between the workers.
        env.append({"name": "UCX_TLS", "value": "tcp,cuda_copy"})
        env.append({"name": "UCX_TCP_PORT_RANGE", "value": RAY_PORTS.ucx_tcp_port_range})
    return env


def worker_efa_interfaces(config: AppConfig) -> int:
    """EFA interfaces one worker requests when the KV cache moves over EFA: all of the node's
    when the worker owns the whole node (its replica's GPUs are all the node's GPUs), else
    one."""
    spec = config.gpu_spec
    if not config.uses_efa_transport:
        return 0
    return spec.efa_interfaces if config.tensor_parallel_size == spec.gpus else 1


def worker_resources(config: AppConfig) -> dict[str, Any]:
    """Requests = limits per worker: half the node's vCPUs and memory, ``tensorParallelSize``
    GPUs (one engine replica) and, when the KV cache moves over EFA, the EFA interfaces of
    :func:`worker_efa_interfaces`."""
    spec = config.gpu_spec
    resources: dict[str, Any] = {
        "cpu": str(spec.vcpus // 2),
        "memory": _gib(spec.memory_gib / 2),
        "nvidia.com/gpu": config.tensor_parallel_size,
    }
    if efa := worker_efa_interfaces(config):
        resources["vpc.amazonaws.com/efa"] = efa
    return resources


def worker_volumes(config: AppConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) of a GPU worker."""
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, cache_mount()]
    volumes = [
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": _gib(config.gpu_spec.memory_gib / 8)},
        },
        node_cache_volume(config),
    ]
    if config.hf_token_secret_arn:
        mounts.append(token_mount())
        volumes.append(token_volume())
    return mounts, volumes


def head_volumes(config: AppConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) of the head: only what model access needs. With S3 staging the
    head gets the model's config and tokenizer in a pod-local copy at the workers' path."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if config.model_s3_uri:
        mounts.append({"name": "model-cache", "mountPath": MODEL_CACHE})
        volumes.append({"name": "model-cache", "emptyDir": {"sizeLimit": "1Gi"}})
    if config.hf_token_secret_arn:
        mounts.append(token_mount())
        volumes.append(token_volume())
    return mounts, volumes


# On the head pod template: the hash of the Ray cluster spec the pods were created from. KubeRay
# copies rayClusterConfig into the RayCluster it creates, so the live RayCluster's head template
# says which spec is running, even when the RayService (upgradeStrategy None) says another.
CLUSTER_SPEC_ANNOTATION = "ray-pd-eks/cluster-spec-hash"


def cluster_spec_hash(config: AppConfig) -> str:
    """A hash of the rendered Ray cluster spec (``rayClusterConfig``: image, Ray version, worker
    count, resources, init containers, service account, env...), everything but
    ``serveConfigV2``. It changes exactly when the running Ray cluster must be recreated, and
    never for a Serve-only change (``maxModelLen``, ``dtype``, ...), which KubeRay applies in
    place. Rendered with the region left symbolic, so it is a literal at synth. A nonzero
    ``rayClusterRevision`` is part of it, to force a recreate."""
    spec = _render_rayservice(config, image=config.image_uri("-"), region="-")["spec"]
    text = json.dumps(spec["rayClusterConfig"], sort_keys=True, default=str)
    if config.ray_cluster_revision:
        # rayClusterRevision forces a recreate of an unchanged spec; 0 leaves the hash as is.
        text += f"#revision={config.ray_cluster_revision}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_rayservice(
    config: AppConfig, *, image: str, region: str = "-", aws_cli_image: str | None = None
) -> dict[str, Any]:
    """The RayService object, its head pod template annotated with :func:`cluster_spec_hash`.
    ``image``, ``aws_cli_image`` (default ``awsCliImage``) and ``region`` may hold a
    CloudFormation token (the deploy region, an image digest resolved at deploy time)."""
    rayservice = _render_rayservice(config, image=image, region=region, aws_cli_image=aws_cli_image)
    head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    metadata = head.setdefault("metadata", {})
    metadata.setdefault("annotations", {})[CLUSTER_SPEC_ANNOTATION] = cluster_spec_hash(config)
    return rayservice


# Seconds a GPU worker without a replica waits before KubeRay's autoscaler deletes its pod.
AUTOSCALER_IDLE_TIMEOUT_SECONDS = 60
# The Cluster Autoscaler leaves a node alone while a pod with this annotation runs on it
# (cluster-autoscaler FAQ, "What types of pods can prevent CA from removing a node?").
SAFE_TO_EVICT = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def head_service_account_name(config: AppConfig) -> str:
    """The head pod's service account: the workers' one, unless decode scales. Then KubeRay
    1.7 binds its autoscaler Role (patch pods, patch RayClusters; ``common/rbac.go``) to the
    head's service account (``GetHeadGroupServiceAccountName``), so the head gets its own,
    created by the stack (KubeRay does not create an account the template names)."""
    if config.decode_autoscales:
        return f"{config.ray_service_name}-ray-head"
    return service_account_name(config)


def autoscaler_options() -> dict[str, Any]:
    """``rayClusterConfig.autoscalerOptions`` (assets/manifests/ray-autoscaler-options.yaml)."""
    return dict(
        render(
            "manifests/ray-autoscaler-options.yaml",
            {"IDLE_TIMEOUT_SECONDS": AUTOSCALER_IDLE_TIMEOUT_SECONDS},
        )
    )


def _render_rayservice(
    config: AppConfig, *, image: str, region: str, aws_cli_image: str | None = None
) -> dict[str, Any]:
    rayservice = _render_rayservice_template(
        config, image=image, region=region, aws_cli_image=aws_cli_image
    )
    cluster = rayservice["spec"]["rayClusterConfig"]
    # Added only when scaling, so a fixed deployment's Ray cluster spec (and its hash) is
    # exactly what it was before these settings existed.
    if config.decode_autoscales:
        cluster["autoscalerOptions"] = autoscaler_options()
    if config.decode_autoscales or config.gpu_nodes_autoscale:
        (workers,) = cluster["workerGroupSpecs"]
        metadata = workers["template"]["metadata"]
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **SAFE_TO_EVICT}
    return rayservice


def _render_rayservice_template(
    config: AppConfig, *, image: str, region: str, aws_cli_image: str | None
) -> dict[str, Any]:
    system = config.system_spec
    worker_mounts, worker_vols = worker_volumes(config)
    head_mounts, head_vols = head_volumes(config)
    serve_config = yaml.safe_dump(render_serve_config(config), sort_keys=False)
    return dict(
        render(
            "manifests/rayservice.yaml",
            {
                "NAME": config.ray_service_name,
                "NAMESPACE": config.namespace,
                "SERVE_CONFIG": serve_config,
                "RAY_VERSION": config.ray_version,
                "RAY_AUTH_SECRET": config.ray_auth_secret_name,
                "HEAD_START_PARAMS": {
                    "num-gpus": "0",
                    "dashboard-host": "0.0.0.0",
                    **RAY_PORTS.head_start_params(),
                    **RAY_PORTS.node_start_params(),
                },
                "WORKER_START_PARAMS": RAY_PORTS.node_start_params(),
                "IMAGE": image,
                "SERVICE_ACCOUNT": service_account_name(config),
                # KubeRay adds wait-gcs-ready to the workers (it needs no AWS either).
                # KubeRay's autoscaler sidecar (container "autoscaler") needs no AWS either.
                "HEAD_ANNOTATIONS": credential_annotations(
                    config,
                    ["ray-head", "autoscaler"] if config.decode_autoscales else ["ray-head"],
                ),
                "HEAD_AUTOMOUNT_TOKEN": config.decode_autoscales,
                "WORKER_ANNOTATIONS": credential_annotations(
                    config, ["ray-worker", "wait-gcs-ready"]
                ),
                "HEAD_INIT_CONTAINERS": fetch_init_containers(
                    config, region=region, config_only=True, aws_cli_image=aws_cli_image
                ),
                "HEAD_ENV": [*model_env(config), *metrics_env()],
                "HEAD_VOLUME_MOUNTS": head_mounts,
                "HEAD_VOLUMES": head_vols,
                "HEAD_CPU": str(system.vcpus // 2),
                "HEAD_MEMORY": _gib(system.memory_gib / 2),
                "WORKER_REPLICAS": config.worker_replicas,
                "WORKER_MIN_REPLICAS": config.worker_min_replicas,
                "WORKER_MAX_REPLICAS": config.worker_max_replicas,
                "IN_TREE_AUTOSCALING": config.decode_autoscales,
                "HEAD_SERVICE_ACCOUNT": head_service_account_name(config),
                "WORKER_RESOURCES": worker_resources(config),
                "WORKER_PRIVILEGED": config.uses_efa_transport,
                "WORKER_ENV": worker_env(config),
                "WORKER_INIT_CONTAINERS": fetch_init_containers(
                    config, region=region, aws_cli_image=aws_cli_image
                ),
                "WORKER_VOLUME_MOUNTS": worker_mounts,
                "WORKER_VOLUMES": worker_vols,
            },
        )
    )


def kuberay_values(config: AppConfig) -> dict[str, Any]:
    return kuberay_operator(config.kuberay_version).values()


class PdWorkload(Construct):
    """Namespace, then the KubeRay operator (CRDs included), the namespace's NetworkPolicies
    and the Ray token Secret (filled with a fresh token), then the RayService, in that order
    (and torn down in the reverse order).
    Objects are created in this construct's stack.

    ``image`` is the worker/head image URI and ``aws_cli_image`` (default ``awsCliImage``) the
    init containers' image, either possibly a CloudFormation token (a digest resolved at
    deploy time, the deploy region). ``provider_scope`` (default: here) takes the recreate's
    functions and Provider, so an earlier stack can create them beside the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        image: str,
        region: str,
        aws_cli_image: str | None = None,
        provider_scope: Construct | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.namespace = eks.KubernetesManifest(
            self, "Namespace", cluster=as_icluster(cluster), manifest=[render_namespace(config)]
        )
        self.operator = HelmAddon(
            self,
            "KubeRayOperator",
            cluster=cluster,
            release=kuberay_operator(config.kuberay_version),
        )
        self.operator.node.add_dependency(self.namespace)
        self.network_policies = eks.KubernetesManifest(
            self,
            "NetworkPolicies",
            cluster=as_icluster(cluster),
            manifest=render_ray_network_policies(config),
        )
        self.network_policies.node.add_dependency(self.namespace)
        self.ray_token = RayAuthToken(
            self,
            "RayAuthToken",
            cluster=cluster,
            namespace=config.namespace,
            secret_name=config.ray_auth_secret_name,
            log_retention=log_retention(config),
            log_removal_policy=log_removal_policy(config),
        )
        self.ray_token.secret.node.add_dependency(self.namespace)
        self.ray_token.rbac.node.add_dependency(self.namespace)
        self.service_account: ModelFetchServiceAccount | None = None
        if config.needs_model_access:
            self.service_account = ModelFetchServiceAccount(
                self, "ModelFetch", cluster=cluster, config=config, namespace=config.namespace
            )
            self.service_account.node.add_dependency(self.namespace)
        self.head_service_account: eks.KubernetesManifest | None = None
        if config.decode_autoscales:
            self.head_service_account = self._head_service_account(cluster, config)
        self.rayservice_manifest = render_rayservice(
            config, image=image, region=region, aws_cli_image=aws_cli_image
        )
        self.rayservice = eks.KubernetesManifest(
            self,
            "RayService",
            cluster=as_icluster(cluster),
            manifest=[self.rayservice_manifest],
            # The ray.io CRD arrives with the operator in the same deploy; client-side
            # validation would run before it exists.
            skip_validation=True,
        )
        # The Ray pods read the token when they start: it exists before the RayService does.
        self.rayservice.node.add_dependency(
            self.operator, self.network_policies, self.ray_token.resource
        )
        # Before the manifest: when the Ray cluster spec changed, the old RayService and its
        # pods go first, so the manifest's `kubectl apply` creates it from the new spec
        # (docs/lifecycle.md, "What a config change does").
        self.recreate = RayServiceRecreate(
            self,
            "Recreate",
            cluster=cluster,
            namespace=config.namespace,
            ray_service_name=config.ray_service_name,
            cluster_spec_hash=cluster_spec_hash(config),
            log_retention=log_retention(config),
            log_removal_policy=log_removal_policy(config),
            provider_scope=provider_scope,
        )
        self.recreate.rbac.node.add_dependency(self.namespace)
        self.recreate.resource.node.add_dependency(self.operator)
        self.rayservice.node.add_dependency(self.recreate)
        if self.service_account:
            # Pod Identity injects credentials when a pod is created: association first.
            self.rayservice.node.add_dependency(self.service_account)
        if self.head_service_account:
            self.rayservice.node.add_dependency(self.head_service_account)

    def _head_service_account(
        self, cluster: eks.Cluster, config: AppConfig
    ) -> eks.KubernetesManifest:
        """The head's own service account when decode scales (:func:`head_service_account_name`),
        with the model-fetch role through its own Pod Identity association when the head reads
        the staged model or the token."""
        name = head_service_account_name(config)
        account = eks.KubernetesManifest(
            self,
            "HeadServiceAccount",
            cluster=as_icluster(cluster),
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {
                        "name": name,
                        "namespace": config.namespace,
                        "labels": {"app.kubernetes.io/part-of": "ray-pd-eks"},
                    },
                }
            ],
        )
        account.node.add_dependency(self.namespace)
        if self.service_account:
            association = eks.CfnPodIdentityAssociation(
                self,
                "HeadPodIdentity",
                cluster_name=cluster.cluster_name,
                namespace=config.namespace,
                service_account=name,
                role_arn=self.service_account.service_account.role.role_arn,
            )
            account.node.add_dependency(association)
        return account
