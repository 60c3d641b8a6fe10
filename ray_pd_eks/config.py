"""The app's one typed configuration.

Every setting comes from CDK context (defaults in ``cdk.json``, overrides with ``-c key=value``)
and is read here, and only here, into a frozen :class:`AppConfig`. Validation happens in
:meth:`AppConfig.from_context`, before any construct exists, so a bad value fails ``cdk synth``
with one line that names the context key, shows the value and says what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ray_pd_eks import instance_types
from ray_pd_eks.charts import vendored_versions
from ray_pd_eks.dlc_images import DLC_DEFAULT_ACCOUNT, DLC_DOC, dlc_registry
from ray_pd_eks.eks_images import ADD_ONS_IMAGES_DOC, EKS_IMAGE_REGISTRIES
from ray_pd_eks.trust import registry_problem

# Kubernetes versions this app can deploy, each with the kubectl Lambda layer package it ships.
KUBECTL_LAYER_PACKAGES = {
    "1.35": "aws-cdk.lambda-layer-kubectl-v35",
    "1.36": "aws-cdk.lambda-layer-kubectl-v36",
}
# Oldest minor EKS still lets you create (1.31 left extended support on 2026-11-26).
OLDEST_EKS_MINOR = 32
NEWEST_EKS_MINOR = 36

DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")
# vLLM's FP8 weights (quantized when loading a 16-bit checkpoint) and FP8 KV cache; both need a
# GPU with FP8 tensor cores (instance_types.GpuFacts.fp8). docs/benchmarking.md says what each
# changes.
QUANTIZATIONS = ("none", "fp8")
KV_CACHE_DTYPES = ("auto", "fp8")
# How Serve picks an engine replica: its default PowerOfTwoChoicesRequestRouter, or Ray Serve
# LLM's PrefixCacheAffinityRouter (ray.serve.llm.request_router, Ray 2.58).
REQUEST_ROUTERS = ("power-of-two", "prefix-aware")
# gracefulShutdownSeconds: Serve's DeploymentConfig accepts any non-negative value; a stopping
# replica holds the serve-config update that stops it, and a deploy waits at most an hour.
MAX_GRACEFUL_SHUTDOWN_SECONDS = 3600
KV_BACKENDS = ("LIBFABRIC", "UCX")
# pd: prefill and decode engines on separate GPU nodes, KV cache over NIXL (the product);
# aggregated: ordinary engines doing both phases on the same GPU nodes (the baseline to beat).
SERVING_MODES = ("pd", "aggregated")
# CloudFormation fails a custom resource after one hour. The readiness check ends with its own
# message by readinessTimeoutMinutes, so that the Provider's hard stop (3 minutes later) and
# CloudFormation's hour never speak first: the last poll (up to 5 minutes), the Provider's start
# and its answer to CloudFormation need the minutes above 55 (issue 24 item 10).
MAX_READINESS_MINUTES = 55
# The KV integrity probe's prompt (at most 3500 tokens) plus its answer (48 tokens): the
# readiness check, the scheduled probe, smoke and efa-check send it
# (assets/lambda/readiness/kvproof.py PROBE_MIN_MODEL_LEN; a test keeps the two equal).
MIN_MODEL_LEN = 3548
# The scheduled KV probe (kvProbeIntervalMinutes): 0 = off, else every 5 minutes to once a day.
MIN_KV_PROBE_MINUTES = 5
MAX_KV_PROBE_MINUTES = 1440
# The check must see a few polls (each up to 5 minutes) before it may give up.
MIN_READINESS_MINUTES = 10
MAX_RAY_CLUSTER_REVISION = 999_999
RAYSERVICE_NAME_MAX = 47  # KubeRay derives longer object names from it.
# The GPU node group is named <gpuNodegroupName>-<AZ>-<8 hex> (so it can be replaced when it
# moves AZ); EKS allows 63 characters, and AZ names stay within 20.
EKS_NODEGROUP_NAME_MAX = 63
AZ_NAME_MAX = 20
GPU_NODEGROUP_PREFIX_MAX = EKS_NODEGROUP_NAME_MAX - AZ_NAME_MAX - len("--") - 8
CLUSTER_NAME_MAX = 100
# The app's Stage; its stacks are named <stage>-<stack> (RayPdEks-Network, ...).
STAGE_ID = "RayPdEks"
# deploymentName: short, because it prefixes the stage, every stack name and the cluster name
# (and through it the log groups, dashboard and alarms). Letters of a DNS label: stack names
# allow letters, digits and '-', EKS names also '_', CloudWatch names more.
DEPLOYMENT_NAME_MAX = 16
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827)
DLC_ACCOUNT = DLC_DEFAULT_ACCOUNT
DLC_REPOSITORY_TAG = "ray:serve-llm-cuda-v1.0"
# A commit of Qwen/Qwen3.5-9B on the Hugging Face Hub (cited, with its commit URL, by public
# projects that pin this model; docs/security.md, "Model revision").
MODEL_REVISION = "c202236235762e1c871ad0ccb60c8ee5ba337b9a"
MODEL_SOURCE = "Qwen/Qwen3.5-9B"  # the repository MODEL_REVISION is a commit of
MODEL_REVISION_MAX = 128
MIN_GPU_ROOT_GIB = 100  # ~20 GB image + ~18 GB weights + the HF cache's temp copy + logs.
MIN_GPU_OS_ROOT_GIB = 30  # the NVIDIA AMI's own snapshot, when NVMe holds images and caches
MIN_SYSTEM_ROOT_GIB = 80  # the Ray head runs the ~20 GB (compressed) DLC image there
GPU_LOCAL_STORAGE = ("auto", "raid0", "none")
GP3_IOPS = (3000, 80000)
GP3_THROUGHPUT = (125, 2000)  # MiB/s; at most 0.25 MiB/s per provisioned IOPS
# Every waiter of the app (custom resources that poll) ends with its own message by this many
# minutes: CloudFormation fails a custom resource after one hour, and the Provider's hard stop,
# the last poll and the answer to CloudFormation need the minutes above it.
WAITER_DEADLINE_MINUTES = 55
# The GPU capacity watch waits gpuCapacityWaitMinutes for capacity, then this long more for the
# nodes to launch and join; the sum must end by WAITER_DEADLINE_MINUTES.
CAPACITY_WATCH_EXTRA_MINUTES = 20
MAX_CAPACITY_WAIT_MINUTES = WAITER_DEADLINE_MINUTES - CAPACITY_WATCH_EXTRA_MINUTES  # 35
MAX_MODEL_PARAMS_BILLIONS = 600  # 16-bit weights of 600B fill 8 H200s (p5en.48xlarge)
# Where nodeadm mounts the RAID0 of the instance-store NVMe disks (it bind-mounts containerd's
# and kubelet's state under it), and the app's cache directory on the node in either case.
NVME_MOUNT = "/mnt/k8s-disks/0"
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.37.1"
# vpc-cni v1.23.0 (amazon-vpc-cni-k8s tag, August 2026) as an EKS add-on build.
VPC_CNI_ADDON_VERSION = "v1.23.0-eksbuild.1"
# The application endpoint (an ALB owned by the stack).
ENDPOINT_EXPOSURES = ("none", "internal", "internet-facing")
ENDPOINT_AUTHS = ("jwt", "none")
# Streaming completions hold one HTTP connection open for the whole answer; an idle timeout
# below five minutes cuts long prompts whose first token is slow. ALB allows 1..4000 s.
MIN_IDLE_TIMEOUT_SECONDS = 300
# AWS WAF's range for a rate-based rule's limit (RateBasedStatement.Limit, WAFV2 API reference;
# "The lowest limit setting allowed is 10", developer guide, rate-based rule settings).
WAF_RATE_LIMIT_MIN = 10
WAF_RATE_LIMIT_MAX = 2_000_000_000
MAX_IDLE_TIMEOUT_SECONDS = 4000
# Inbound rules per security group (the VPC quota's default); one rule per allowed CIDR.
MAX_ENDPOINT_CIDRS = 60
# A prefix shorter than /8 is "the internet" for practical purposes, as for endpointPublicCidrs.
OPEN_PREFIX_BELOW = 8
JWT_CLAIM_MAX = 256  # ALB: each additional-claim value is at most 256 characters
# How the token carries aud, as the ALB's jwt-validation names the formats of an additional
# claim (JwtValidationActionAdditionalClaim.Format: single-string | string-array |
# space-separated-values, ELBv2 API reference). RFC 7519 section 4.1.3: aud is one string or an
# array of strings, never space-separated; Keycloak and Entra ID v1 tokens, among others, carry
# an array. Cognito's ID tokens carry one string (its access tokens carry client_id, no aud).
JWT_AUDIENCE_FORMATS = ("single-string", "string-array")
OBSERVABILITY = ("cloudwatch", "none")
# The first add-on major that scrapes PodMonitor/ServiceMonitor objects and sends them over OTLP
# (queryable with PromQL): "available in version 8.0.0 and later" (CloudWatch user guide,
# "Scraping ServiceMonitor and PodMonitor targets").
MIN_CLOUDWATCH_ADDON_MAJOR = 8
CLOUDWATCH_ADDON_VERSION = "v8.0.0-eksbuild.1"
# Alarm thresholds: (lowest, highest) accepted, in the setting's unit.
ALARM_TTFT_P95_SECONDS = (0.05, 600.0)
ALARM_ITL_P95_SECONDS = (0.001, 60.0)
ALARM_ERROR_PERCENT = (0.1, 100.0)
ALARM_KV_CACHE_PERCENT = (1.0, 100.0)
# The model prefetch's small image: CPython 3.12 (the pinned huggingface_hub wheels are cp312),
# Docker's official image as mirrored on ECR Public.
PREFETCH_IMAGE = "public.ecr.aws/docker/library/python:3.12-slim"

# Context keys that are not settings of AppConfig but are read elsewhere (pipeline, CDK itself).
OTHER_CONTEXT_KEYS = frozenset({"environments", "pipeline"})

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DEPLOYMENT_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]*$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_AZ = re.compile(r"^(?P<region>[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d)[a-z]$")
_ACCOUNT = re.compile(r"^\d{12}$")
# An Identity Center role named without its path: .../role/AWSReservedSSO_<set>_<id>.
_SSO_ROLE_WITHOUT_PATH = re.compile(r":role/AWSReservedSSO_")
_ASSUMED_ROLE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[\w+=,.@-]+)/"
)
_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MODEL_SOURCE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MODEL_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]*$")
_S3_URI = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>[\w!\-.*'()/]+?)/?$"
)
_SECRET_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"secret:(?P<name>[A-Za-z0-9/_+=.@-]{1,512})$"
)
_SECRET_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")
_CERTIFICATE_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):acm:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"certificate/[0-9a-f-]{36}$"
)
# What _CERTIFICATE_ARN accepts, as error lines show it (`aws acm list-certificates` lists them).
CERTIFICATE_ARN_FORM = (
    "arn:aws:acm:<region>:<account>:certificate/<id: 36 lowercase hex digits and dashes, "
    "e.g. 0123abcd-0123-4567-89ab-0123456789ab>"
)
_DOMAIN = re.compile(r"^(?=.{4,253}$)([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(:\d+)?(/[^\s?#]*)?$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")
_PLACEMENT_GROUP = re.compile(r"^[A-Za-z0-9][\w.+=@-]{0,254}$")
_ADDON_VERSION = re.compile(r"^v(?P<major>\d+)\.\d+\.\d+-eksbuild\.\d+$")
# Practical form of an address SNS can deliver to: one @, no spaces, a dotted domain.
_EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_IMAGE = re.compile(
    r"^[a-z0-9.-]+(:\d+)?/[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
)


class ConfigError(ValueError):
    """One or more context values are invalid; each line names the key, the value and the fix."""


def derive_model_id(model_source: str) -> str:
    """The id clients use for a model when ``modelId`` is empty: the source's name, lowercased
    (``Qwen/Qwen3.5-9B`` -> ``qwen3.5-9b``, the walkthrough's id)."""
    return model_source.rstrip("/").rsplit("/", 1)[-1].lower()


LOCAL_SETTINGS_FILE = "settings.local.json"  # see ray_pd_eks/context.py
CLI_NAME = "ray-pd-eks"  # the operations CLI's console script (ray_pd_eks/console.py)
# How a user changes a setting for good: the settings command writes settings.local.json, which
# every later command reads (docs/settings.md). `-c key=value` lasts one command only, so no
# hint offers it as the fix. The handlers' copy is pd_lambda/settings_hint.py (a test pins it).
SETTINGS_SET = f"{CLI_NAME} settings --set"


def set_hint(key: str, value: str = "...") -> str:
    """The command that sets ``key`` to ``value``, as every warning and error shows it, in
    backticks: ``ray-pd-eks settings --set key=value``."""
    return f"`{SETTINGS_SET} {key}={value}`"


def _problem(key: str, value: Any, why: str, *, fix_key: str | None = None) -> str:
    """One line: the key and value as given, why they are wrong, and where to set the fix
    (``fix_key``: the setting to set instead, for an unknown key)."""
    shown = json.dumps(value)
    fix = fix_key or key
    return (
        f"context key '{key}' = {shown}: {why} "
        f"(fix it with {set_hint(fix)}, or -c {fix}=... for one command)"
    )


# -- parsing of context values (cdk.json gives typed JSON, -c gives strings) -----------------


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value.strip()


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("expected a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    raise TypeError("expected a whole number")


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("expected a number")
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise TypeError("expected a number") from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise TypeError("expected true or false")


def _as_str_list(value: Any) -> tuple[str, ...]:
    """A JSON list, or from ``-c`` a JSON list or a comma-separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise TypeError(
                    'not a JSON list: quote each item, \'["a", "b"]\' (single quotes around '
                    "it in the shell), or give them comma-separated, a,b"
                ) from None
        else:
            items = tuple(v.strip() for v in text.split(",") if v.strip())
            if any(len(item.split()) > 1 for item in items):
                raise TypeError("separate the items with commas, not spaces: a,b")
            return items
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value)
    raise TypeError("expected a list of strings (JSON list or comma-separated)")


_PARSERS: dict[type | str, Callable[[Any], Any]] = {
    "str": _as_str,
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "tuple[str, ...]": _as_str_list,
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


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
    gpu_memory_utilization: float = 0.90
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
        m = _S3_URI.match(self.model_s3_uri)
        return m["bucket"] if m else ""

    @property
    def model_s3_prefix(self) -> str:
        """The key prefix of the staged model, without a trailing slash."""
        m = _S3_URI.match(self.model_s3_uri)
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
                raise ConfigError(_problem(key, raw, why, fix_key=close[0]))
            raise ConfigError(
                f"context key '{key}' = {json.dumps(raw)}: unknown setting; the settings are "
                f"{', '.join(sorted(keys, key=str.lower))} (docs/settings.md, Every setting)"
            )
        ftype = str(cls.__dataclass_fields__[keys[key]].type)
        try:
            return _PARSERS[ftype](raw)
        except (TypeError, ValueError) as err:
            raise ConfigError(_problem(key, raw, str(err))) from None

    @classmethod
    def field_defaults(cls) -> dict[str, Any]:
        """Context key -> the default as cdk.json states it (lists as lists, "" = derived)."""
        out = {}
        for f in dataclasses.fields(cls):
            value = f.default
            out[_camel(f.name)] = list(value) if isinstance(value, tuple) else value
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> AppConfig:
        """A copy with some context keys replaced, validated like the original.

        A model id that is the one derived from ``modelSource`` follows a new ``modelSource``
        (as an unset ``modelId`` does), rather than naming the new model after the old one.
        """
        merged = {_camel(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        merged = {k: list(v) if isinstance(v, tuple) else v for k, v in merged.items()}
        if self.model_id == derive_model_id(self.model_source) and "modelId" not in overrides:
            merged["modelId"] = ""
        merged["clusterName"] = self.cluster_name_setting  # prefixed again by deploymentName
        merged.update(overrides)
        return AppConfig.from_context(merged)

    def validate(self) -> None:
        """Raise :class:`ConfigError` with one line per invalid setting."""
        problems = [p for check in _CHECKS for p in check(self)]
        if problems:
            raise ConfigError("\n".join(problems))


# Built once: from_context looks up every key it parses (computing the names per lookup made a
# synth spend ~20 ms per config on them).
_CONTEXT_KEYS = {_camel(f.name): f.name for f in dataclasses.fields(AppConfig)}


# -- validation rules: each yields problem lines ---------------------------------------------

_Check = Callable[[AppConfig], list[str]]
_CHECKS: list[_Check] = []


def _check(fn: _Check) -> _Check:
    """Register a rule. The rules below are registered in one list at the end instead: a
    decorated function is one that mutation testing (scripts/mutation.sh) cannot mutate."""
    _CHECKS.append(fn)
    return fn


def _environment(c: AppConfig) -> list[str]:
    out = []
    if c.account and not _ACCOUNT.match(c.account):
        out.append(_problem("account", c.account, "must be a 12-digit AWS account id or empty"))
    if c.region and not _REGION.match(c.region):
        out.append(
            _problem("region", c.region, "must be an AWS region such as us-west-2, or empty")
        )
    elif c.region and c.region not in EKS_IMAGE_REGISTRIES:
        # The EFA device plugin's image comes from EKS's registry in the deploy region.
        why = (
            "has no Amazon EKS image registry known to this app (ray_pd_eks/eks_images.py); "
            f"add the region's registry from {ADD_ONS_IMAGES_DOC}, or deploy to another region"
        )
        out.append(_problem("region", c.region, why))
    elif c.region and not c.dlc_image and dlc_registry(c.region) is None:
        why = (
            "has no AWS Deep Learning Containers registry (AWS documents none there: "
            f"{DLC_DOC}), so the default Ray LLM image cannot be pulled; copy the image into "
            "an ECR repository of that region and set dlcImage to it, or deploy to another "
            "region"
        )
        out.append(_problem("region", c.region, why))
    return out


def _kubernetes(c: AppConfig) -> list[str]:
    v = c.kubernetes_version
    allowed = " or ".join(KUBECTL_LAYER_PACKAGES)
    if v in KUBECTL_LAYER_PACKAGES:
        return []
    m = re.fullmatch(r"1\.(\d+)", v)
    if not m:
        why = f"not a Kubernetes minor version; use {allowed}"
    elif int(m.group(1)) < OLDEST_EKS_MINOR:
        why = f"EKS no longer supports it (no new clusters); use {allowed}"
    elif int(m.group(1)) > NEWEST_EKS_MINOR:
        why = f"EKS does not offer it yet; use {allowed}"
    else:
        why = f"this app has no kubectl layer for it; use {allowed}"
    return [_problem("kubernetesVersion", v, why)]


def _name(key: str, value: str, pattern: re.Pattern[str], max_len: int, kind: str) -> list[str]:
    if not value:
        return [_problem(key, value, f"must not be empty; use a {kind}")]
    if len(value) > max_len:
        return [_problem(key, value, f"is {len(value)} characters; the limit is {max_len}")]
    if not pattern.match(value):
        return [_problem(key, value, f"is not a valid {kind}")]
    return []


def _deployment_name(c: AppConfig) -> list[str]:
    name = c.deployment_name
    if not name:
        return []
    if len(name) > DEPLOYMENT_NAME_MAX:
        why = f"is {len(name)} characters; the limit is {DEPLOYMENT_NAME_MAX} (a prefix of names)"
    elif not _DEPLOYMENT_NAME.match(name):
        why = (
            "must be lowercase letters, digits and '-', starting with a letter and ending with a "
            "letter or digit (it prefixes the stack and cluster names), e.g. alice or team-a"
        )
    else:
        return []
    return [_problem("deploymentName", name, why)]


def _names(c: AppConfig) -> list[str]:
    label = "Kubernetes name (lowercase letters, digits and '-', starting and ending alphanumeric)"
    eks = "EKS name (letters, digits, '-' and '_', starting with a letter or digit)"
    deployment = _deployment_name(c)  # a bad one would make the cluster's name bad too
    return [
        *deployment,
        *(
            []
            if deployment
            else _name("clusterName", c.cluster_name, _EKS_NAME, CLUSTER_NAME_MAX, eks)
        ),
        *_name("namespace", c.namespace, _DNS_LABEL, 63, label),
        *_name("rayServiceName", c.ray_service_name, _DNS_LABEL, RAYSERVICE_NAME_MAX, label),
        *_name(
            "gpuNodegroupName",
            c.gpu_nodegroup_name,
            _EKS_NAME,
            GPU_NODEGROUP_PREFIX_MAX,
            eks + ", to which the AZ and a hash are appended",
        ),
        *_model_id(c),
    ]


def _model_id(c: AppConfig) -> list[str]:
    if c.model_id == derive_model_id(c.model_source) and not _MODEL_SOURCE.match(c.model_source):
        return []  # derived from an invalid modelSource, whose own line says what to fix
    return _name("modelId", c.model_id, _MODEL_ID, 128, "model id (letters, digits, '.', '_', '-')")


def _model_source(c: AppConfig) -> list[str]:
    if _MODEL_SOURCE.match(c.model_source):
        return []
    if c.model_source.startswith("s3://"):
        why = (
            "Ray 2.58 cannot stream weights from S3 (fixed in Ray 2.59); set "
            "modelS3Uri to stage them onto the GPU nodes' NVMe, and keep modelSource a "
            "Hugging Face repo 'org/name'"
        )
    else:
        why = "must be a Hugging Face repo 'org/name' (for S3, set modelS3Uri)"
    return [_problem("modelSource", c.model_source, why)]


def _gpu_nodes(c: AppConfig) -> list[str]:
    out = []
    t = c.gpu_node_type
    examples = "g6.8xlarge, g6e.8xlarge, g5.8xlarge, p4d.24xlarge or p5.48xlarge"
    if instance_types.gpu_spec(t) is None:
        if not instance_types.has_instance_size(t):
            why = (
                "unknown instance type (EC2 sizes read like 8xlarge, 12xlarge, 48xlarge); use "
                f"an EFA-capable GPU type such as {examples}"
            )
        elif instance_types.is_known_gpu_family(t):
            why = f"this GPU type has no EFA interface; use an EFA-capable type such as {examples}"
        else:
            why = f"not an NVIDIA GPU instance type with EFA; use one such as {examples}"
        out.append(_problem("gpuNodeType", t, why))
    if c.gpu_node_count < 2:
        why = "prefill and decode need separate nodes: at least 2"
        out.append(_problem("gpuNodeCount", c.gpu_node_count, why))
    elif c.gpu_node_count > 64:
        out.append(_problem("gpuNodeCount", c.gpu_node_count, "at most 64 nodes in one group"))
    for key, count in (
        ("prefillReplicas", c.prefill_replicas),
        ("decodeReplicas", c.decode_replicas),
    ):
        if count < 1:
            out.append(_problem(key, count, "must be at least 1"))
    spec = instance_types.gpu_spec(t)
    tp = c.tensor_parallel_size
    if tp < 1:
        out.append(_problem("tensorParallelSize", tp, "must be at least 1"))
    elif spec is not None and (tp > spec.gpus or spec.gpus % tp):
        fits = [n for n in range(1, spec.gpus + 1) if spec.gpus % n == 0]
        why = (
            f"one replica's GPUs must sit on one {t} node, which has {spec.gpus} GPU(s), and "
            f"divide them evenly: use one of {', '.join(map(str, fits))}, or a GPU type with "
            "more GPUs"
        )
        out.append(_problem("tensorParallelSize", tp, why))
    if (
        2 <= c.gpu_node_count <= 64  # else gpuNodeCount's own line says what to fix
        and c.prefill_replicas >= 1
        and c.decode_replicas >= 1
        and c.worker_replicas > c.gpu_node_count
    ):
        why = (
            f"prefillReplicas + decodeReplicas = {c.worker_replicas} exceeds gpuNodeCount "
            f"{c.gpu_node_count}; each replica needs its own GPU node: raise gpuNodeCount "
            "or lower the replicas"
        )
        out.append(_problem("decodeReplicas", c.decode_replicas, why))
    return out


def _scaling(c: AppConfig) -> list[str]:
    """The autoscaling bounds: decode between decodeMinReplicas and decodeMaxReplicas, the GPU
    node group between gpuNodeMinCount and gpuNodeMaxCount, each range holding its starting
    value, and every decode replica the range allows on a GPU node of its own."""
    out: list[str] = []
    if c.prefill_replicas < 1 or c.decode_replicas < 1:
        return out  # _gpu_nodes reports those
    if c.decode_min_replicas < 0 or c.decode_min_replicas > c.decode_replicas:
        why = (
            f"must be 0 (= decodeReplicas) or 1..decodeReplicas ({c.decode_replicas}): "
            "decodeReplicas is where decode starts, within the range"
        )
        out.append(_problem("decodeMinReplicas", c.decode_min_replicas, why))
    if c.decode_max_replicas < 0 or 0 < c.decode_max_replicas < c.decode_replicas:
        why = (
            f"must be 0 (= decodeReplicas) or at least decodeReplicas ({c.decode_replicas}): "
            "decodeReplicas is where decode starts, within the range"
        )
        out.append(_problem("decodeMaxReplicas", c.decode_max_replicas, why))
    elif c.decode_autoscales and not c.is_pd:
        why = (
            "decode autoscaling applies to servingMode=pd; an aggregated app has no decode "
            "deployment: leave decodeMinReplicas and decodeMaxReplicas at 0"
        )
        out.append(_problem("decodeMaxReplicas", c.decode_max_replicas, why))
    if not 1 <= c.decode_target_ongoing_requests <= 1024:
        why = "must be 1..1024 requests per decode replica"
        out.append(_problem("decodeTargetOngoingRequests", c.decode_target_ongoing_requests, why))
    if not 0 <= c.decode_upscale_delay_seconds <= 3600:
        why = "must be 0..3600 seconds"
        out.append(_problem("decodeUpscaleDelaySeconds", c.decode_upscale_delay_seconds, why))
    if not 0 <= c.decode_downscale_delay_seconds <= 86400:
        why = "must be 0..86400 seconds"
        out.append(_problem("decodeDownscaleDelaySeconds", c.decode_downscale_delay_seconds, why))
    count_ok = 2 <= c.gpu_node_count <= 64  # else its own line says what to fix first
    if c.gpu_node_min_count < 0:
        why = "must not be negative: 0 (= gpuNodeCount) or 2..gpuNodeCount"
        out.append(_problem("gpuNodeMinCount", c.gpu_node_min_count, why))
    elif count_ok and (0 < c.gpu_node_min_count < 2 or (c.gpu_node_min_count > c.gpu_node_count)):
        why = (
            f"must be 0 (= gpuNodeCount) or 2..gpuNodeCount ({c.gpu_node_count}): prefill and "
            "decode need separate nodes, and gpuNodeCount is the size the group starts with"
        )
        out.append(_problem("gpuNodeMinCount", c.gpu_node_min_count, why))
    if c.gpu_node_max_count < 0:
        why = "must not be negative: 0 (= gpuNodeCount) or gpuNodeCount..64"
        out.append(_problem("gpuNodeMaxCount", c.gpu_node_max_count, why))
    elif count_ok and (0 < c.gpu_node_max_count < c.gpu_node_count or (c.gpu_node_max_count > 64)):
        why = (
            f"must be 0 (= gpuNodeCount) or gpuNodeCount ({c.gpu_node_count})..64: the group "
            "starts at gpuNodeCount, and one node group holds at most 64 nodes here"
        )
        out.append(_problem("gpuNodeMaxCount", c.gpu_node_max_count, why))
    if out or not 2 <= c.gpu_node_count <= 64 or c.worker_replicas > c.gpu_node_count:
        return out  # the starting sizes' own lines say what to fix first
    if c.worker_max_replicas > c.gpu_node_max:
        why = (
            f"prefillReplicas + decodeMaxReplicas = {c.worker_max_replicas} exceeds "
            f"gpuNodeMaxCount {c.gpu_node_max}; each replica needs its own GPU node: raise "
            "gpuNodeMaxCount or lower decodeMaxReplicas"
        )
        out.append(_problem("decodeMaxReplicas", c.decode_max_replicas, why))
    if c.worker_min_replicas > c.gpu_node_min:
        why = (
            f"prefillReplicas + decodeMinReplicas = {c.worker_min_replicas} exceeds "
            f"gpuNodeMinCount {c.gpu_node_min}: the group could shrink below the replicas "
            "that always run; raise gpuNodeMinCount or lower decodeMinReplicas"
        )
        out.append(_problem("decodeMinReplicas", c.decode_min_replicas, why))
    return out + _warm_spares(c)


def _warm_spares(c: AppConfig) -> list[str]:
    """gpuWarmSpareNodes: headroom for decode scale-out, so it needs decode autoscaling and a
    GPU node range (the Cluster Autoscaler adds the spare's node), and the spares beside the
    replicas that always run must fit the group's maximum."""
    spares, key = c.gpu_warm_spare_nodes, "gpuWarmSpareNodes"
    if spares == 0:
        return []
    if spares < 0:
        return [_problem(key, spares, "must be 0 (no spare) or a number of GPU nodes")]
    out = []
    if not c.decode_autoscales:
        why = (
            "warm spare nodes are headroom for decode scale-out: set decodeMaxReplicas above "
            "decodeMinReplicas (decode autoscaling), or set gpuWarmSpareNodes=0"
        )
        out.append(_problem(key, spares, why))
    if not c.gpu_nodes_autoscale:
        why = (
            "the Cluster Autoscaler adds a spare's node: set gpuNodeMaxCount above "
            "gpuNodeMinCount (a GPU node range), or set gpuWarmSpareNodes=0"
        )
        out.append(_problem(key, spares, why))
    if not out and c.worker_min_replicas + spares > c.gpu_node_max:
        why = (
            f"prefillReplicas + decodeMinReplicas + gpuWarmSpareNodes = "
            f"{c.worker_min_replicas + spares} exceeds gpuNodeMaxCount {c.gpu_node_max}: each "
            "spare holds a GPU node of its own beside the replicas that always run; raise "
            f"gpuNodeMaxCount or set gpuWarmSpareNodes to at most "
            f"{c.gpu_node_max - c.worker_min_replicas}"
        )
        out.append(_problem(key, spares, why))
    return out


def _gpu_storage(c: AppConfig) -> list[str]:
    out: list[str] = []
    if c.gpu_local_storage not in GPU_LOCAL_STORAGE:
        why = (
            "must be auto (NVMe RAID0 when the type has instance store), raid0 (require it) "
            "or none (images and caches on the root volume)"
        )
        return [_problem("gpuLocalStorage", c.gpu_local_storage, why)]
    spec = instance_types.gpu_spec(c.gpu_node_type)
    if spec is None:
        return []  # reported by _gpu_nodes
    if c.gpu_local_storage == "raid0" and spec.nvme_gb == 0:
        why = (
            f"{c.gpu_node_type} has no instance-store NVMe; use auto or none, or a type with "
            "NVMe such as g6.8xlarge"
        )
        out.append(_problem("gpuLocalStorage", c.gpu_local_storage, why))
        return out
    size = c.gpu_root_volume_gib
    low = MIN_GPU_OS_ROOT_GIB if c.uses_local_nvme else MIN_GPU_ROOT_GIB
    if size and not low <= size <= 16384:
        holds = "the OS (NVMe holds the rest)" if c.uses_local_nvme else "the image and weights"
        why = f"must be 0 (automatic) or {low}..16384 GiB to hold {holds}"
        out.append(_problem("gpuRootVolumeGib", size, why))
        return out
    if c.uses_local_nvme:
        return out  # the root volume keeps gp3's baseline; IOPS/throughput are not used
    out += _gp3_performance(
        "gpuRoot", c.gpu_root_gib, c.gpu_root_volume_iops, c.gpu_root_volume_throughput
    )
    return out


def _capacity(c: AppConfig) -> list[str]:
    out = []
    cr = c.gpu_capacity_reservation_id
    if cr and not _CAPACITY_RESERVATION.match(cr):
        why = "must be an On-Demand Capacity Reservation id such as cr-0123456789abcdef0, or empty"
        out.append(_problem("gpuCapacityReservationId", cr, why))
    pg = c.gpu_placement_group_name
    if pg and not _PLACEMENT_GROUP.match(pg):
        why = "must be the name of an existing cluster placement group, or empty"
        out.append(_problem("gpuPlacementGroupName", pg, why))
    wait = c.gpu_capacity_wait_minutes
    if not 1 <= wait <= MAX_CAPACITY_WAIT_MINUTES:
        why = (
            f"must be 1..{MAX_CAPACITY_WAIT_MINUTES}: how long GPU launches may fail for lack "
            "of capacity before the deploy fails (the watch then allows "
            f"{CAPACITY_WATCH_EXTRA_MINUTES} more minutes for the nodes to join, and every "
            f"waiter ends by {WAITER_DEADLINE_MINUTES} minutes, inside CloudFormation's hour)"
        )
        out.append(_problem("gpuCapacityWaitMinutes", wait, why))
    return out


def is_hf_revision(rev: str) -> bool:
    """A Hugging Face revision as ``modelRevision`` accepts it: a commit, a tag or a branch."""
    return bool(_MODEL_REVISION.match(rev)) and len(rev) <= MODEL_REVISION_MAX


def _model_revision(c: AppConfig) -> list[str]:
    rev = c.model_revision
    if is_hf_revision(rev):
        return _revision_of_another_model(c)
    why = (
        f"must be a Hugging Face revision of at most {MODEL_REVISION_MAX} characters: a "
        "40-hex commit (recommended: what serves can then not change under you), a tag or a "
        "branch (letters, digits, '.', '_', '-', '/')"
    )
    return [_problem("modelRevision", rev, why)]


def _revision_of_another_model(c: AppConfig) -> list[str]:
    """The default revision is a commit of the default model: another repository has no such
    commit, so its prefetch and both engines would fail and the deploy would wait out the
    readiness timeout with the GPU nodes billing. Staged weights (modelS3Uri) use no revision."""
    if c.model_revision != MODEL_REVISION or c.model_source == MODEL_SOURCE or c.model_s3_uri:
        return []
    if not _MODEL_SOURCE.match(c.model_source):
        return []  # modelSource's own line says what to fix
    why = (
        f"is the commit of {MODEL_SOURCE} (the default modelSource), but modelSource is "
        f"{c.model_source}, which has no such commit: set modelRevision with modelSource, to a "
        f"commit of {c.model_source} (its Hugging Face page, 'Files and versions', the "
        f"history), e.g. `{SETTINGS_SET} modelSource={c.model_source} "
        "--set modelRevision='<commit>'`; a tag or branch (main) serves whatever it points to"
    )
    return [_problem("modelRevision", c.model_revision, why)]


def _model_access(c: AppConfig) -> list[str]:
    out = []
    owner = c.model_s3_bucket_owner
    if owner and not _ACCOUNT.match(owner):
        why = "must be the 12-digit AWS account id that owns modelS3Uri's bucket, or empty"
        out.append(_problem("modelS3BucketOwner", owner, why + " (= the deploy account)"))
    if c.model_s3_uri and not _S3_URI.match(c.model_s3_uri):
        why = "must be s3://<bucket>/<prefix> (the folder holding config.json and the weights)"
        out.append(_problem("modelS3Uri", c.model_s3_uri, why))
    arn = c.hf_token_secret_arn
    m = _SECRET_ARN.match(arn)
    if arn and not m:
        why = (
            "must be a Secrets Manager secret ARN, "
            "arn:aws:secretsmanager:<region>:<account>:secret:<name>-<suffix>"
        )
        out.append(_problem("hfTokenSecretArn", arn, why))
    elif m and c.region and m["region"] != c.region:
        why = f"the secret is in {m['region']}, the deployment in {c.region}: use one in {c.region}"
        out.append(_problem("hfTokenSecretArn", arn, why))
    if c.model_s3_uri and arn:
        why = (
            "staged weights load offline from the node's copy, so no Hugging Face token is used; "
            "set only one of modelS3Uri and hfTokenSecretArn"
        )
        out.append(_problem("hfTokenSecretArn", arn, why))
    return out


def _gpu_az(c: AppConfig) -> list[str]:
    if not c.gpu_az:
        return []
    m = _AZ.match(c.gpu_az)
    if not m:
        why = "not an Availability Zone name such as us-west-2a; leave empty to choose at deploy"
        return [_problem("gpuAz", c.gpu_az, why)]
    if c.region and m["region"] != c.region:
        why = f"is not in region {c.region}; use an AZ of {c.region} or leave empty"
        return [_problem("gpuAz", c.gpu_az, why)]
    return []


def _system_nodes(c: AppConfig) -> list[str]:
    out = []
    spec = instance_types.system_spec(c.system_node_type)
    if spec is None:
        why = "use an x86_64 m/c/r type from xlarge up, such as m7i.xlarge (the head runs the DLC)"
        out.append(_problem("systemNodeType", c.system_node_type, why))
    elif (
        spec.vcpus < instance_types.MIN_SYSTEM_VCPUS
        or spec.memory_gib < instance_types.MIN_SYSTEM_MEMORY_GIB
    ):
        why = (
            f"has {spec.vcpus} vCPU / {spec.memory_gib} GiB; the Ray head and KubeRay need "
            f"at least {instance_types.MIN_SYSTEM_VCPUS} vCPU and "
            f"{instance_types.MIN_SYSTEM_MEMORY_GIB} GiB"
        )
        out.append(_problem("systemNodeType", c.system_node_type, why))
    if not 1 <= c.system_node_count <= 20:
        out.append(_problem("systemNodeCount", c.system_node_count, "must be 1..20"))
    if not MIN_SYSTEM_ROOT_GIB <= c.system_root_volume_gib <= 16384:
        why = f"must be {MIN_SYSTEM_ROOT_GIB}..16384 GiB: the Ray head's DLC image is ~20 GB"
        out.append(_problem("systemRootVolumeGib", c.system_root_volume_gib, why))
        return out
    out += _gp3_performance(
        "systemRoot",
        c.system_root_volume_gib,
        c.system_root_volume_iops,
        c.system_root_volume_throughput,
    )
    return out


def _gp3_performance(prefix: str, gib: int, iops: int, mibps: int) -> list[str]:
    """gp3's limits on provisioned IOPS and throughput, for settings ``<prefix>VolumeIops`` and
    ``<prefix>VolumeThroughput`` of a ``gib``-sized volume."""
    out = []
    if not GP3_IOPS[0] <= iops <= GP3_IOPS[1]:
        why = f"gp3 allows {GP3_IOPS[0]}..{GP3_IOPS[1]} IOPS"
        out.append(_problem(f"{prefix}VolumeIops", iops, why))
    elif iops > 500 * gib:
        why = f"gp3 allows at most 500 IOPS per GiB: raise {prefix}VolumeGib to {-(-iops // 500)}"
        out.append(_problem(f"{prefix}VolumeIops", iops, why))
    if not GP3_THROUGHPUT[0] <= mibps <= GP3_THROUGHPUT[1]:
        why = f"gp3 allows {GP3_THROUGHPUT[0]}..{GP3_THROUGHPUT[1]} MiB/s"
        out.append(_problem(f"{prefix}VolumeThroughput", mibps, why))
    elif GP3_IOPS[0] <= iops and mibps * 4 > iops:
        why = f"gp3 allows 0.25 MiB/s per IOPS: raise {prefix}VolumeIops to {mibps * 4}"
        out.append(_problem(f"{prefix}VolumeThroughput", mibps, why))
    return out


def _software(c: AppConfig) -> list[str]:
    out = []
    images = (
        ("dlcImage", c.dlc_image),
        ("awsCliImage", c.aws_cli_image),
        ("prefetchImage", c.prefetch_image),
    )
    for key, image in images:
        if not image and key == "dlcImage":
            continue
        if not _IMAGE.match(image):
            why = "must be a full image reference registry/repository:tag (or @sha256:...)"
            out.append(_problem(key, image, why + (", or empty" if key == "dlcImage" else "")))
        elif image.endswith(":latest"):
            why = (
                "pin a version tag or digest: nodes keep an image once pulled "
                "(IfNotPresent), so ':latest' would differ from node to node"
            )
            out.append(_problem(key, image, why))
        elif unknown := registry_problem(image, c.account):
            out.append(_problem(key, image, unknown))
    if not _SEMVER.match(c.kuberay_version):
        out.append(_problem("kuberayVersion", c.kuberay_version, "must be a version like 1.7.0"))
    elif tuple(int(p) for p in c.kuberay_version.split(".")) < (1, 6, 0):
        why = (
            "must be 1.6.0 or newer (the RayService Ready condition and upgradeStrategy; "
            "rayClusterConfig.authOptions.secretName for Ray token authentication)"
        )
        out.append(_problem("kuberayVersion", c.kuberay_version, why))
    elif c.kuberay_version not in vendored_versions("kuberay-operator"):
        why = (
            "no vendored chart of that version (charts install from assets/charts/, never "
            f"from a repository): use {', '.join(vendored_versions('kuberay-operator'))}, or "
            "vendor it with scripts/vendor_chart.py"
        )
        out.append(_problem("kuberayVersion", c.kuberay_version, why))
    if not _SEMVER.match(c.ray_version):
        out.append(_problem("rayVersion", c.ray_version, "must be a version like 2.58.0"))
    elif tuple(int(p) for p in c.ray_version.split(".")) < (2, 52, 0):
        why = "must be 2.52.0 or newer (Ray token authentication, RAY_AUTH_MODE=token)"
        out.append(_problem("rayVersion", c.ray_version, why))
    if not _ADDON_VERSION.match(c.vpc_cni_addon_version):
        why = (
            "must be an EKS add-on version like v1.23.0-eksbuild.1 (list them with `aws eks "
            "describe-addon-versions --addon-name vpc-cni --kubernetes-version <version>`)"
        )
        out.append(_problem("vpcCniAddonVersion", c.vpc_cni_addon_version, why))
    elif tuple(int(p) for p in c.vpc_cni_addon_version[1:].split("-")[0].split(".")) < (1, 14, 0):
        why = "must be v1.14.0 or newer (the first with network-policy enforcement)"
        out.append(_problem("vpcCniAddonVersion", c.vpc_cni_addon_version, why))
    return out


def _serving(c: AppConfig) -> list[str]:
    out = []
    if not MIN_MODEL_LEN <= c.max_model_len <= 1_048_576:
        why = (
            f"must be {MIN_MODEL_LEN}..1048576 tokens: the readiness check's KV integrity probe "
            "sends a prompt of up to 3500 tokens (over a hundred KV blocks) and takes a "
            "48-token answer"
        )
        out.append(_problem("maxModelLen", c.max_model_len, why))
    if c.dtype not in DTYPES:
        out.append(_problem("dtype", c.dtype, f"must be one of {', '.join(DTYPES)}"))
    if not 0 < c.gpu_memory_utilization <= 1:
        why = "must be a fraction in (0, 1], e.g. 0.90"
        out.append(_problem("gpuMemoryUtilization", c.gpu_memory_utilization, why))
    if c.kv_backend not in KV_BACKENDS:
        why = "must be LIBFABRIC (EFA) or UCX (TCP fallback, for comparison)"
        out.append(_problem("kvBackend", c.kv_backend, why))
    if c.serving_mode not in SERVING_MODES:
        why = (
            "must be pd (prefill and decode on separate GPU nodes, KV cache over NIXL) or "
            "aggregated (the same GPUs serving both phases, the baseline to compare with)"
        )
        out.append(_problem("servingMode", c.serving_mode, why))
    elif c.serving_mode == "aggregated" and c.kv_backend == "UCX":
        why = (
            "an aggregated app moves no KV cache, so kvBackend has no effect; leave it at "
            "LIBFABRIC or use servingMode=pd to compare backends"
        )
        out.append(_problem("kvBackend", c.kv_backend, why))
    if not MIN_READINESS_MINUTES <= c.readiness_timeout_minutes <= MAX_READINESS_MINUTES:
        why = (
            f"must be {MIN_READINESS_MINUTES}..{MAX_READINESS_MINUTES}: CloudFormation fails a "
            "custom resource after one hour, and the check must end with its own reason, "
            "after its last poll (up to 5 minutes), before that"
        )
        out.append(_problem("readinessTimeoutMinutes", c.readiness_timeout_minutes, why))
    interval = c.kv_probe_interval_minutes
    if interval != 0 and not MIN_KV_PROBE_MINUTES <= interval <= MAX_KV_PROBE_MINUTES:
        why = (
            f"must be 0 (off) or {MIN_KV_PROBE_MINUTES}..{MAX_KV_PROBE_MINUTES} minutes: each "
            "probe is a ~2,500-token request to the model, and one probe may take up to 2 "
            "minutes"
        )
        out.append(_problem("kvProbeIntervalMinutes", interval, why))
    if not 0 <= c.ray_cluster_revision <= MAX_RAY_CLUSTER_REVISION:
        why = (
            f"must be a whole number 0..{MAX_RAY_CLUSTER_REVISION}; raise it by one to make "
            "the next deploy recreate the Ray cluster"
        )
        out.append(_problem("rayClusterRevision", c.ray_cluster_revision, why))
    return out


def _access(c: AppConfig) -> list[str]:
    out = []
    for arn in c.admin_principal_arns:
        session = _ASSUMED_ROLE.match(arn)
        if session:
            # What `aws sts get-caller-identity` shows for a role: the session, not the role.
            role = f"arn:{session['partition']}:iam::{session['account']}:role/{session['role']}"
            why = (
                f"an STS session of the role {role}, not a principal EKS can grant: list the "
                f"role's ARN, with its path if it has one (`{CLI_NAME} settings --add-admin-me` "
                "reads it from IAM)"
            )
            out.append(_problem("adminPrincipalArns", arn, why))
        elif not _PRINCIPAL.match(arn):
            why = "each entry must be an IAM role or user ARN, arn:aws:iam::<account>:role/<name>"
            out.append(_problem("adminPrincipalArns", arn, why))
        elif _SSO_ROLE_WITHOUT_PATH.search(arn):
            # IAM Identity Center user guide, "Referencing permission sets in resource
            # policies, Amazon EKS cluster configuration maps, and AWS KMS key policies".
            why = (
                "an IAM Identity Center role's ARN has the path aws-reserved/sso.amazonaws.com/ "
                "(then the Identity Center region, unless us-east-1); without it EKS refuses the "
                "access entry: the principal does not exist. `"
                f"{CLI_NAME} settings --add-admin-me` reads the full ARN"
            )
            out.append(_problem("adminPrincipalArns", arn, why))
    for cidr in c.endpoint_public_cidrs:
        net, why = _cidr(cidr, "203.0.113.7/32")
        if net is None:
            out.append(_problem("endpointPublicCidrs", cidr, why))
            continue
        if net.prefixlen < 8:
            why = "opens the Kubernetes API to the internet; give your own network, e.g. a /32"
            out.append(_problem("endpointPublicCidrs", cidr, why))
    vpc, why = _cidr(c.vpc_cidr, "10.0.0.0/16")
    if vpc is not None and (not 16 <= vpc.prefixlen <= 18 or not vpc.is_private):
        vpc = None
    if vpc is None and not why.startswith(HOST_BITS):
        why = "must be a private IPv4 CIDR from /16 to /18, e.g. 10.0.0.0/16"
    if vpc is None:
        out.append(_problem("vpcCidr", c.vpc_cidr, why))
    return out


HOST_BITS = "host bits are set"


def _cidr(text: str, example: str) -> tuple[ipaddress.IPv4Network | None, str]:
    """The network, or None and why not: host bits set is its own reason (the fix is the
    network address), everything else reads "not a CIDR"."""
    not_a_cidr = f"each entry must be an IPv4 CIDR such as {example}"
    if "/" not in text:
        return None, not_a_cidr
    try:
        return ipaddress.IPv4Network(text, strict=True), ""
    except ValueError:
        pass
    try:
        network = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        return None, not_a_cidr
    return None, f"{HOST_BITS}: the network of this CIDR is {network}"


def _cidr_problems(key: str, cidrs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(problems, the CIDRs that are open to the internet in effect)."""
    out: list[str] = []
    opened: list[str] = []
    for cidr in cidrs:
        net, why = _cidr(cidr, "10.20.0.0/16")
        if net is None:
            out.append(_problem(key, cidr, why))
            continue
        if net.prefixlen < OPEN_PREFIX_BELOW:
            opened.append(cidr)
    return out, opened


def _endpoint(c: AppConfig) -> list[str]:
    """The application endpoint's settings, and the combinations that would expose the model
    without authentication or that cannot deploy."""
    out: list[str] = []
    exposure, auth = c.endpoint_exposure, c.endpoint_auth
    if exposure not in ENDPOINT_EXPOSURES:
        why = (
            "must be none (no load balancer: reach the model with kubectl port-forward), "
            "internal (an ALB in private subnets of its own) or internet-facing (public subnets)"
        )
        return [_problem("endpointExposure", exposure, why)]
    if auth not in ENDPOINT_AUTHS:
        why = "must be jwt (the load balancer validates a bearer token) or none"
        return [_problem("endpointAuth", auth, why)]
    jwt_keys = (
        ("endpointJwtIssuer", c.endpoint_jwt_issuer),
        ("endpointJwksUri", c.endpoint_jwks_uri),
        ("endpointJwtAudience", c.endpoint_jwt_audience),
        ("endpointJwtScope", c.endpoint_jwt_scope),
    )
    audience_format = c.endpoint_jwt_audience_format
    if audience_format not in JWT_AUDIENCE_FORMATS:
        why = (
            "must be single-string (the token's aud is one string, as Cognito issues it) or "
            "string-array (aud is a JSON array, as Keycloak or Entra ID v1 issue it); aud is "
            "never space-separated (RFC 7519 section 4.1.3)"
        )
        out.append(_problem("endpointJwtAudienceFormat", audience_format, why))
    # Valid and away from its default, it belongs with endpointJwtAudience: refused where
    # that is (no exposure, no authentication, the stack's Cognito pool).
    moved = audience_format in JWT_AUDIENCE_FORMATS[1:]
    format_key = ("endpointJwtAudienceFormat", audience_format if moved else "")
    if exposure == "none":
        unused = (
            ("endpointAllowedCidrs", list(c.endpoint_allowed_cidrs)),
            ("endpointCertificateArn", c.endpoint_certificate_arn),
            ("endpointDomainName", c.endpoint_domain_name),
            *jwt_keys,
            format_key,
        )
        for key, value in unused:
            if value:
                why = (
                    "has no effect while endpointExposure is none: set "
                    "endpointExposure=internal (or internet-facing) too, or remove it"
                )
                out.append(_problem(key, value, why))
        return out

    cidr_problems, opened = _cidr_problems("endpointAllowedCidrs", c.endpoint_allowed_cidrs)
    out += cidr_problems
    count = len(c.endpoint_allowed_cidrs)
    if not count:
        example = (
            "203.0.113.0/24 (your clients' public addresses: an internet-facing load balancer "
            "sees no private ones)"
            if exposure == "internet-facing"
            else "10.0.0.0/8 (your VPC and peered networks)"
        )
        why = (
            f"endpointExposure={exposure} needs the CIDRs allowed to reach the load balancer, "
            f"e.g. {SETTINGS_SET} endpointAllowedCidrs={example}"
        )
        out.append(_problem("endpointAllowedCidrs", [], why))
    elif count > MAX_ENDPOINT_CIDRS:
        why = (
            f"{count} entries; at most {MAX_ENDPOINT_CIDRS} (one security-group rule each): "
            "summarise them into wider blocks"
        )
        out.append(_problem("endpointAllowedCidrs", list(c.endpoint_allowed_cidrs), why))
    if opened and (exposure != "internet-facing" or auth != "jwt"):
        why = (
            f"a range wider than /{OPEN_PREFIX_BELOW} is the internet in effect: only with "
            "endpointExposure=internet-facing and endpointAuth=jwt; otherwise list your networks"
        )
        out += [_problem("endpointAllowedCidrs", cidr, why) for cidr in opened]

    arn = c.endpoint_certificate_arn
    m = _CERTIFICATE_ARN.match(arn)
    if not arn:
        why = (
            f"endpointExposure={exposure} serves HTTPS only and needs an ACM certificate ARN "
            f"({CERTIFICATE_ARN_FORM}) for endpointDomainName"
        )
        out.append(_problem("endpointCertificateArn", arn, why))
    elif not m:
        why = f"must be an ACM certificate ARN, {CERTIFICATE_ARN_FORM}"
        out.append(_problem("endpointCertificateArn", arn, why))
    elif c.region and m["region"] != c.region:
        why = (
            f"the certificate is in {m['region']}, the load balancer in {c.region}: an ALB "
            f"uses certificates of its own region; request or import one in {c.region}"
        )
        out.append(_problem("endpointCertificateArn", arn, why))

    domain = c.endpoint_domain_name
    if domain and not _DOMAIN.match(domain):
        why = "must be a lowercase DNS name such as llm.example.com (no scheme, no port)"
        out.append(_problem("endpointDomainName", domain, why))

    if auth == "none":
        if exposure == "internet-facing":
            why = (
                "an internet-facing endpoint without authentication lets anyone spend your GPUs: "
                "use endpointAuth=jwt, or endpointExposure=internal"
            )
            out.append(_problem("endpointAuth", auth, why))
        for key, value in (*jwt_keys, format_key):
            if value:
                why = "is only used with endpointAuth=jwt: remove it, or set endpointAuth=jwt"
                out.append(_problem(key, value, why))
        return out

    issuer, jwks = c.endpoint_jwt_issuer, c.endpoint_jwks_uri
    for key, value in (("endpointJwtIssuer", issuer), ("endpointJwksUri", jwks)):
        if value and not _HTTPS_URL.match(value):
            why = "must be an https:// URL (no query or fragment)"
            out.append(_problem(key, value, why))
    if not issuer:
        for key, value in (*jwt_keys[1:], format_key):
            if value:
                why = (
                    "belongs to an existing identity provider: set endpointJwtIssuer too, or "
                    "remove it to use the Cognito user pool the stack creates"
                )
                out.append(_problem(key, value, why))
        return out
    if not jwks:
        why = (
            "an existing identity provider needs its JWKS URL too (the jwks_uri of its "
            "/.well-known/openid-configuration): settings --set endpointJwksUri=https://..."
        )
        out.append(_problem("endpointJwksUri", jwks, why))
    if not c.endpoint_jwt_audience and not c.endpoint_jwt_scope:
        why = (
            "with only the issuer checked, every token that issuer signs (for any application) "
            "would be accepted: set endpointJwtAudience and/or endpointJwtScope"
        )
        out.append(_problem("endpointJwtIssuer", issuer, why))
    if moved and not c.endpoint_jwt_audience:
        why = "only says how aud is carried: set endpointJwtAudience too, or remove it"
        out.append(_problem("endpointJwtAudienceFormat", audience_format, why))
    for key, value in jwt_keys[2:]:
        if len(value) > JWT_CLAIM_MAX:
            why = f"is {len(value)} characters; the load balancer checks at most {JWT_CLAIM_MAX}"
            out.append(_problem(key, value, why))
        elif value and re.search(r"\s", value):
            why = "must be one value without spaces (the token must carry exactly this value)"
            out.append(_problem(key, value, why))
    return out


def _endpoint_timeout(c: AppConfig) -> list[str]:
    t = c.endpoint_idle_timeout_seconds
    if MIN_IDLE_TIMEOUT_SECONDS <= t <= MAX_IDLE_TIMEOUT_SECONDS:
        return []
    why = (
        f"must be {MIN_IDLE_TIMEOUT_SECONDS}..{MAX_IDLE_TIMEOUT_SECONDS} seconds: streamed "
        "completions keep the connection open, and the ALB allows at most 4000"
    )
    return [_problem("endpointIdleTimeoutSeconds", t, why)]


def _endpoint_rate_limit(c: AppConfig) -> list[str]:
    limit = c.endpoint_rate_limit_per5_min
    if limit == 0 or WAF_RATE_LIMIT_MIN <= limit <= WAF_RATE_LIMIT_MAX:
        return []
    why = (
        f"must be 0 (no AWS WAF web ACL) or {WAF_RATE_LIMIT_MIN}..{WAF_RATE_LIMIT_MAX} requests "
        "per client IP per 5 minutes (AWS WAF's range for a rate-based rule)"
    )
    return [_problem("endpointRateLimitPer5Min", limit, why)]


def _teardown(c: AppConfig) -> list[str]:
    if c.log_retention_days in LOG_RETENTION_DAYS:
        return []
    why = f"must be a CloudWatch Logs retention: {', '.join(map(str, LOG_RETENTION_DAYS))}"
    return [_problem("logRetentionDays", c.log_retention_days, why)]


def _range(key: str, value: float, bounds: tuple[float, float], unit: str) -> list[str]:
    low, high = bounds
    if low <= value <= high:
        return []
    return [_problem(key, value, f"must be {low:g}..{high:g} {unit}")]


def _observability(c: AppConfig) -> list[str]:
    out = []
    if c.observability not in OBSERVABILITY:
        why = (
            "must be cloudwatch (CloudWatch add-on, PodMonitors, dashboard, alarms) or none "
            "(bring your own monitoring)"
        )
        out.append(_problem("observability", c.observability, why))
    m = _ADDON_VERSION.match(c.cloudwatch_addon_version)
    if not m:
        why = f"must be an EKS add-on version such as {CLOUDWATCH_ADDON_VERSION}"
        out.append(_problem("cloudwatchAddonVersion", c.cloudwatch_addon_version, why))
    elif int(m["major"]) < MIN_CLOUDWATCH_ADDON_MAJOR:
        why = (
            f"must be v{MIN_CLOUDWATCH_ADDON_MAJOR}.0.0 or newer: older add-ons do not scrape "
            f"PodMonitors; use {CLOUDWATCH_ADDON_VERSION}"
        )
        out.append(_problem("cloudwatchAddonVersion", c.cloudwatch_addon_version, why))
    if c.alarm_email and not _EMAIL.match(c.alarm_email):
        why = "must be an e-mail address such as oncall@example.com, or empty for no subscription"
        out.append(_problem("alarmEmail", c.alarm_email, why))
    out += _range("alarmTtftP95Seconds", c.alarm_ttft_p95_seconds, ALARM_TTFT_P95_SECONDS, "s")
    out += _range(
        "alarmInterTokenP95Seconds", c.alarm_inter_token_p95_seconds, ALARM_ITL_P95_SECONDS, "s"
    )
    out += _range("alarmErrorPercent", c.alarm_error_percent, ALARM_ERROR_PERCENT, "%")
    out += _range("alarmKvCachePercent", c.alarm_kv_cache_percent, ALARM_KV_CACHE_PERCENT, "%")
    return out


# Repository names of checkpoints quantized by another method than FP8 (Hugging Face naming).
_QUANTIZED_NAME = re.compile(
    r"(?:^|[-_.])(AWQ|GPTQ|GGUF|INT4|INT8|W4A16|W8A8|W4A8|NVFP4|MXFP4|bnb|EXL2)(?:$|[-_.])",
    re.IGNORECASE,
)


def _engine(c: AppConfig) -> list[str]:
    """The engine options: FP8 only where the GPU has FP8 tensor cores, a request router that
    has a deployment of several replicas to route between, Serve's graceful-shutdown bound."""
    out: list[str] = []
    if c.quantization not in QUANTIZATIONS:
        why = (
            "must be none (the checkpoint's weights at dtype) or fp8 (vLLM quantizes the "
            "weights to FP8 when loading: 1 byte per parameter)"
        )
        out.append(_problem("quantization", c.quantization, why))
    if c.kv_cache_dtype not in KV_CACHE_DTYPES:
        why = "must be auto (the KV cache at the model's dtype) or fp8 (half the bytes per token)"
        out.append(_problem("kvCacheDtype", c.kv_cache_dtype, why))
    facts = instance_types.gpu_facts(c.gpu_node_type)
    fp8_types = sorted(
        family for family, gpu in instance_types.GPU_FACTS_BY_FAMILY.items() if gpu.fp8
    )
    for key, value, off in (
        ("quantization", c.quantization, "none"),
        ("kvCacheDtype", c.kv_cache_dtype, "auto"),
    ):
        if value == "fp8" and facts is not None and not facts.fp8:
            why = (
                f"the {facts.model} GPU of {c.gpu_node_type} (compute capability "
                f"{facts.compute_capability}) has no FP8 tensor cores, which need 8.9 or newer "
                f"(L4, L40S, H100, H200, B200): use {key}={off}, or a GPU type of the "
                f"{', '.join(fp8_types)} families"
            )
            out.append(_problem(key, value, why))
    quantized = _QUANTIZED_NAME.search(c.model_source.rsplit("/", 1)[-1])
    if c.quantization == "fp8" and quantized:
        why = (
            f"{c.model_source} is already quantized ({quantized[1]}, by its name): vLLM 0.26 "
            "refuses a quantization argument that differs from the checkpoint's own "
            "(config/model.py, 'does not match the quantization method'): use quantization="
            "none, or the model's 16-bit checkpoint"
        )
        out.append(_problem("quantization", c.quantization, why))
    if c.request_router not in REQUEST_ROUTERS:
        why = (
            "must be power-of-two (Serve's default: the less loaded of two random replicas) "
            "or prefix-aware (Ray Serve LLM's PrefixCacheAffinityRouter)"
        )
        out.append(_problem("requestRouter", c.request_router, why))
    elif c.request_router == "prefix-aware" and not c.routed_deployments:
        # Only PD gets here: an aggregated app has prefillReplicas + decodeReplicas >= 2.
        why = (
            "has no effect: every engine deployment has one replica (prefillReplicas and "
            "decodeReplicas (or decodeMaxReplicas) are 1); the router chooses between "
            "replicas: raise the replicas, or use requestRouter=power-of-two"
        )
        out.append(_problem("requestRouter", c.request_router, why))
    if not 0 <= c.graceful_shutdown_seconds <= MAX_GRACEFUL_SHUTDOWN_SECONDS:
        why = (
            f"must be 0 (the longest answer: maxModelLen x alarmInterTokenP95Seconds, now "
            f"{c.longest_answer_seconds} s) or 1..{MAX_GRACEFUL_SHUTDOWN_SECONDS} seconds: a "
            "stopping replica holds up the Serve update that stops it, and a deploy waits at "
            "most an hour"
        )
        out.append(_problem("gracefulShutdownSeconds", c.graceful_shutdown_seconds, why))
    return out


# -- model and GPU fit ------------------------------------------------------------------------

# Bytes per weight for each dtype; "auto" keeps the checkpoint's, which for the models this
# serves is 16-bit (vLLM casts a float32 checkpoint to float16 under "auto" as well).
_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
_MOE_SIZE = re.compile(r"(?<![\w.])(\d+)x(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def params_billions_from_name(model_source: str) -> float | None:
    """The parameter count a Hugging Face repo name states (``Qwen/Qwen3.5-9B`` -> 9,
    ``mistralai/Mixtral-8x7B-v0.1`` -> 56, an upper bound), or None when it states none."""
    name = model_source.rsplit("/", 1)[-1].replace("_", "-")
    for token in re.split(r"-", name):
        if m := _MOE_SIZE.fullmatch(token):
            return int(m[1]) * float(m[2])
        if m := _SIZE.fullmatch(token):
            return float(m[1])
    return None


def _model_fit(c: AppConfig) -> list[str]:
    """The model's weights must fit the GPUs of one replica at the configured dtype (1 byte
    per parameter with ``quantization=fp8``): params x bytes per weight <= tensorParallelSize
    x GPU memory x gpuMemoryUtilization (vLLM also needs room for the KV cache and
    activations; this is the floor). Whether CUDA graphs fit beside them is an estimate
    (:func:`memory_estimate`), which the ``settings`` command prints: it refuses nothing."""
    facts = instance_types.gpu_facts(c.gpu_node_type)
    out = []
    stated = c.model_params_billions
    if not 0 <= stated <= MAX_MODEL_PARAMS_BILLIONS:
        why = f"must be 0 (read it from modelSource's name) .. {MAX_MODEL_PARAMS_BILLIONS}"
        out.append(_problem("modelParamsBillions", stated, why))
    if facts is None or c.dtype not in _DTYPE_BYTES or not 0 < c.gpu_memory_utilization <= 1:
        return out  # reported by their own checks
    if c.dtype == "bfloat16" and not facts.bf16:
        why = (
            f"the {facts.model} GPU of {c.gpu_node_type} has no bfloat16 (it needs compute "
            "capability 8.0, and vLLM refuses it below): use dtype=float16, or a GPU type "
            "from g5 up"
        )
        out.append(_problem("dtype", c.dtype, why))
    params = stated or params_billions_from_name(c.model_source)
    tp = c.tensor_parallel_size
    if not params or tp < 1 or not 0 <= stated <= MAX_MODEL_PARAMS_BILLIONS:
        return out  # unknown size, or reported by their own checks
    estimate = memory_estimate(c)
    assert estimate is not None  # the GPU and the size are known here
    weights_gib, room_gib = estimate.weights_gib, estimate.room_gib
    if weights_gib > room_gib:
        source = "modelParamsBillions" if stated else f"{params:g}B from the model's name"
        why = (
            f"{params:g} billion parameters ({source}) in {estimate.weights_format} need "
            f"{weights_gib:.1f} GiB "
            f"for the weights alone, more than one replica's GPUs hold: {tp} x "
            f"{facts.model} {facts.memory_gib:g} GiB x gpuMemoryUtilization "
            f"{c.gpu_memory_utilization:g} = {room_gib:.1f} GiB. Use a GPU type with more "
            "memory, more GPUs per replica (tensorParallelSize), or a smaller model"
        )
        key = "modelParamsBillions" if stated else "modelSource"
        value: Any = stated if stated else c.model_source
        share, default_share = c.gpu_memory_utilization, AppConfig.gpu_memory_utilization
        if share < default_share and weights_gib <= room_gib / share * default_share:
            # The weights fit the default share: the lowered share is what no longer fits.
            key, value = "gpuMemoryUtilization", share
        out.append(_problem(key, value, why))
    elif estimate.kv_gib > 0:
        fits = kv_tokens(c, estimate, KV_BYTES_PER_TOKEN_PER_B_FLOOR)
        if c.max_model_len > fits:
            why = (
                f"one sequence of {c.max_model_len} tokens does not fit the KV cache the "
                f"settings leave: about {estimate.kv_gib:.1f} GiB on {estimate.gpu} "
                f"(docs/settings.md, Model and GPU fit) holds at most about {fits} tokens of a "
                f"{params:g}B model even at {KV_BYTES_PER_TOKEN_PER_B_FLOOR // 1024} KiB per "
                "token per billion parameters (below any known model's); vLLM would refuse "
                "to start. Lower maxModelLen, use kvCacheDtype=fp8, more GPU memory "
                "(gpuMemoryUtilization, tensorParallelSize, a larger GPU) or a smaller model"
            )
            out.append(_problem("maxModelLen", c.max_model_len, why))
    return out


# KV cache per token, per billion parameters, in bytes at 16 bits. FLOOR: below every model
# family this app serves (MoE and hybrid-attention models store the least: Qwen3-30B-A3B 96 KiB
# per token, 3.1 KiB per billion parameters; DeepSeek-V2-Lite's latent attention 1.9), so a
# maxModelLen refused at it cannot fit. TYPICAL: dense models with grouped-query attention
# (Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB, 16 KiB per
# billion; Qwen3-8B 18): above it, the settings warn that the length may not fit.
KV_BYTES_PER_TOKEN_PER_B_FLOOR = 1024
KV_BYTES_PER_TOKEN_PER_B_TYPICAL = 16 * 1024


def kv_tokens(c: AppConfig, estimate: MemoryEstimate, per_b_16bit: int) -> int:
    """Tokens the estimated KV cache holds at ``per_b_16bit`` bytes per token per billion
    parameters (halved with kvCacheDtype=fp8, doubled in float32)."""
    params = c.model_params_billions or params_billions_from_name(c.model_source) or 0
    element = 1 if c.kv_cache_dtype == "fp8" else _DTYPE_BYTES.get(c.dtype, 2)
    per_token = params * per_b_16bit * element / 2
    return int(max(estimate.kv_gib, 0) * 2**30 / per_token) if per_token else 0


# -- the engine's memory, estimated (docs/settings.md, "Model and GPU fit") --------------------

# Per GPU, in GiB: what vLLM 0.26 keeps besides the weights and the KV cache. Rough values
# from vLLM's own start-up logs for 7-14B models; the engine measures both when it starts
# (v1/worker/gpu_worker.py: a profiling run for the activation peak, then, since 0.21, an
# estimate of the CUDA-graph pool, taken off the KV cache before it is allocated). They
# vary with the model, max_num_batched_tokens and the capture sizes: an estimate, not a bound.
ACTIVATION_GIB = 1.5  # the profiling run's activation peak, CUDA context and NCCL buffers
CUDA_GRAPH_GIB = 1.0  # the captured graphs' memory pool at vLLM's default capture sizes
MIN_KV_GIB = 1.0  # below this left for the KV cache, CUDA graphs are "tight"


@dataclass(frozen=True)
class MemoryEstimate:
    """Where one engine replica's GPU memory goes, per the fit check's arithmetic."""

    gpu: str
    room_gib: float  # tensorParallelSize x GPU memory x gpuMemoryUtilization
    weights_gib: float
    weights_format: str  # "bfloat16", "FP8", ...
    kv_eager_gib: float  # left for the KV cache without CUDA graphs
    kv_graphs_gib: float  # left with them
    kv_dtype: str
    enforce_eager: bool

    @property
    def kv_gib(self) -> float:
        """What is left for the KV cache in the engine's mode (with CUDA graphs unless
        enforceEager)."""
        return self.kv_eager_gib if self.enforce_eager else self.kv_graphs_gib

    @property
    def verdict(self) -> str:
        """Whether CUDA graphs fit: ``fit``, ``tight`` (under :data:`MIN_KV_GIB` of KV cache
        left) or ``no room`` (the graphs' pool alone does not fit)."""
        if self.kv_graphs_gib < 0:
            return "no room"
        return "tight" if self.kv_graphs_gib < MIN_KV_GIB else "fit"

    def summary(self) -> str:
        graphs = {
            "fit": "CUDA graphs fit",
            "tight": "CUDA graphs fit, tightly",
            "no room": "CUDA graphs do not fit",
        }[self.verdict]
        mode = "enforceEager=true (no graphs)" if self.enforce_eager else "CUDA graphs on"
        return (
            f"{self.gpu}: {self.room_gib:.1f} GiB for vLLM, weights {self.weights_gib:.1f} GiB "
            f"({self.weights_format}), about {ACTIVATION_GIB:g} GiB of activations; KV cache "
            f"({self.kv_dtype}) about {max(self.kv_eager_gib, 0):.1f} GiB in eager mode, "
            f"{max(self.kv_graphs_gib, 0):.1f} GiB with CUDA graphs (about {CUDA_GRAPH_GIB:g} "
            f"GiB per GPU): {graphs} (estimate; now {mode})"
        )


def memory_estimate(c: AppConfig) -> MemoryEstimate | None:
    """The fit check's estimate for one engine replica, or None when the GPU type or the
    model's size is unknown. Weights: parameters x bytes per weight (1 with
    ``quantization=fp8``, else ``dtype``'s)."""
    facts = instance_types.gpu_facts(c.gpu_node_type)
    params = c.model_params_billions or params_billions_from_name(c.model_source)
    tp = c.tensor_parallel_size
    if facts is None or not params or tp < 1 or c.dtype not in _DTYPE_BYTES:
        return None
    fp8 = c.quantization == "fp8"
    weights_gib = params * 1e9 * (1 if fp8 else _DTYPE_BYTES[c.dtype]) / 2**30
    room_gib = tp * facts.memory_gib * c.gpu_memory_utilization
    kv_eager = room_gib - weights_gib - tp * ACTIVATION_GIB
    return MemoryEstimate(
        gpu=f"{tp} x {facts.model}" if tp > 1 else facts.model,
        room_gib=room_gib,
        weights_gib=weights_gib,
        weights_format="FP8" if fp8 else c.dtype,
        kv_eager_gib=kv_eager,
        kv_graphs_gib=kv_eager - tp * CUDA_GRAPH_GIB,
        kv_dtype="FP8" if c.kv_cache_dtype == "fp8" else "the model's dtype",
        enforce_eager=c.enforce_eager,
    )


_CHECKS.extend(
    [
        _environment,
        _kubernetes,
        _names,
        _model_source,
        _gpu_nodes,
        _scaling,
        _gpu_storage,
        _capacity,
        _model_access,
        _model_revision,
        _gpu_az,
        _system_nodes,
        _software,
        _serving,
        _engine,
        _access,
        _endpoint,
        _endpoint_timeout,
        _endpoint_rate_limit,
        _teardown,
        _observability,
        _model_fit,
    ]
)

DEFAULTS = AppConfig()
__all__ = ["DEFAULTS", "AppConfig", "ConfigError"]


# -- settings that deploy but deserve a loud word --------------------------------------------


def idle_gpus_warning(c: AppConfig) -> str | None:
    """A GPU node holds one engine replica, which uses ``tensorParallelSize`` of its GPUs: on a
    type with more GPUs the rest sit idle, billed all the same (14 of 16 H100s with two
    p5.48xlarge at the default of 1). None when every GPU serves."""
    spec = instance_types.gpu_spec(c.gpu_node_type)
    tp = c.tensor_parallel_size
    if spec is None or tp < 1 or spec.gpus <= tp:
        return None
    idle = spec.gpus - tp
    nodes = c.gpu_node_count
    smaller = sorted(
        name
        for name, s in instance_types.EFA_GPU_TYPES.items()
        if s.gpus == tp and s.gpu_model == spec.gpu_model
    )
    other = (
        f", or a type with {tp} {spec.gpu_model} GPU(s): {', '.join(smaller)}" if smaller else ""
    )
    return (
        f"tensorParallelSize={tp} on gpuNodeType={c.gpu_node_type} uses {tp} of each node's "
        f"{spec.gpus} GPUs: {idle} GPU(s) idle per GPU node, {idle * nodes} of "
        f"{spec.gpus * nodes} across gpuNodeCount={nodes}, billed all the same (each engine "
        f"replica has a GPU node of its own). Use them with "
        f"{set_hint('tensorParallelSize', str(spec.gpus))}{other}"
    )


def model_fit_warning(c: AppConfig) -> str | None:
    """The fit check cannot speak (no size known), or its estimate leaves no room for the KV
    cache, or a sequence of maxModelLen likely does not fit it: the deploy would then wait out
    the readiness timeout while vLLM refuses to start."""
    if instance_types.gpu_facts(c.gpu_node_type) is None or c.dtype not in _DTYPE_BYTES:
        return None
    if not (c.model_params_billions or params_billions_from_name(c.model_source)):
        return (
            f"modelSource {c.model_source} states no size in its name and modelParamsBillions "
            "is 0, so nothing checks that the model and a sequence of maxModelLen fit the "
            f"GPUs: state it with {set_hint('modelParamsBillions', '<billions>')}"
        )
    estimate = memory_estimate(c)
    if estimate is None or estimate.weights_gib > estimate.room_gib:
        return None  # refused by the fit check
    if estimate.kv_gib <= 0:
        return (
            f"by the estimate nothing is left for the KV cache on {estimate.gpu} "
            f"({estimate.summary()}); vLLM may refuse to start: raise gpuMemoryUtilization "
            "or tensorParallelSize, or use quantization=fp8 or a larger GPU"
        )
    likely = kv_tokens(c, estimate, KV_BYTES_PER_TOKEN_PER_B_TYPICAL)
    if c.max_model_len > likely:
        return (
            f"maxModelLen={c.max_model_len} may not fit the KV cache: about "
            f"{estimate.kv_gib:.1f} GiB left on {estimate.gpu} holds about {likely} tokens of "
            f"a dense {estimate.weights_format} model of this size "
            f"({KV_BYTES_PER_TOKEN_PER_B_TYPICAL // 1024} KiB per token per billion "
            "parameters); vLLM refuses to start when one sequence does not fit. Check the "
            "model's KV size, or lower maxModelLen"
        )
    return None


def config_warnings(c: AppConfig) -> list[tuple[str, str]]:
    """(id, text) of each setting that deploys but likely wastes money: the synth warns with
    them (``ray-pd-eks:<id>``) and ``ray-pd-eks settings`` prints them."""
    found = [("idleGpus", idle_gpus_warning(c)), ("modelFit", model_fit_warning(c))]
    return [(wid, text) for wid, text in found if text]
