"""The per-model KV floor's source: KV bytes per prompt token for the models whose shape is
known (ray_pd_eks/kv_shapes.py), read by the readiness check as ``KvBytesPerToken``."""

from __future__ import annotations

import pytest

from ray_pd_eks.config import DEFAULTS
from ray_pd_eks.kv_shapes import KV_SHAPES, kv_bytes_per_token


@pytest.mark.parametrize(
    ("dtype", "kv_cache_dtype", "expected"),
    [
        ("bfloat16", "auto", 8 * 4 * 256 * 2 * 2),  # only the 8 full-attention layers
        ("bfloat16", "fp8", 8 * 4 * 256 * 2 * 1),
        ("float32", "auto", 8 * 4 * 256 * 2 * 4),
        ("auto", "auto", 8 * 4 * 256 * 2 * 2),
    ],
)
def test_the_default_models_kv_bytes_per_token(
    dtype: str, kv_cache_dtype: str, expected: int
) -> None:
    assert DEFAULTS.model_source == "Qwen/Qwen3.5-9B"
    assert kv_bytes_per_token("Qwen/Qwen3.5-9B", dtype, kv_cache_dtype) == expected


def test_an_unknown_model_or_dtype_has_no_figure() -> None:
    """0: the check keeps its generic floor rather than guess a shape."""
    assert kv_bytes_per_token("mistralai/Mistral-7B-v0.1", "bfloat16", "auto") == 0
    assert kv_bytes_per_token("Qwen/Qwen3.5-9B", "int4", "auto") == 0


def test_every_shape_is_positive() -> None:
    for name, shape in KV_SHAPES.items():
        assert min(shape.kv_layers, shape.kv_heads, shape.head_dim) > 0, name
