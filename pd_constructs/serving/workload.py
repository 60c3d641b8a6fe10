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

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.helm import HelmAddon, kuberay_operator
from pd_constructs.common.templates import render
from pd_constructs.lifecycle.recreate import RayServiceRecreate
from pd_constructs.network.network_policy import (
    RAY_PORTS,
    render_ray_network_policies,
    serve_switches_env,
)
from pd_constructs.serving.admission import render_ray_pod_policy, render_raycluster_policy
from pd_constructs.serving.model_access import (
    MODEL_CACHE,
    VLLM_CACHE_ROOT,
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
from pd_constructs.serving.namespace import pod_namespace
from pd_constructs.serving.ray_auth import RayAuthToken
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_policy


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


def kuberay_operator_overrides(config: AppConfig) -> dict[str, Any]:
    """The operator's Helm values that depend on settings: it watches, and has rights in, the
    Ray namespace only (``singleNamespaceInstall`` in assets/helm-values/kuberay-operator.yaml;
    ``watchNamespace`` is read by the chart's templates, though its values.yaml has it only as
    a comment)."""
    return {"watchNamespace": [config.namespace]}


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


# requestRouter=prefix-aware: Ray Serve LLM's PrefixCacheAffinityRouter, as Serve's
# RequestRouterConfig names it (ray/serve/config.py, Ray 2.58: "module.Class" or
# "module:Class"). Its initialize_state keywords (routing_policies/prefix_aware/
# prefix_aware_router.py) with our values; docs/benchmarking.md says why each.
PREFIX_ROUTER_CLASS = "ray.serve.llm.request_router:PrefixCacheAffinityRouter"
PREFIX_ROUTER_MATCH_RATE_THRESHOLD = 0.1  # Ray's default
PREFIX_ROUTER_EVICTION_THRESHOLD_CHARS = 400_000  # Ray's default, used with eviction on
PREFIX_ROUTER_EVICTION_TARGET_CHARS = 360_000  # Ray's default
PREFIX_ROUTER_EVICTION_INTERVAL_SECS = 10  # Ray's default


def request_router_config(config: AppConfig) -> dict[str, Any]:
    """Serve's ``request_router_config`` for ``requestRouter=prefix-aware``. Ray's defaults
    but two: ``imbalanced_threshold`` (Ray: infinity, so a popular prefix would take every
    request to one replica however long its queue) is one autoscaling target's worth of
    requests, ``decodeTargetOngoingRequests``; ``do_eviction`` (Ray: off, so the prefix tree
    grows with every prompt ever routed) is on."""
    return {
        "request_router_class": PREFIX_ROUTER_CLASS,
        "request_router_kwargs": {
            "imbalanced_threshold": config.decode_target_ongoing_requests,
            "match_rate_threshold": PREFIX_ROUTER_MATCH_RATE_THRESHOLD,
            "do_eviction": True,
            "eviction_threshold_chars": PREFIX_ROUTER_EVICTION_THRESHOLD_CHARS,
            "eviction_target_chars": PREFIX_ROUTER_EVICTION_TARGET_CHARS,
            "eviction_interval_secs": PREFIX_ROUTER_EVICTION_INTERVAL_SECS,
        },
    }


def _routed(config: AppConfig, deployment: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the request router of ``deployment`` when it is one of
    :attr:`AppConfig.routed_deployments`."""
    if deployment in config.routed_deployments:
        return {**options, "request_router_config": request_router_config(config)}
    return options


def _streaming(config: AppConfig, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of a deployment that streams answers (decode, the aggregated engines, the
    ingress), with the graceful shutdown that lets a stopping replica finish the longest one.
    Serve's default is 20 s (``DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S``, Ray 2.58
    serve/_private/constants.py)."""
    return {**options, "graceful_shutdown_timeout_s": config.graceful_shutdown_s}


def prefill_deployment_config(config: AppConfig) -> dict[str, Any]:
    """The prefill deployment's Serve options: fixed replicas (docs/scaling.md), the request
    router when it has several. Serve's default graceful shutdown: a prefill request ends
    with its first token."""
    return _routed(config, "prefill", {"num_replicas": config.prefill_replicas})


def decode_deployment_config(config: AppConfig) -> dict[str, Any]:
    """The decode deployment's Serve options: a fixed ``num_replicas``, or, when decode scales,
    an explicit ``autoscaling_config`` (Ray Serve 2.58's ``AutoscalingConfig`` fields; Serve
    refuses ``num_replicas`` beside it). Explicit because Ray Serve LLM's own defaults for an
    LLM deployment set the target so high that nothing triggers a scale-up. Plus the graceful
    shutdown of a deployment that streams, and the request router when it has several
    replicas."""
    options: dict[str, Any]
    if not config.decode_autoscales:
        options = {"num_replicas": config.decode_replicas}
    else:
        options = {
            "autoscaling_config": {
                "min_replicas": config.decode_min,
                "initial_replicas": config.decode_replicas,
                "max_replicas": config.decode_max,
                "target_ongoing_requests": config.decode_target_ongoing_requests,
                "upscale_delay_s": config.decode_upscale_delay_seconds,
                "downscale_delay_s": config.decode_downscale_delay_seconds,
            }
        }
    return _routed(config, "decode", _streaming(config, options))


def engine_deployment_config(config: AppConfig) -> dict[str, Any]:
    """The aggregated app's engines: one per GPU worker, each streaming its own answers."""
    options = _streaming(config, {"num_replicas": config.worker_replicas})
    return _routed(config, "engines", options)


def ingress_deployment_config(config: AppConfig) -> dict[str, Any]:
    """The OpenAI ingress (``ingress_deployment_config`` of both builders): it relays every
    streamed answer, so it drains as long as the engines do."""
    return _streaming(config, {})


def engine_kwargs_extra(config: AppConfig) -> dict[str, Any]:
    """vLLM engine arguments set only when chosen, so the default engines are unchanged:
    ``quantization: fp8`` (FP8 weights, quantized at load) and ``kv_cache_dtype: fp8``. Both
    engines of the PD app get the same: NIXL moves raw KV blocks, and vLLM 0.26's NixlConnector
    refuses a peer whose model dtype, KV cache dtype or attention backend differs
    (nixl/metadata.py ``compute_nixl_compatibility_hash``, checked at the handshake)."""
    extra: dict[str, Any] = {}
    if config.quantization != "none":
        extra["quantization"] = config.quantization
    if config.kv_cache_dtype != "auto":
        extra["kv_cache_dtype"] = config.kv_cache_dtype
    return extra


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
        "INGRESS_DEPLOYMENT_CONFIG": ingress_deployment_config(config),
    }
    if not config.is_pd:
        app = render(
            "manifests/serve-config-aggregated.yaml",
            {**common, "ENGINE_DEPLOYMENT_CONFIG": engine_deployment_config(config)},
        )
    else:
        app = render(
            "manifests/serve-config.yaml",
            {
                **common,
                "KV_BACKENDS": [config.kv_backend],
                "PREFILL_DEPLOYMENT_CONFIG": prefill_deployment_config(config),
                "DECODE_DEPLOYMENT_CONFIG": decode_deployment_config(config),
            },
        )
    for engine in llm_configs(app):  # the optional vLLM arguments, after the template's own
        kwargs = engine["engine_kwargs"]
        kv_transfer = kwargs.pop("kv_transfer_config", None)
        kwargs.update(engine_kwargs_extra(config))
        kwargs.update(revision_kwargs(config))
        if kv_transfer is not None:
            kwargs["kv_transfer_config"] = kv_transfer
    return dict(app)


def llm_configs(serve: dict[str, Any]) -> list[dict[str, Any]]:
    """Every engine's ``LLMConfig`` in a rendered Serve config: prefill and decode, or the
    aggregated app's ``llm_configs``."""
    args = serve["applications"][0]["args"]
    if "llm_configs" in args:
        return list(args["llm_configs"])
    return [args["prefill_config"], args["decode_config"]]


def revision_kwargs(config: AppConfig) -> dict[str, str]:
    """vLLM engine arguments that pin the Hugging Face revision (``modelRevision``) of the
    weights and config (``revision``) and of the tokenizer (``tokenizer_revision``; vLLM 0.26
    ``EngineArgs``), the revision the prefetch downloads. None with ``modelS3Uri``: the engines
    then load the staged copy from a local directory, which has no revisions."""
    if config.model_s3_uri:
        return {}
    return {"revision": config.model_revision, "tokenizer_revision": config.model_revision}


# Ray's metric cardinality (ray/_private/telemetry/metric_cardinality.py, Ray 2.58): "legacy"
# keeps every label; "recommended" (the default) drops WorkerId from the per-worker task and
# actor gauges (ray_tasks, ray_actors); "low" also drops their task/actor Name label. No
# dashboard query or alarm uses those, and every series scraped is billed as OTLP ingest.
RAY_METRIC_CARDINALITY = "low"


def metrics_env() -> list[dict[str, Any]]:
    """Environment of head and workers that bounds the number of metric series."""
    return [{"name": "RAY_metric_cardinality_level", "value": RAY_METRIC_CARDINALITY}]


# Serve's text log lines carry the process's local time (Ray 2.58
# ray/serve/_private/logging_utils.py ServeFormatter: "%(levelname)s %(asctime)s ...";
# logging.Formatter.formatTime uses time.localtime, which follows TZ). ``ray-pd-eks coldstart``
# reads the engine's start and the replica's first RUNNING from those lines
# (ray_pd_eks/cli/coldstart.py), so the clock is UTC whatever the image's /etc/localtime says.
LOG_CLOCK_ENV = ({"name": "TZ", "value": "UTC"},)


def log_clock_env() -> list[dict[str, Any]]:
    """Environment of head and workers that makes Serve's log timestamps UTC."""
    return [dict(item) for item in LOG_CLOCK_ENV]


# The buckets of Serve's replica start and shutdown histograms (Ray 2.58
# ray/serve/_private/constants.py: RAY_SERVE_REPLICA_STARTUP_SHUTDOWN_LATENCY_BUCKETS_MS, read
# by the controller, which runs on the head; ascending positive milliseconds). Serve's default
# ends at 240000 (4 minutes): every scale-out onto a new GPU node (7 modelled minutes,
# docs/cold-start.md) would fall in its overflow bucket, so the dashboard's "replica start"
# panel could not tell 5 minutes from 15. These keep Serve's buckets up to a minute, then one a
# minute to 10 and wider ones to 30.
REPLICA_START_BUCKETS_MS = (
    *(5, 20, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000),
    *(120000, 180000, 240000, 300000, 360000, 420000, 480000, 540000, 600000),
    *(900000, 1200000, 1800000),
)


def serve_metrics_env() -> list[dict[str, Any]]:
    """Environment of the head (where Serve's controller records replica starts)."""
    buckets = ",".join(str(b) for b in REPLICA_START_BUCKETS_MS)
    return [{"name": "RAY_SERVE_REPLICA_STARTUP_SHUTDOWN_LATENCY_BUCKETS_MS", "value": buckets}]


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
        *log_clock_env(),
        *serve_switches_env(),
        # vLLM's own caches (torch.compile and CUDA-graph artefacts when enforceEager is off)
        # on the node cache too, so a restarted worker skips the recompilation.
        {"name": "VLLM_CACHE_ROOT", "value": VLLM_CACHE_ROOT},
    ]
    if not config.is_pd:
        return env
    # A fixed NIXL handshake port from the ports table, so the NetworkPolicy between the
    # workers names it. Left unset, Ray Serve LLM 2.58 would set 20000 + the replica's rank x
    # its GPUs (kv_transfer/nixl.py NixlConnectorBackend._set_side_channel_port, base.py
    # _compute_port_offset), a port the table does not hold; with it set Ray keeps it (one
    # engine per pod here), and vLLM 0.26 listens on it plus the data-parallel index
    # (nixl/base_scheduler.py), 0 without data parallelism.
    env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(RAY_PORTS.nixl_side_channel)})
    if config.uses_efa_transport:
        # libfabric offers NIXL only its EFA provider: without an EFA device the LIBFABRIC
        # backend cannot start, which makes "Backend LIBFABRIC was instantiated" proof of EFA
        # (assets/lambda/readiness/kvproof.py).
        env.append({"name": "FI_PROVIDER", "value": "efa"})
        # NIXL's C++ default level is WARN (nixl_log.cpp): INFO adds the plugin's start-up
        # lines, "Discovered <n> EFA devices" among them, for an operator reading the log.
        env.append({"name": "NIXL_LOG_LEVEL", "value": "INFO"})
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


def worker_security_context(config: AppConfig) -> dict[str, Any]:
    """The GPU worker container's securityContext (docs/security.md, "GPU workers without
    privileged"). With EFA and ``gpuWorkerPrivileged`` on (the default):
    ``privileged`` (every device, every capability, no seccomp), the walkthrough's setting and
    that of every public EFA + NIXL deployment (libfabric's ``fi_mr_reg`` pins GPU memory for
    RDMA; IPC_LOCK alone was not enough in the walkthrough). Off (an explicit opt-in, not yet
    proven on EFA hardware): no capability but ``IPC_LOCK`` when the KV cache moves over EFA,
    so libfabric's EFA provider may pin the memory it
    registers beyond the container's locked-memory limit (the kernel's ``ib_umem_get`` lets a
    process with ``CAP_IPC_LOCK`` exceed ``RLIMIT_MEMLOCK``); the GPU and EFA device files come
    from their device plugins, which mount exactly the allocated ones. KubeRay copies this
    context onto its ``wait-gcs-ready`` init container."""
    if config.workers_privileged:
        return {"privileged": True}
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if config.uses_efa_transport:
        capabilities["add"] = ["IPC_LOCK"]
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


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
    """(volumeMounts of ``ray-head``, volumes) of the head: only what model access needs. With
    S3 staging the head gets the model's config and tokenizer in a pod-local copy at the
    workers' path. When decode scales the pod also carries the autoscaler's API token volume
    (:func:`autoscaler_token_volume`), which ``ray-head`` does not mount."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if config.decode_autoscales:
        volumes.append(autoscaler_token_volume())
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


# The head pod's projected volume with the API token of its account, mounted only into
# KubeRay's autoscaler sidecar, at the path in-cluster Kubernetes clients read.
AUTOSCALER_TOKEN_VOLUME = "autoscaler-api-token"
SERVICE_ACCOUNT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def autoscaler_token_volume() -> dict[str, Any]:
    """The projected token volume (assets/manifests/autoscaler-api-token.yaml)."""
    return dict(render("manifests/autoscaler-api-token.yaml", {"NAME": AUTOSCALER_TOKEN_VOLUME}))


def autoscaler_options() -> dict[str, Any]:
    """``rayClusterConfig.autoscalerOptions`` (assets/manifests/ray-autoscaler-options.yaml):
    bounds, resources, the sidecar's security context and its mount of the API token."""
    return dict(
        render(
            "manifests/ray-autoscaler-options.yaml",
            {
                "IDLE_TIMEOUT_SECONDS": AUTOSCALER_IDLE_TIMEOUT_SECONDS,
                "TOKEN_VOLUME": AUTOSCALER_TOKEN_VOLUME,
                "TOKEN_PATH": SERVICE_ACCOUNT_TOKEN_PATH,
            },
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
                "WORKER_ANNOTATIONS": credential_annotations(
                    config, ["ray-worker", "wait-gcs-ready"]
                ),
                "HEAD_INIT_CONTAINERS": fetch_init_containers(
                    config, region=region, config_only=True, aws_cli_image=aws_cli_image
                ),
                "HEAD_ENV": [
                    *model_env(config),
                    *metrics_env(),
                    *serve_metrics_env(),
                    *log_clock_env(),
                    *serve_switches_env(),
                ],
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
                "WORKER_SECURITY_CONTEXT": worker_security_context(config),
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
        # What the namespace's pods may ask of their nodes, and who may change the Ray
        # cluster's shape (pd_constructs/serving/admission.py): in force before any Ray pod exists.
        self.admission_manifest = [
            *render_ray_pod_policy(config),
            *render_raycluster_policy(config),
        ]
        self.namespace, self.network_policies, self.admission, self.service_account = pod_namespace(
            self,
            cluster=cluster,
            config=config,
            name=config.namespace,
            namespace=render_namespace(config),
            network_policies=render_ray_network_policies(config),
            admission=self.admission_manifest,
        )
        self.operator = HelmAddon(
            self,
            "KubeRayOperator",
            cluster=cluster,
            release=kuberay_operator(config.kuberay_version),
            overrides=kuberay_operator_overrides(config),
        )
        self.operator.node.add_dependency(self.namespace)
        self.ray_token = RayAuthToken(
            self,
            "RayAuthToken",
            cluster=cluster,
            namespace=config.namespace,
            secret_name=config.ray_auth_secret_name,
            log_policy=log_policy(config),
        )
        self.ray_token.secret.node.add_dependency(self.namespace)
        self.ray_token.rbac.node.add_dependency(self.namespace)
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
            self.operator, self.network_policies, self.admission, self.ray_token.resource
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
            log_policy=log_policy(config),
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
