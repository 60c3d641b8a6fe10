"""Whether the model fits the GPUs: the rule that refuses weights (or one sequence's KV cache)
that cannot fit one engine replica, the memory estimate behind it (docs/settings.md, "Model
and GPU fit"), and the warnings for settings that deploy but likely waste money or fail to
start (``ray-pd-eks settings`` prints them, the synth warns with them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_pd_eks import instance_types
from ray_pd_eks.config.limits import GPU_MEMORY_UTILIZATION, MAX_MODEL_PARAMS_BILLIONS
from ray_pd_eks.config.problems import problem, set_hint

if TYPE_CHECKING:
    from ray_pd_eks.config.settings import AppConfig

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


def model_fit(c: AppConfig) -> list[str]:
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
        out.append(problem("modelParamsBillions", stated, why))
    if facts is None or c.dtype not in _DTYPE_BYTES or not 0 < c.gpu_memory_utilization <= 1:
        return out  # reported by their own checks
    if c.dtype == "bfloat16" and not facts.bf16:
        why = (
            f"the {facts.model} GPU of {c.gpu_node_type} has no bfloat16 (it needs compute "
            "capability 8.0, and vLLM refuses it below): use dtype=float16, or a GPU type "
            "from g5 up"
        )
        out.append(problem("dtype", c.dtype, why))
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
        share, default_share = c.gpu_memory_utilization, GPU_MEMORY_UTILIZATION
        if share < default_share and weights_gib <= room_gib / share * default_share:
            # The weights fit the default share: the lowered share is what no longer fits.
            key, value = "gpuMemoryUtilization", share
        out.append(problem(key, value, why))
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
            out.append(problem("maxModelLen", c.max_model_len, why))
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
