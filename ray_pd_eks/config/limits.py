"""What each setting may be and what it defaults to: the allowed choices, the numeric limits
that AWS, Kubernetes, Ray and vLLM set, the pinned versions and images, and the forms values
must take. Plain data: the settings (:mod:`ray_pd_eks.config.settings`), the rules
(``rules_*``) and the constructs read it; it imports nothing of the app but the data modules
the pins come from.
"""

from __future__ import annotations

import re

from ray_pd_eks.dlc_images import DLC_DEFAULT_ACCOUNT

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

# gpuMemoryUtilization's default: the share of each GPU's memory vLLM may take. The fit check
# tells a lowered share that no longer fits from a model too large for the default.
GPU_MEMORY_UTILIZATION = 0.90

# The forms of values more than one rule reads.
ACCOUNT_RE = re.compile(r"^\d{12}$")
MODEL_SOURCE_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
S3_URI_RE = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>[\w!\-.*'()/]+?)/?$"
)


def derive_model_id(model_source: str) -> str:
    """The id clients use for a model when ``modelId`` is empty: the source's name, lowercased
    (``Qwen/Qwen3.5-9B`` -> ``qwen3.5-9b``, the walkthrough's id)."""
    return model_source.rstrip("/").rsplit("/", 1)[-1].lower()
