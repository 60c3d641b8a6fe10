"""Rules of the model and its engines: where the weights come from (a Hugging Face repository
at a pinned revision, or staged in S3) and who may read them, the serving mode and its limits,
and the engine options (dtype, FP8, the request router, Serve's graceful shutdown).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ray_pd_eks import instance_types
from ray_pd_eks.config.limits import (
    ACCOUNT_RE,
    DTYPES,
    KV_BACKENDS,
    KV_CACHE_DTYPES,
    MAX_GRACEFUL_SHUTDOWN_SECONDS,
    MAX_KV_PROBE_MINUTES,
    MAX_RAY_CLUSTER_REVISION,
    MAX_READINESS_MINUTES,
    MIN_KV_PROBE_MINUTES,
    MIN_MODEL_LEN,
    MIN_READINESS_MINUTES,
    MODEL_REVISION,
    MODEL_REVISION_MAX,
    MODEL_SOURCE,
    MODEL_SOURCE_RE,
    QUANTIZATIONS,
    REQUEST_ROUTERS,
    S3_URI_RE,
    SERVING_MODES,
)
from ray_pd_eks.config.problems import SETTINGS_SET, Bounds, Form, OneOf, check, problem

if TYPE_CHECKING:
    from ray_pd_eks.config.settings import AppConfig

_MODEL_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]*$")
_SECRET_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"secret:(?P<name>[A-Za-z0-9/_+=.@-]{1,512})$"
)
# Repository names of checkpoints quantized by another method than FP8 (Hugging Face naming).
_QUANTIZED_NAME = re.compile(
    r"(?:^|[-_.])(AWQ|GPTQ|GGUF|INT4|INT8|W4A16|W8A8|W4A8|NVFP4|MXFP4|bnb|EXL2)(?:$|[-_.])",
    re.IGNORECASE,
)

_STAGED_MODEL = (
    Form(
        "modelS3BucketOwner",
        ACCOUNT_RE,
        "must be the 12-digit AWS account id that owns modelS3Uri's bucket, or empty"
        " (= the deploy account)",
    ),
    Form(
        "modelS3Uri",
        S3_URI_RE,
        "must be s3://<bucket>/<prefix> (the folder holding config.json and the weights)",
    ),
)
_MAX_MODEL_LEN = Bounds(
    "maxModelLen",
    MIN_MODEL_LEN,
    1_048_576,
    f"must be {MIN_MODEL_LEN}..1048576 tokens: the readiness check's KV integrity probe "
    "sends a prompt of up to 3500 tokens (over a hundred KV blocks) and takes a "
    "48-token answer",
)
_DTYPE = OneOf("dtype", DTYPES, f"must be one of {', '.join(DTYPES)}")
_KV_BACKEND = OneOf(
    "kvBackend", KV_BACKENDS, "must be LIBFABRIC (EFA) or UCX (TCP fallback, for comparison)"
)
_SERVING_MODE = OneOf(
    "servingMode",
    SERVING_MODES,
    "must be pd (prefill and decode on separate GPU nodes, KV cache over NIXL) or "
    "aggregated (the same GPUs serving both phases, the baseline to compare with)",
)
_SERVING_TIMES = (
    Bounds(
        "readinessTimeoutMinutes",
        MIN_READINESS_MINUTES,
        MAX_READINESS_MINUTES,
        f"must be {MIN_READINESS_MINUTES}..{MAX_READINESS_MINUTES}: CloudFormation fails a "
        "custom resource after one hour, and the check must end with its own reason, "
        "after its last poll (up to 5 minutes), before that",
    ),
    Bounds(
        "kvProbeIntervalMinutes",
        MIN_KV_PROBE_MINUTES,
        MAX_KV_PROBE_MINUTES,
        f"must be 0 (off) or {MIN_KV_PROBE_MINUTES}..{MAX_KV_PROBE_MINUTES} minutes: each "
        "probe is a ~2,500-token request to the model, and one probe may take up to 2 "
        "minutes",
        zero_ok=True,
    ),
    Bounds(
        "rayClusterRevision",
        0,
        MAX_RAY_CLUSTER_REVISION,
        f"must be a whole number 0..{MAX_RAY_CLUSTER_REVISION}; raise it by one to make "
        "the next deploy recreate the Ray cluster",
    ),
)
_ENGINE_FORMATS = (
    OneOf(
        "quantization",
        QUANTIZATIONS,
        "must be none (the checkpoint's weights at dtype) or fp8 (vLLM quantizes the "
        "weights to FP8 when loading: 1 byte per parameter)",
    ),
    OneOf(
        "kvCacheDtype",
        KV_CACHE_DTYPES,
        "must be auto (the KV cache at the model's dtype) or fp8 (half the bytes per token)",
    ),
)
_REQUEST_ROUTER = OneOf(
    "requestRouter",
    REQUEST_ROUTERS,
    "must be power-of-two (Serve's default: the less loaded of two random replicas) "
    "or prefix-aware (Ray Serve LLM's PrefixCacheAffinityRouter)",
)


def model_source(c: AppConfig) -> list[str]:
    if MODEL_SOURCE_RE.match(c.model_source):
        return []
    if c.model_source.startswith("s3://"):
        why = (
            "Ray 2.58 cannot stream weights from S3 (fixed in Ray 2.59); set "
            "modelS3Uri to stage them onto the GPU nodes' NVMe, and keep modelSource a "
            "Hugging Face repo 'org/name'"
        )
    else:
        why = "must be a Hugging Face repo 'org/name' (for S3, set modelS3Uri)"
    return [problem("modelSource", c.model_source, why)]


def is_hf_revision(rev: str) -> bool:
    """A Hugging Face revision as ``modelRevision`` accepts it: a commit, a tag or a branch."""
    return bool(_MODEL_REVISION.match(rev)) and len(rev) <= MODEL_REVISION_MAX


def model_revision(c: AppConfig) -> list[str]:
    rev = c.model_revision
    if is_hf_revision(rev):
        return _revision_of_another_model(c)
    why = (
        f"must be a Hugging Face revision of at most {MODEL_REVISION_MAX} characters: a "
        "40-hex commit (recommended: what serves can then not change under you), a tag or a "
        "branch (letters, digits, '.', '_', '-', '/')"
    )
    return [problem("modelRevision", rev, why)]


def _revision_of_another_model(c: AppConfig) -> list[str]:
    """The default revision is a commit of the default model: another repository has no such
    commit, so its prefetch and both engines would fail and the deploy would wait out the
    readiness timeout with the GPU nodes billing. Staged weights (modelS3Uri) use no revision."""
    if c.model_revision != MODEL_REVISION or c.model_source == MODEL_SOURCE or c.model_s3_uri:
        return []
    if not MODEL_SOURCE_RE.match(c.model_source):
        return []  # modelSource's own line says what to fix
    why = (
        f"is the commit of {MODEL_SOURCE} (the default modelSource), but modelSource is "
        f"{c.model_source}, which has no such commit: set modelRevision with modelSource, to a "
        f"commit of {c.model_source} (its Hugging Face page, 'Files and versions', the "
        f"history), e.g. `{SETTINGS_SET} modelSource={c.model_source} "
        "--set modelRevision='<commit>'`; a tag or branch (main) serves whatever it points to"
    )
    return [problem("modelRevision", c.model_revision, why)]


def model_access(c: AppConfig) -> list[str]:
    out = check(_STAGED_MODEL, c)
    arn = c.hf_token_secret_arn
    m = _SECRET_ARN.match(arn)
    if arn and not m:
        why = (
            "must be a Secrets Manager secret ARN, "
            "arn:aws:secretsmanager:<region>:<account>:secret:<name>-<suffix>"
        )
        out.append(problem("hfTokenSecretArn", arn, why))
    elif m and c.region and m["region"] != c.region:
        why = f"the secret is in {m['region']}, the deployment in {c.region}: use one in {c.region}"
        out.append(problem("hfTokenSecretArn", arn, why))
    if c.model_s3_uri and arn:
        why = (
            "staged weights load offline from the node's copy, so no Hugging Face token is used; "
            "set only one of modelS3Uri and hfTokenSecretArn"
        )
        out.append(problem("hfTokenSecretArn", arn, why))
    return out


def serving(c: AppConfig) -> list[str]:
    out = check((_MAX_MODEL_LEN, _DTYPE), c)
    if not 0 < c.gpu_memory_utilization <= 1:
        why = "must be a fraction in (0, 1], e.g. 0.90"
        out.append(problem("gpuMemoryUtilization", c.gpu_memory_utilization, why))
    out += _KV_BACKEND(c)
    if mode := _SERVING_MODE(c):
        out += mode
    elif c.serving_mode == "aggregated" and c.kv_backend == "UCX":
        why = (
            "an aggregated app moves no KV cache, so kvBackend has no effect; leave it at "
            "LIBFABRIC or use servingMode=pd to compare backends"
        )
        out.append(problem("kvBackend", c.kv_backend, why))
    return out + check(_SERVING_TIMES, c)


def engine(c: AppConfig) -> list[str]:
    """The engine options: FP8 only where the GPU has FP8 tensor cores, a request router that
    has a deployment of several replicas to route between, Serve's graceful-shutdown bound."""
    out = check(_ENGINE_FORMATS, c)
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
            out.append(problem(key, value, why))
    quantized = _QUANTIZED_NAME.search(c.model_source.rsplit("/", 1)[-1])
    if c.quantization == "fp8" and quantized:
        why = (
            f"{c.model_source} is already quantized ({quantized[1]}, by its name): vLLM 0.26 "
            "refuses a quantization argument that differs from the checkpoint's own "
            "(config/model.py, 'does not match the quantization method'): use quantization="
            "none, or the model's 16-bit checkpoint"
        )
        out.append(problem("quantization", c.quantization, why))
    if router := _REQUEST_ROUTER(c):
        out += router
    elif c.request_router == "prefix-aware" and not c.routed_deployments:
        # Only PD gets here: an aggregated app has prefillReplicas + decodeReplicas >= 2.
        why = (
            "has no effect: every engine deployment has one replica (prefillReplicas and "
            "decodeReplicas (or decodeMaxReplicas) are 1); the router chooses between "
            "replicas: raise the replicas, or use requestRouter=power-of-two"
        )
        out.append(problem("requestRouter", c.request_router, why))
    if not 0 <= c.graceful_shutdown_seconds <= MAX_GRACEFUL_SHUTDOWN_SECONDS:
        why = (
            f"must be 0 (the longest answer: maxModelLen x alarmInterTokenP95Seconds, now "
            f"{c.longest_answer_seconds} s) or 1..{MAX_GRACEFUL_SHUTDOWN_SECONDS} seconds: a "
            "stopping replica holds up the Serve update that stops it, and a deploy waits at "
            "most an hour"
        )
        out.append(problem("gracefulShutdownSeconds", c.graceful_shutdown_seconds, why))
    return out
