"""The app's one typed configuration, :class:`AppConfig`: every setting of one deployment, the
values derived from them, and how it is built from CDK context.

Every setting comes from CDK context (defaults in ``cdk.json``, overrides with ``-c key=value``)
and is read here, and only here, into a frozen :class:`AppConfig`. Validation happens in
:meth:`AppConfig.from_context`, before any construct exists, so a bad value fails ``cdk synth``
with one line that names the context key, shows the value and says what is allowed (the rules:
:mod:`ray_pd_eks.config.validation`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_pd_eks import instance_types
from ray_pd_eks.config.limits import (
    AWS_CLI_IMAGE,
    CAPACITY_WATCH_EXTRA_MINUTES,
    CLOUDWATCH_ADDON_VERSION,
    DLC_ACCOUNT,
    DLC_REPOSITORY_TAG,
    GPU_MEMORY_UTILIZATION,
    KUBECTL_LAYER_PACKAGES,
    MAX_GRACEFUL_SHUTDOWN_SECONDS,
    MODEL_REVISION,
    MODEL_SOURCE,
    NVME_MOUNT,
    OTHER_CONTEXT_KEYS,
    PREFETCH_IMAGE,
    S3_URI_RE,
    STAGE_ID,
    VPC_CNI_ADDON_VERSION,
    derive_model_id,
)
from ray_pd_eks.config.parsing import PARSERS, camel
from ray_pd_eks.config.problems import ConfigError, check, problem
from ray_pd_eks.config.validation import RULES
from ray_pd_eks.dlc_images import dlc_registry

_SECRET_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")


@dataclass(frozen=True)
class AppConfig:
    """Every setting of one deployment. Field ``foo_bar`` is context key ``fooBar``.

    Defaults reproduce the walkthrough's ``env.sh``. Empty ``account``/``region`` keep the
    stacks environment-agnostic: the CLI's credentials decide at deploy time.
    """

    # Where to deploy. Empty = the account/region of the credentials used by `cdk deploy`.
    account: str = ""
    # Several deployments in one account and region: a name that prefixes the stage, its
    # stacks and the cluster (``alice`` -> alice-RayPdEks-Network, alice-ray-llm-multinode).
    # Empty = today's names.
    deployment_name: str = ""
    region: str = ""
    # Cluster.
    cluster_name: str = "ray-llm-multinode"
    kubernetes_version: str = "1.36"
    namespace: str = "inference"
    admin_principal_arns: tuple[str, ...] = ()
    # An empty adminPrincipalArns refuses the deploy (nobody could reach the cluster) unless
    # this says it is meant (e.g. admins added by hand as access entries later).
    allow_no_admins: bool = False
    endpoint_public_cidrs: tuple[str, ...] = ()  # the Kubernetes API's; empty = private only
    vpc_cidr: str = "10.0.0.0/16"
    # Nodes.
    system_node_type: str = "m7i.xlarge"
    system_node_count: int = 1
    system_root_volume_gib: int = 100
    # The Ray head's ~20 GB image is written here: above gp3's 125 MiB/s baseline it arrives in
    # half the time (docs/deploy-timeline.md), for ~$15/month of provisioned throughput.
    system_root_volume_iops: int = 3000
    system_root_volume_throughput: int = 500  # MiB/s
    gpu_node_type: str = "g6.8xlarge"
    gpu_node_count: int = 2
    gpu_nodegroup_name: str = "gpu-workers"
    gpu_az: str = ""  # empty = chosen at deploy time among the AZs that offer gpu_node_type
    # Node-local storage: auto = RAID0 of the instance-store NVMe when the type has it.
    gpu_local_storage: str = "auto"
    gpu_root_volume_gib: int = 0  # 0 = 50 GiB with NVMe local storage, 200 GiB without
    gpu_root_volume_iops: int = 16000  # used when the root volume holds images and caches
    gpu_root_volume_throughput: int = 1000  # MiB/s, likewise
    # Capacity.
    gpu_capacity_reservation_id: str = ""  # an On-Demand Capacity Reservation (cr-...)
    gpu_placement_group_name: str = ""  # empty = a cluster placement group of the stack's own
    gpu_capacity_wait_minutes: int = 10
    # Software.
    dlc_image: str = ""  # empty = the Ray LLM DLC in account 763104351884 of the deploy region
    aws_cli_image: str = AWS_CLI_IMAGE  # fetches staged weights and the token (when configured)
    prefetch_image: str = PREFETCH_IMAGE  # downloads the weights from Hugging Face on each node
    kuberay_version: str = "1.7.0"
    ray_version: str = "2.58.0"
    # The managed vpc-cni add-on (network-policy enforcement); `aws eks describe-addon-versions`.
    vpc_cni_addon_version: str = VPC_CNI_ADDON_VERSION
    # Serving.
    ray_service_name: str = "ray-llm"
    model_id: str = ""  # empty = derived from model_source (see derive_model_id)
    model_source: str = MODEL_SOURCE
    # The Hugging Face revision (commit, tag or branch) the prefetch downloads and the engines
    # load: a commit, so a push to the repository cannot change what serves (docs/security.md).
    model_revision: str = MODEL_REVISION
    model_s3_uri: str = ""  # s3://bucket/prefix holding the model: staged to the node's NVMe
    # The account that must own modelS3Uri's bucket; empty = the deploy account.
    model_s3_bucket_owner: str = ""
    hf_token_secret_arn: str = ""  # Secrets Manager secret with a Hugging Face token
    max_model_len: int = 4096
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    enforce_eager: bool = True
    # FP8 on GPUs with FP8 tensor cores (L4, L40S, H100, H200): weights quantized at load
    # (1 byte per parameter), and the KV cache stored in FP8; both engines alike.
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    request_router: str = "power-of-two"  # or prefix-aware, for deployments of 2+ replicas
    # Seconds a stopping decode/ingress replica may take to finish its answers (Serve's
    # graceful_shutdown_timeout_s); 0 = the longest answer the configuration allows.
    graceful_shutdown_seconds: int = 0
    kv_backend: str = "LIBFABRIC"
    # true (default) = with EFA (servingMode pd, kvBackend LIBFABRIC) the GPU workers run
    # privileged, what every known EFA + NIXL deployment runs (fi_mr_reg pins GPU memory);
    # false = opt in to the unprivileged variant: only the devices their GPUs and EFA
    # interfaces bring, plus IPC_LOCK (docs/security.md). Without EFA never privileged.
    gpu_worker_privileged: bool = True
    serving_mode: str = "pd"  # "aggregated": build_openai_app, one engine per GPU node
    prefill_replicas: int = 1
    decode_replicas: int = 1
    # GPUs of one engine replica (vLLM tensor parallelism), all on one node.
    tensor_parallel_size: int = 1
    # Decode autoscaling (docs/scaling.md): decodeReplicas is where decode starts; it follows
    # the load between these bounds (0 = decodeReplicas, i.e. fixed) when they differ.
    decode_min_replicas: int = 0
    decode_max_replicas: int = 0
    decode_target_ongoing_requests: int = 16  # per decode replica, Serve's scaling target
    decode_upscale_delay_seconds: int = 30
    decode_downscale_delay_seconds: int = 600
    # GPU node group bounds (0 = gpuNodeCount, i.e. fixed); the Cluster Autoscaler is
    # installed when they differ. gpuNodeCount is the size the group is created with.
    gpu_node_min_count: int = 0
    gpu_node_max_count: int = 0
    # Idle GPU nodes kept ready for decode scale-out (placeholder pods that a new worker
    # preempts; docs/scaling.md, "Warm spare GPU nodes"); 0 = none. Needs both ranges above.
    gpu_warm_spare_nodes: int = 0
    # Billions of parameters, for the model/GPU fit check; 0 = read from modelSource's name.
    model_params_billions: float = 0.0
    readiness_timeout_minutes: int = 55
    # Part of the Ray cluster spec hash: raising it makes the next deploy recreate the
    # RayService with an unchanged spec (docs/lifecycle.md).
    ray_cluster_revision: int = 0
    # Minutes between scheduled KV probes (integrity probe + NIXL counters); 0 = off.
    kv_probe_interval_minutes: int = 15
    # The application endpoint: an HTTPS load balancer in front of the serve service.
    endpoint_exposure: str = "none"  # none | internal | internet-facing
    endpoint_allowed_cidrs: tuple[str, ...] = ()  # who may reach the load balancer on 443
    endpoint_certificate_arn: str = ""  # ACM certificate in the deploy region
    endpoint_domain_name: str = ""  # the name clients use (covered by the certificate)
    endpoint_auth: str = "jwt"  # jwt | none (none only for an internal load balancer)
    endpoint_jwt_issuer: str = ""  # empty = a Cognito user pool of the stack's own
    endpoint_jwks_uri: str = ""
    endpoint_jwt_audience: str = ""  # required value of the token's aud claim
    endpoint_jwt_audience_format: str = "single-string"  # or string-array: how aud is carried
    endpoint_jwt_scope: str = ""  # scope the token must carry
    endpoint_idle_timeout_seconds: int = 600
    # Requests per client IP per 5 minutes before AWS WAF blocks it (internet-facing only);
    # 0 = no web ACL.
    endpoint_rate_limit_per5_min: int = 1000
    # Teardown.
    retain_logs: bool = False
    log_retention_days: int = 30
    # Observability (docs/observability.md).
    observability: str = "cloudwatch"  # or none: no add-on, monitors, dashboard or alarms
    # The CloudWatch agent and Fluent Bit (whose shared token may `get nodes/proxy`, i.e. exec
    # into any container) on the GPU nodes too: GPU/EFA metrics and the workers' logs in
    # CloudWatch, at the price of that token within reach of root on a GPU node.
    gpu_node_telemetry: bool = False
    cloudwatch_addon_version: str = CLOUDWATCH_ADDON_VERSION
    alarm_email: str = ""  # empty = the alarm topic has no subscription
    alarm_ttft_p95_seconds: float = 2.0
    alarm_inter_token_p95_seconds: float = 0.2
    alarm_error_percent: float = 5.0
    alarm_kv_cache_percent: float = 90.0

    def __post_init__(self) -> None:
        # An empty model id means "the source's": resolved here, once, so every consumer
        # (serveConfigV2, the readiness check, the CLI) sees the id clients must use.
        if not self.model_id:
            object.__setattr__(self, "model_id", derive_model_id(self.model_source))
        # The cluster's name in the account carries the deployment's, so every consumer (the
        # stacks, the log groups and alarms named after it, the CLI) uses the prefixed name.
        if self.deployment_name:
            prefixed = f"{self.deployment_name}-{self.cluster_name}"
            object.__setattr__(self, "cluster_name", prefixed)

    @property
    def stage_id(self) -> str:
        """The Stage's id, and so its stacks' name prefix and the `cdk` pattern's first part:
        ``RayPdEks``, or ``<deploymentName>-RayPdEks``."""
        return f"{self.deployment_name}-{STAGE_ID}" if self.deployment_name else STAGE_ID

    @property
    def cluster_name_setting(self) -> str:
        """``clusterName`` as set, without the deployment's prefix."""
        if self.deployment_name:
            return self.cluster_name.removeprefix(f"{self.deployment_name}-")
        return self.cluster_name

    # Derived values -----------------------------------------------------------------------

    @property
    def application_name(self) -> str:
        """Serve application name: the model id's leading letters (``qwen3.5-9b`` -> ``qwen``)."""
        m = re.match(r"[a-z]+", self.model_id.lower())
        return m.group(0) if m else "llm"

    @property
    def worker_replicas(self) -> int:
        """GPU worker pods: one per prefill or decode replica, one pod per GPU node."""
        return self.prefill_replicas + self.decode_replicas

    @property
    def decode_min(self) -> int:
        """Fewest decode replicas (``decodeMinReplicas``, or ``decodeReplicas``)."""
        return self.decode_min_replicas or self.decode_replicas

    @property
    def decode_max(self) -> int:
        """Most decode replicas (``decodeMaxReplicas``, or ``decodeReplicas``)."""
        return self.decode_max_replicas or self.decode_replicas

    @property
    def decode_autoscales(self) -> bool:
        """Whether decode follows the load: Serve autoscaling plus KubeRay's autoscaler."""
        return self.decode_max > self.decode_min

    @property
    def worker_min_replicas(self) -> int:
        """Fewest GPU worker pods: the prefill replicas and the fewest decode replicas."""
        return self.prefill_replicas + self.decode_min

    @property
    def worker_max_replicas(self) -> int:
        """Most GPU worker pods: the prefill replicas and the most decode replicas."""
        return self.prefill_replicas + self.decode_max

    @property
    def gpu_node_min(self) -> int:
        """Fewest GPU nodes (``gpuNodeMinCount``, or ``gpuNodeCount``)."""
        return self.gpu_node_min_count or self.gpu_node_count

    @property
    def gpu_node_max(self) -> int:
        """Most GPU nodes (``gpuNodeMaxCount``, or ``gpuNodeCount``)."""
        return self.gpu_node_max_count or self.gpu_node_count

    @property
    def gpu_nodes_autoscale(self) -> bool:
        """Whether the GPU node group scales (the Cluster Autoscaler is installed)."""
        return self.gpu_node_max > self.gpu_node_min

    @property
    def longest_answer_seconds(self) -> int:
        """How long the longest answer takes at the alarm thresholds: the first token at
        ``alarmTtftP95Seconds``, then ``maxModelLen`` tokens at ``alarmInterTokenP95Seconds``
        (an answer cannot be longer than the context), rounded up."""
        return math.ceil(
            self.alarm_ttft_p95_seconds + self.max_model_len * self.alarm_inter_token_p95_seconds
        )

    @property
    def graceful_shutdown_s(self) -> int:
        """Serve's ``graceful_shutdown_timeout_s`` for the deployments that stream answers:
        ``gracefulShutdownSeconds``, or the longest answer, at most
        :data:`MAX_GRACEFUL_SHUTDOWN_SECONDS`."""
        if self.graceful_shutdown_seconds:
            return self.graceful_shutdown_seconds
        return min(self.longest_answer_seconds, MAX_GRACEFUL_SHUTDOWN_SECONDS)

    @property
    def routed_deployments(self) -> tuple[str, ...]:
        """The engine deployments that get ``requestRouter=prefix-aware``: those that can have
        more than one replica (``prefill``, ``decode`` when fixed above one or autoscaling;
        ``engines`` of an aggregated app). Empty with ``power-of-two``."""
        if self.request_router != "prefix-aware":
            return ()
        if not self.is_pd:
            return ("engines",) if self.worker_replicas > 1 else ()
        found = []
        if self.prefill_replicas > 1:
            found.append("prefill")
        if self.decode_max > 1:
            found.append("decode")
        return tuple(found)

    @property
    def ray_auth_secret_name(self) -> str:
        """The Secret holding the Ray cluster's token (``rayClusterConfig.authOptions
        .secretName``): created empty by the workload stack, filled in the cluster (docs/
        security.md); read by the readiness check and the CLI to call the dashboard."""
        return f"{self.ray_service_name}-ray-token"

    @property
    def is_pd(self) -> bool:
        """Whether prefill and decode are disaggregated (KV cache moves over NIXL)."""
        return self.serving_mode == "pd"

    @property
    def uses_efa_transport(self) -> bool:
        """Whether the workers move KV cache over EFA: they then request an EFA interface and
        run privileged (NIXL registers GPU memory with the NIC). Only PD over LIBFABRIC does."""
        return self.is_pd and self.kv_backend == "LIBFABRIC"

    @property
    def workers_privileged(self) -> bool:
        """Whether the GPU workers run privileged: with ``gpuWorkerPrivileged`` and EFA only
        (registering GPU memory with the EFA NIC is what needs it; nothing else does)."""
        return self.gpu_worker_privileged and self.uses_efa_transport

    @property
    def gpu_spec(self) -> instance_types.InstanceSpec:
        spec = instance_types.gpu_spec(self.gpu_node_type)
        assert spec is not None, "validated in from_context"
        return spec

    @property
    def system_spec(self) -> instance_types.InstanceSpec:
        spec = instance_types.system_spec(self.system_node_type)
        assert spec is not None, "validated in from_context"
        return spec

    @property
    def kubectl_layer_package(self) -> str:
        return KUBECTL_LAYER_PACKAGES[self.kubernetes_version]

    @property
    def gpu_capacity_watch_minutes(self) -> int:
        """How long the GPU capacity watch waits in all: the capacity wait, then the nodes'
        launch and join (at most ``WAITER_DEADLINE_MINUTES``)."""
        return self.gpu_capacity_wait_minutes + CAPACITY_WATCH_EXTRA_MINUTES

    @property
    def uses_local_nvme(self) -> bool:
        """Whether the GPU nodes put containerd, kubelet and the model cache on NVMe RAID0."""
        return self.gpu_local_storage != "none" and self.gpu_spec.nvme_gb > 0

    @property
    def gpu_root_gib(self) -> int:
        """The GPU nodes' root volume: small when NVMe holds images and caches."""
        if self.gpu_root_volume_gib:
            return self.gpu_root_volume_gib
        return 50 if self.uses_local_nvme else 200

    @property
    def node_cache_dir(self) -> str:
        """The host directory of the model cache on each GPU node (hostPath of the pods)."""
        base = NVME_MOUNT if self.uses_local_nvme else "/var/lib"
        return f"{base}/ray-pd-eks/model-cache"

    @property
    def model_s3_bucket(self) -> str:
        m = S3_URI_RE.match(self.model_s3_uri)
        return m["bucket"] if m else ""

    @property
    def model_s3_prefix(self) -> str:
        """The key prefix of the staged model, without a trailing slash."""
        m = S3_URI_RE.match(self.model_s3_uri)
        return m["prefix"].rstrip("/") if m else ""

    @property
    def staged_model_dir(self) -> str:
        """Sub-directory of the model cache the S3 copy goes to, keyed by the URI (a changed
        URI never mixes files with an old copy)."""
        digest = hashlib.sha256(self.model_s3_uri.encode()).hexdigest()[:12]
        return f"s3/{self.model_id}-{digest}"

    @property
    def needs_model_access(self) -> bool:
        """Whether pods that fetch weights need AWS credentials (Pod Identity)."""
        return bool(self.model_s3_uri or self.hf_token_secret_arn)

    @property
    def hf_token_secret_resource(self) -> str:
        """The IAM resource of the token secret: a partial ARN (no random suffix) gets the
        ``-??????`` wildcard Secrets Manager documents for it."""
        arn = self.hf_token_secret_arn
        if not arn or _SECRET_SUFFIX.search(arn):
            return arn
        return f"{arn}-??????"

    @property
    def endpoint_exposed(self) -> bool:
        """Whether the stack creates the load balancer (and the controller that feeds it)."""
        return self.endpoint_exposure != "none"

    @property
    def endpoint_uses_cognito(self) -> bool:
        """Whether the stack creates its own Cognito user pool to issue the tokens."""
        return (
            self.endpoint_exposed and self.endpoint_auth == "jwt" and not self.endpoint_jwt_issuer
        )

    @property
    def endpoint_scope(self) -> str:
        """The OAuth scope a token must carry: ``<rayServiceName>/invoke`` with the created
        Cognito pool, ``endpointJwtScope`` with an existing IdP (may be empty)."""
        if self.endpoint_uses_cognito:
            return f"{self.ray_service_name}/invoke"
        return self.endpoint_jwt_scope

    @property
    def observability_enabled(self) -> bool:
        return self.observability == "cloudwatch"

    def image_uri(self, region: str) -> str:
        """The image for head and workers: ``dlcImage``, else the Ray LLM DLC in the
        registry AWS documents for ``region`` (ray_pd_eks/dlc_images.py). ``region`` may be a
        placeholder (``${AWS_REGION}``, a CloudFormation token): the default account's form is
        used then (the workload stack maps the deploy region to its registry itself)."""
        if self.dlc_image:
            return self.dlc_image
        registry = dlc_registry(region) or f"{DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com"
        return f"{registry}/{DLC_REPOSITORY_TAG}"

    # Construction ---------------------------------------------------------------------------

    @classmethod
    def context_keys(cls) -> dict[str, str]:
        """Context key -> field name, for every setting."""
        return dict(_CONTEXT_KEYS)

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> AppConfig:
        """Build and validate from CDK context; raise :class:`ConfigError` listing every problem.

        Keys that CDK itself owns (``@aws-cdk/...``, ``aws:cdk:...``) and the pipeline's keys
        are ignored; any other unknown key is an error, because a typo would otherwise be
        silently ignored and deploy the default.
        """
        keys = cls.context_keys()
        problems: list[str] = []
        values: dict[str, Any] = {}
        for key, raw in context.items():
            if key.startswith("@") or ":" in key or key in OTHER_CONTEXT_KEYS:
                continue
            try:
                values[keys[key]] = cls.parse_value(key, raw)
            except ConfigError as err:
                problems.append(str(err))
        if problems:
            raise ConfigError("\n".join(problems))
        config = cls(**values)
        config.validate()
        return config

    @classmethod
    def parse_value(cls, key: str, raw: Any) -> Any:
        """One context value as its setting's type (``-c`` strings and JSON values alike).

        Raises :class:`ConfigError` for an unknown key (suggesting the setting meant, or
        listing them all) or a value of the wrong type.
        """
        keys = cls.context_keys()
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            if close:
                why = f"unknown setting; did you mean '{close[0]}'?"
                raise ConfigError(problem(key, raw, why, fix_key=close[0]))
            raise ConfigError(
                f"context key '{key}' = {json.dumps(raw)}: unknown setting; the settings are "
                f"{', '.join(sorted(keys, key=str.lower))} (docs/settings.md, Every setting)"
            )
        ftype = str(cls.__dataclass_fields__[keys[key]].type)
        try:
            return PARSERS[ftype](raw)
        except (TypeError, ValueError) as err:
            raise ConfigError(problem(key, raw, str(err))) from None

    @classmethod
    def field_defaults(cls) -> dict[str, Any]:
        """Context key -> the default as cdk.json states it (lists as lists, "" = derived)."""
        out = {}
        for f in dataclasses.fields(cls):
            value = f.default
            out[camel(f.name)] = list(value) if isinstance(value, tuple) else value
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> AppConfig:
        """A copy with some context keys replaced, validated like the original.

        A model id that is the one derived from ``modelSource`` follows a new ``modelSource``
        (as an unset ``modelId`` does), rather than naming the new model after the old one.
        """
        merged = {camel(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        merged = {k: list(v) if isinstance(v, tuple) else v for k, v in merged.items()}
        if self.model_id == derive_model_id(self.model_source) and "modelId" not in overrides:
            merged["modelId"] = ""
        merged["clusterName"] = self.cluster_name_setting  # prefixed again by deploymentName
        merged.update(overrides)
        return AppConfig.from_context(merged)

    def validate(self) -> None:
        """Raise :class:`ConfigError` with one line per invalid setting."""
        problems = check(RULES, self)
        if problems:
            raise ConfigError("\n".join(problems))


# Built once: from_context looks up every key it parses (computing the names per lookup made a
# synth spend ~20 ms per config on them).
_CONTEXT_KEYS = {camel(f.name): f.name for f in dataclasses.fields(AppConfig)}

DEFAULTS = AppConfig()
