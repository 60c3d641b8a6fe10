"""The KV-cache proof: an integrity probe, the decode engines' NIXL counters, and the verdict.

Pure functions (text and numbers in, frozen dataclasses out, no I/O), shared by the readiness
Lambda, the scheduled KV probe and the project CLI's ``smoke``, ``efa-check`` and ``drill``, so a
verdict printed to a person and the one that fails a deploy come from the same code.

What a pass proves, and what it relies on upstream:

* **Integrity.** The probe prompt is longer than several KV blocks (at least
  ``PROBE_MIN_PROMPT_TOKENS`` tokens; vLLM's default block is 16 tokens) and carries a random
  code of letters and digits only in its first line. The prompt asks, at temperature 0, for that
  code. In P/D, decode computes nothing of the prompt: it answers from the KV cache it pulled
  from prefill, so wrong or stale KV cannot reproduce the code, however fluent the answer.
  Because the code is random and sits in the first block, no earlier request's cached prefix
  covers more than that first block, and decode must pull (almost) all of the prompt's blocks.
* **Transfer counters.** vLLM 0.26's NIXL connector records, per successful transfer, its
  duration and ``totalBytes`` (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py``:
  ``NixlKVConnectorStats.record_transfer``), and exports them as the histograms
  ``vllm:nixl_xfer_time_seconds`` and ``vllm:nixl_bytes_transferred`` (bytes) and the counter
  ``vllm:nixl_num_failed_transfers``; Ray 2.58 re-exports them on the worker's metrics port as
  ``ray_vllm_nixl_xfer_time_seconds_count``, ``ray_vllm_nixl_bytes_transferred_bucket`` and
  ``ray_vllm_nixl_num_failed_transfers_total`` (see ``ray_pd_eks/metrics.py``). Decode pulls
  (it is the side that records transfers), so the proof reads the decode engines' pods. The
  bytes are bounded from the histogram's exact bucket counts, not its ``_sum``, which Ray
  rebuilds from bucket midpoints (``moved_bytes_bounds``), against a floor from the model's
  own KV bytes per token where its shape is known (``ray_pd_eks/kv_shapes.py``).
* **Provider.** NIXL 1.3's LIBFABRIC plugin picks libfabric's provider itself: ``efa`` when
  ``fi_getinfo`` lists an EFA device, else ``tcp`` or ``sockets`` (``getAvailableNetworkDevices``
  in ``src/utils/libfabric/libfabric_common.cpp``), and logs either ``Discovered <n> EFA
  devices`` or ``Discovered <n> tcp devices (TCP fallback)``
  (``nixlLibfabricTopology::discoverProviderWithDevices`` in ``libfabric_topology.cpp``) on the
  engine worker's stderr. That line is ``NIXL_INFO`` (absl ``LOG(INFO)``) and NIXL's default
  C++ level is WARN (``src/utils/common/nixl_log.cpp``, ``kDefaultLogLevel``; the 1.3.1
  wheel's ``libnixl_common.so`` reads ``NIXL_LOG_LEVEL``), so it appears only because the EFA
  workers set ``NIXL_LOG_LEVEL=INFO`` (``pd_constructs/serving/workload.py`` ``worker_env``). The
  proof does not need it: the workers also set ``FI_PROVIDER=efa``, which limits
  ``fi_getinfo`` to the EFA provider, so in a pod without an EFA device it finds nothing and
  NIXL cannot create the LIBFABRIC backend at all (``getAvailableNetworkDevices`` returns
  ``none``; the topology discovery then fails). ``Backend LIBFABRIC was instantiated`` (NIXL's
  Python logger, ``nixl/_api.py`` ``nixl_agent.create_backend``, INFO to stdout by default:
  ``nixl/logging.py``) in a pod whose FI_PROVIDER is ``efa`` is therefore itself proof of EFA
  (``implied_provider``). A ``tcp``/``sockets`` line, when one appears (FI_PROVIDER unset or
  changed by hand), still fails.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# --- the integrity probe --------------------------------------------------------------------

CODE_LENGTH = 8
CODE_ALPHABET = string.ascii_uppercase + string.digits
# At least this many prompt tokens (vLLM's usage.prompt_tokens): over a hundred 16-token blocks.
PROBE_MIN_PROMPT_TOKENS = 2000
# The filler below is about 2,500 tokens for the common BPE tokenizers (English prose, no
# digits, ~4.3 characters a token); the chat template adds a few dozen. maxModelLen must hold
# the prompt with margin plus the answer: validated at synth (ray_pd_eks/config/rules_model.py).
PROBE_MAX_PROMPT_TOKENS = 3500
PROBE_MAX_TOKENS = 48
PROBE_MIN_MODEL_LEN = PROBE_MAX_PROMPT_TOKENS + PROBE_MAX_TOKENS
_FILLER_SENTENCES = (
    "The river bends twice before it reaches the old stone bridge near the market.",
    "Every morning the baker opens the shutters and sets bread on the wooden shelves.",
    "A narrow path climbs through the pine forest toward the quiet mountain lake.",
    "The library keeps its maps in tall drawers that smell faintly of cedar and dust.",
    "Children gather by the fountain after school to trade stories and small stones.",
    "In autumn the orchard fills with the sound of ladders and baskets and laughter.",
    "The lighthouse keeper writes the weather in a notebook with a green cover.",
    "Fishing boats return at dusk, their lanterns swaying over the dark harbour water.",
    "The clock in the town square runs a little fast, and nobody minds at all.",
    "Along the canal the painted houses lean together like friends sharing a secret.",
)
_FILLER_REPEATS = 15  # 150 sentences of about 16 tokens each


def new_code(choice: object = None) -> str:
    """A random code of ``CODE_LENGTH`` letters and digits, with at least two of each, so it
    is neither a word nor a number a model could guess."""
    pick = choice if callable(choice) else secrets.choice
    while True:
        code = "".join(pick(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        digits = sum(c.isdigit() for c in code)
        if 2 <= digits <= CODE_LENGTH - 2:
            return code


def probe_prompt(code: str) -> str:
    """The probe's user message: the code in the first line only, then ~2,500 tokens of prose
    that contains no digit (so no part of it can be mistaken for the code), then the question."""
    lines = [f"Remember this access code exactly: {code}.", ""]
    for repeat in range(_FILLER_REPEATS):
        for index in range(len(_FILLER_SENTENCES)):
            # Vary the order so the filler is not one block repeated (prefix caching within
            # the prompt would otherwise make most blocks identical).
            lines.append(_FILLER_SENTENCES[(index * 3 + repeat) % len(_FILLER_SENTENCES)])
    lines += [
        "",
        "What is the access code given in the first line? Answer with the code only.",
    ]
    return "\n".join(lines)


def probe_request(model_id: str, code: str) -> dict[str, object]:
    """The chat completion the probe sends: temperature 0, a short answer, no thinking (Qwen's
    chat templates read ``enable_thinking``; others ignore the variable)."""
    return {
        "model": model_id,
        "messages": [{"role": "user", "content": probe_prompt(code)}],
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw: ``ok`` when the answer contains the code."""

    code: str
    answer: str
    prompt_tokens: int | None
    ok: bool

    def describe(self) -> str:
        tokens = f"{self.prompt_tokens} prompt tokens" if self.prompt_tokens else "prompt tokens ?"
        seen = " ".join(self.answer.split())[:80]
        verdict = "returned" if self.ok else "NOT returned"
        return f"code {self.code} {verdict} ({tokens}; answer {seen!r})"


def _normalised(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", text.upper())


def judge_answer(code: str, payload: object) -> ProbeResult:
    """Judge a chat completion response (the decoded JSON) against the code. The answer counts
    in ``content`` or a reasoning field; spaces, dashes and case are ignored (a model may write
    ``7QK2-M9XD``), nothing else is."""
    answer = ""
    prompt_tokens: int | None = None
    if isinstance(payload, Mapping):
        usage = payload.get("usage")
        if isinstance(usage, Mapping) and isinstance(usage.get("prompt_tokens"), int):
            prompt_tokens = int(usage["prompt_tokens"])
        choices = payload.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            message = message if isinstance(message, Mapping) else {}
            parts = [
                message.get("content"),
                message.get("reasoning_content"),
                message.get("reasoning"),
                choices[0].get("text"),
            ]
            answer = " ".join(p for p in parts if isinstance(p, str) and p.strip()).strip()
    ok = bool(code) and _normalised(code) in _normalised(answer)
    return ProbeResult(code=code, answer=answer, prompt_tokens=prompt_tokens, ok=ok)


def probe_failure(result: ProbeResult) -> str | None:
    """Why a probe that answered fails, or None: no code in the answer, or a prompt that did
    not span the blocks the proof needs."""
    if not result.ok:
        return (
            f"KV integrity probe failed: the answer does not contain the code {result.code} "
            f"that appears only at the start of a {result.prompt_tokens or '?'}-token prompt "
            f"(answer: {' '.join(result.answer.split())[:200]!r}); decode answered from wrong "
            "or stale KV cache: look for NIXL errors in the decode worker's log, restart the "
            "decode worker pod (python -m ray_pd_eks drill decode-restart shows the way) and "
            "check efa-check"
        )
    if result.prompt_tokens is not None and result.prompt_tokens < PROBE_MIN_PROMPT_TOKENS:
        return (
            f"KV integrity probe prompt had only {result.prompt_tokens} tokens, fewer than "
            f"{PROBE_MIN_PROMPT_TOKENS}: the model's tokenizer packs the filler more densely "
            "than expected, so the probe would not span enough KV blocks"
        )
    return None


# --- Prometheus text and the NIXL counters ---------------------------------------------------

XFER_COUNT = "ray_vllm_nixl_xfer_time_seconds_count"
BYTES_SUM = "ray_vllm_nixl_bytes_transferred_sum"
BYTES_BUCKET = "ray_vllm_nixl_bytes_transferred_bucket"
FAILED_TOTAL = "ray_vllm_nixl_num_failed_transfers_total"
NIXL_SERIES = (XFER_COUNT, BYTES_SUM, FAILED_TOTAL)
_SAMPLE_RE = re.compile(
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(?:\s+-?\d+)?\s*$"
)
_LE_RE = re.compile(r'(?:^|[{,])\s*le="([^"]*)"')


def _samples(text: str) -> Iterable[tuple[str, str, float]]:
    """(name, label text, value) of every sample line; NaN and unparsable values skipped."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_RE.match(line.strip())
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if value != value:  # NaN
            continue
        yield match.group(1), match.group(2) or "", value


def metric_totals(text: str, names: Iterable[str] = NIXL_SERIES) -> dict[str, float]:
    """Sum of every sample of each wanted series in a Prometheus text exposition (all label
    sets: one per engine replica and engine). A series absent from the text is absent here."""
    wanted = set(names)
    totals: dict[str, float] = {}
    for name, _, value in _samples(text):
        if name in wanted:
            totals[name] = totals.get(name, 0.0) + value
    return totals


def bucket_totals(text: str, name: str = BYTES_BUCKET) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound (``le``; ``+Inf`` is inf), summed
    over every label set (cumulative counts of the same bounds add up)."""
    totals: dict[float, float] = {}
    for sample, labels, value in _samples(text):
        if sample != name:
            continue
        match = _LE_RE.search(labels)
        if not match:
            continue
        try:
            bound = float(match.group(1))
        except ValueError:
            continue
        totals[bound] = totals.get(bound, 0.0) + value
    return totals


@dataclass(frozen=True)
class NixlCounters:
    """The decode engines' NIXL counters summed over the pods read; None = series absent.
    ``bytes_buckets``: the byte histogram's cumulative counts, (upper bound, count) by bound."""

    transfers: float | None
    bytes: float | None
    failed: float | None
    pods: tuple[str, ...] = ()
    bytes_buckets: tuple[tuple[float, float], ...] = ()

    @classmethod
    def from_texts(cls, texts: Mapping[str, str]) -> NixlCounters:
        sums: dict[str, float] = {}
        buckets: dict[float, float] = {}
        for text in texts.values():
            for name, value in metric_totals(text).items():
                sums[name] = sums.get(name, 0.0) + value
            for bound, count in bucket_totals(text).items():
                buckets[bound] = buckets.get(bound, 0.0) + count
        return cls(
            transfers=sums.get(XFER_COUNT),
            bytes=sums.get(BYTES_SUM),
            failed=sums.get(FAILED_TOTAL),
            pods=tuple(sorted(texts)),
            bytes_buckets=tuple(sorted(buckets.items())),
        )


def moved_bytes_bounds(before: NixlCounters, after: NixlCounters) -> tuple[float, float] | None:
    """The bytes the transfers between two readings moved at least and at most, from the byte
    histogram's buckets; None without bucket lines.

    Not ``_sum``: Ray 2.58 re-exports a histogram from its per-bucket counts and rebuilds each
    observation as its bucket's midpoint (``OpenTelemetryMetricRecorder.
    record_histogram_aggregated_batch``, called from ``reporter_agent.py``
    ``_export_histogram_data``), so ``_sum`` is 0.625 to 2.5 times the truth with vLLM's byte
    buckets, which are 4x apart (``nixl/stats.py`` ``NixlPromMetrics``: 2 KiB .. 8 GiB). The
    counts per bucket are exact, and a transfer counted in the bucket ``(lower, upper]`` moved
    more than ``lower`` and at most ``upper`` bytes."""
    if not after.bytes_buckets:
        return None
    old = dict(before.bytes_buckets)
    low = high = 0.0
    previous_bound, previous_count = 0.0, 0.0
    for bound, cumulative in after.bytes_buckets:
        count = cumulative - old.get(bound, 0.0)
        in_bucket = max(0.0, count - previous_count)
        low += in_bucket * previous_bound
        if in_bucket:
            high += in_bucket * bound
        previous_bound, previous_count = bound, count
    return low, high


# Bounds on KV bytes per prompt token when the model's shape is unknown (KvBytesPerToken 0):
# the smallest model this project serves (a 0.5B model: 24 layers x 2 KV heads x 64 dims x K
# and V x 1 byte in FP8 = 6 KiB) and the largest (405B: 126 layers x 8 x 128 x 2 x 2 bytes =
# 504 KiB; hybrid models add their state, well below). Fewer bytes than the floor means the
# prompt's KV did not move.
MIN_KV_BYTES_PER_TOKEN = 4 * 1024
MAX_KV_BYTES_PER_TOKEN = 2 * 1024 * 1024
# With the model's own KV bytes per token known (ray_pd_eks/kv_shapes.py), the floor is this
# share of them: a margin for blocks that need not move (the first, a cached prefix, and the
# last partial one) when a block holds hundreds of tokens, as a hybrid model's may (vLLM 0.26
# aligns its attention block size with the recurrent state's page size:
# vllm/platforms/interface.py Platform.update_block_size_for_backend).
MODEL_FLOOR_SHARE = 0.5
# Decode pulls every full block of the prompt; the prompt's last partial block and the first
# one (which a cached prefix may cover) need not move.
UNCOUNTED_TOKENS = 2 * 16


def floor_bytes_per_token(kv_bytes_per_token: int) -> float:
    """The least KV a correct transfer moves per counted prompt token: ``MODEL_FLOOR_SHARE``
    of the model's own figure when known (never below the generic floor), else
    ``MIN_KV_BYTES_PER_TOKEN``."""
    return max(float(MIN_KV_BYTES_PER_TOKEN), kv_bytes_per_token * MODEL_FLOOR_SHARE)


@dataclass(frozen=True)
class KvTransferVerdict:
    ok: bool
    summary: str  # one line for Data and the CLI
    failure: str = ""  # set when not ok: what is wrong and what to check


def _mib(value: float) -> str:
    return "more" if value == float("inf") else f"{value / 1048576:.1f}"


def transfer_verdict(
    before: NixlCounters,
    after: NixlCounters,
    prompt_tokens: int | None,
    kv_bytes_per_token: int = 0,
) -> KvTransferVerdict:
    """Did the probe's KV cache move? The transfer count rose, failed transfers did not, and
    the bytes moved are at least what the prompt's blocks need (and not absurdly more).

    The bytes come from the byte histogram's buckets (``moved_bytes_bounds``): too few when
    even every transfer's bucket upper bound falls short of the floor, too many when their
    lower bounds already exceed the ceiling, so neither verdict rests on an estimate. The floor
    is ``floor_bytes_per_token(kv_bytes_per_token)`` per counted token. Without bucket lines
    the ``_sum`` stands in for both bounds."""
    where = ", ".join(after.pods) or "no pods"
    if after.transfers is None:
        return KvTransferVerdict(
            False,
            "no NIXL transfer counted",
            f"no NIXL transfer was counted: the decode engines' metrics ({where}) have no "
            f"{XFER_COUNT} series after the probe; the KV cache did not move through NIXL: check "
            "kv_transfer_config (NixlConnector) in decode_config and that log_engine_metrics "
            "is on",
        )
    rose = after.transfers - (before.transfers or 0.0)
    failed = (after.failed or 0.0) - (before.failed or 0.0)
    bounds = moved_bytes_bounds(before, after)
    if bounds is None:
        moved = (after.bytes or 0.0) - (before.bytes or 0.0)
        low, high, source = moved, moved, f"~{moved / 1048576:.1f} MiB ({BYTES_SUM})"
    else:
        low, high = bounds
        source = f"{_mib(low)}-{_mib(high)} MiB"
    summary = f"{rose:.0f} transfer(s), {source}"
    if prompt_tokens:
        summary += f" for {prompt_tokens} prompt tokens"
    if failed > 0:
        return KvTransferVerdict(
            False,
            summary + f", {failed:.0f} failed",
            f"{failed:.0f} NIXL transfer(s) failed during the probe ({FAILED_TOTAL} rose on "
            f"{where}); read the decode worker's log for the NIXL error and check efa-check",
        )
    if rose < 1:
        return KvTransferVerdict(
            False,
            summary,
            f"the NIXL transfer count did not rise during the probe ({XFER_COUNT} stayed at "
            f"{after.transfers:.0f} on {where}): decode did not pull the prompt's KV cache "
            "from prefill; check the PD app's kv_transfer_config and the decode worker's log",
        )
    if prompt_tokens:
        counted = max(1, prompt_tokens - UNCOUNTED_TOKENS)
        per_token = floor_bytes_per_token(kv_bytes_per_token)
        floor = counted * per_token
        ceiling = prompt_tokens * MAX_KV_BYTES_PER_TOKEN * max(1.0, rose)
        basis = (
            f"{MODEL_FLOOR_SHARE:g} x the model's {kv_bytes_per_token} bytes a token"
            if per_token > MIN_KV_BYTES_PER_TOKEN
            else f"{MIN_KV_BYTES_PER_TOKEN} bytes a token"
        )
        if high < floor:
            return KvTransferVerdict(
                False,
                summary,
                f"NIXL moved at most {high:.0f} bytes for a {prompt_tokens}-token prompt, less "
                f"than the {floor:.0f} its KV cache needs at {basis}: the prompt's KV did not "
                f"move ({BYTES_BUCKET} on {where})",
            )
        if low > ceiling:
            return KvTransferVerdict(
                False,
                summary,
                f"NIXL moved at least {low:.0f} bytes for a {prompt_tokens}-token prompt, more "
                f"than any model needs ({MAX_KV_BYTES_PER_TOKEN} bytes a token): other requests "
                "were moving KV at the same time; run the probe again when the endpoint is idle",
            )
    return KvTransferVerdict(True, summary)


# --- the libfabric provider from the engines' logs ------------------------------------------

_PROVIDER_RE = re.compile(r"Discovered\s+\d+\s+(EFA|efa|tcp|sockets)\s+devices")


def libfabric_provider(log_text: str) -> str | None:
    """The libfabric provider NIXL's LIBFABRIC plugin chose ("efa", "tcp", "sockets"), the last
    one logged; None when the text has no such line."""
    matches = _PROVIDER_RE.findall(log_text or "")
    return matches[-1].lower() if matches else None


def implied_provider(backend: str | None, fi_provider: str) -> str | None:
    """``efa`` when NIXL instantiated LIBFABRIC in worker pods whose ``FI_PROVIDER`` is
    ``efa``: libfabric then offers NIXL no other provider, so without an EFA device the backend
    could not have been created (module docstring). None otherwise: no inference."""
    if backend == "LIBFABRIC" and fi_provider.strip().lower() == "efa":
        return "efa"
    return None


def provider_failure(kv_backend: str, providers: Mapping[str, str], looked_at: str) -> str | None:
    """With LIBFABRIC, every engine must report the ``efa`` provider: ``tcp``/``sockets`` is the
    silent fallback, and no evidence is no proof. ``providers`` maps an engine's label to the
    provider found, or to ``unknown: <reason>``. UCX has no libfabric provider."""
    if kv_backend.upper() != "LIBFABRIC":
        return None
    if not providers:
        return (
            "no libfabric provider evidence: no engine logs were read "
            f"({looked_at}); the deploy cannot prove the KV cache moves over EFA"
        )
    slow = {label: p for label, p in providers.items() if p in ("tcp", "sockets")}
    if slow:
        found = ", ".join(f"{label}={p}" for label, p in sorted(slow.items()))
        return (
            f"NIXL's LIBFABRIC plugin chose libfabric's TCP provider ({found}): it saw no EFA "
            "device, so the KV cache moves at TCP speed (possible only where FI_PROVIDER is not "
            "efa: with it NIXL cannot fall back); check that the worker pods request "
            "vpc.amazonaws.com/efa, the EFA device plugin runs, FI_PROVIDER=efa is set, and run "
            "python -m ray_pd_eks efa-check"
        )
    unknown = {label: p for label, p in providers.items() if p != "efa"}
    if unknown:
        found = "; ".join(f"{label}: {p}" for label, p in sorted(unknown.items()))
        return (
            "no libfabric provider evidence (neither NIXL's 'Discovered <n> EFA devices' line, "
            "logged with NIXL_LOG_LEVEL=INFO, nor 'Backend LIBFABRIC was instantiated' in a "
            f"worker pod that sets FI_PROVIDER=efa): {found}; looked at {looked_at}; check "
            "that the worker pods set FI_PROVIDER=efa and NIXL_LOG_LEVEL=INFO and run "
            "python -m ray_pd_eks efa-check"
        )
    return None
