"""The KV-cache shape of the models whose shape this project knows, and the bytes one prompt
token's KV cache takes: the readiness check's per-model byte floor (``KvBytesPerToken``,
``assets/lambda/readiness/kvproof.py`` ``transfer_verdict``).

Per token, an attention layer that keeps KV stores K and V for each KV head:
``KV heads x head dim x 2 x bytes per element``. A hybrid model keeps KV only in its
full-attention layers; its linear-attention (Gated DeltaNet) layers keep a fixed-size state
per request instead, which adds nothing per token, so the floor leaves it out.

A model outside the table gets 0: the check then falls back to its generic floor
(``kvproof.MIN_KV_BYTES_PER_TOKEN``). The shapes are not read from the Hub at synth (synth is
offline); each row names the source it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KvShape:
    """The layers that keep a KV cache, and the KV heads and head dim of each."""

    kv_layers: int
    kv_heads: int
    head_dim: int


# modelSource -> shape. Read from vLLM 0.26.0's config classes, whose defaults are these
# models' shapes: vllm/transformers_utils/configs/qwen3_5.py ``Qwen3_5TextConfig`` (32
# layers, every 4th full attention (``full_attention_interval`` 4): 8; 4 KV heads of 256) and
# qwen3_next.py ``Qwen3NextConfig`` ("similar to Qwen3-Next-80B-A3B-Instruct": 48 layers, 12
# full attention, 2 KV heads of 256).
KV_SHAPES: dict[str, KvShape] = {
    "Qwen/Qwen3.5-9B": KvShape(kv_layers=8, kv_heads=4, head_dim=256),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": KvShape(kv_layers=12, kv_heads=2, head_dim=256),
}

# Bytes of one KV element: kvCacheDtype fp8 stores 1; "auto" stores the model dtype's.
_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


def kv_bytes_per_token(model_source: str, dtype: str, kv_cache_dtype: str) -> int:
    """KV bytes one prompt token takes in ``model_source`` at this dtype and KV cache dtype:
    ``kv_layers x kv_heads x head_dim x 2 (K and V) x bytes``; 0 when the shape is unknown.
    Summed over tensor-parallel ranks (each holds its share of the heads), as the check sums
    the decode engines' transfers."""
    shape = KV_SHAPES.get(model_source)
    if shape is None or dtype not in _DTYPE_BYTES:
        return 0
    element = 1 if kv_cache_dtype == "fp8" else _DTYPE_BYTES[dtype]
    return shape.kv_layers * shape.kv_heads * shape.head_dim * 2 * element
