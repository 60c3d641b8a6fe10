"""The bench sweep the tests start from: what ``bench`` plans for the default settings at one
level of concurrency (``ray_pd_eks/cli/bench.py``: its default lengths, seed and prompts).
A test changes only the fields it is about: ``dataclasses.replace(SWEEP, label="it's")``."""

from __future__ import annotations

from ray_pd_eks.bench.job import Sweep, prompts_per_level
from ray_pd_eks.config import DEFAULTS

SWEEP = Sweep(
    base_url=f"http://{DEFAULTS.ray_service_name}-serve-svc.{DEFAULTS.namespace}:8000",
    model=DEFAULTS.model_id,
    tokenizer=DEFAULTS.model_source,
    tokenizer_revision=DEFAULTS.model_revision,
    concurrency=(1,),
    prompts=prompts_per_level((1,), None),
    input_len=3000,
    output_len=150,
    seed=0,
    label="pd",
)
