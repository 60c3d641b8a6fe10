"""The KV proof's pure decisions (assets/lambda/readiness/kvproof.py): the integrity probe, the
NIXL counters from Prometheus text, the transfer verdict and the libfabric provider.

The same functions decide in the readiness Lambda, the scheduled KV probe and the CLI, so each
limit is tested here at the limit and one past it; tests/test_readiness_handler.py drives them
through the fake API server."""

from __future__ import annotations

import itertools

import pytest

from ray_pd_eks import lambda_code
from ray_pd_eks.config import limits

kvproof = lambda_code.kvproof()


def test_the_settings_floor_of_maxmodellen_is_the_probes_need() -> None:
    assert limits.MIN_MODEL_LEN == kvproof.PROBE_MIN_MODEL_LEN
    assert kvproof.PROBE_MIN_MODEL_LEN == kvproof.PROBE_MAX_PROMPT_TOKENS + kvproof.PROBE_MAX_TOKENS


def test_the_code_appears_only_in_the_first_line_and_the_prompt_spans_many_blocks() -> None:
    code = kvproof.new_code()
    prompt = kvproof.probe_prompt(code)
    lines = prompt.splitlines()
    assert code in lines[0] and prompt.count(code) == 1
    # No digit anywhere else: no part of the filler can pass for the code.
    assert not any(ch.isdigit() for ch in "\n".join(lines[1:]))
    # Words are a lower bound on tokens for the tokenizers in use (one word >= one token), and
    # ~4 characters a token an upper estimate: at least 2,000, at most 3,500 tokens.
    assert len(prompt.split()) >= kvproof.PROBE_MIN_PROMPT_TOKENS
    assert len(prompt) / 3.6 <= kvproof.PROBE_MAX_PROMPT_TOKENS


def test_codes_are_letters_and_digits_with_at_least_two_of_each() -> None:
    picks = itertools.cycle("AAAAAAAA" + "A1B2C3D4")  # first attempt all letters: rejected
    code = kvproof.new_code(lambda alphabet: next(picks))
    assert code == "A1B2C3D4"
    for _ in range(50):
        code = kvproof.new_code()
        assert len(code) == kvproof.CODE_LENGTH and code.isalnum() and code.upper() == code
        assert 2 <= sum(c.isdigit() for c in code) <= kvproof.CODE_LENGTH - 2


def test_the_request_is_deterministic_short_and_without_thinking() -> None:
    request = kvproof.probe_request("m", "7QK2M9XD")
    assert request["temperature"] == 0 and request["max_tokens"] == 48
    assert request["chat_template_kwargs"] == {"enable_thinking": False}


def _answer(content: str, tokens: int | None = 2600, field: str = "content") -> dict[str, object]:
    body: dict[str, object] = {"choices": [{"message": {field: content}}]}
    if tokens is not None:
        body["usage"] = {"prompt_tokens": tokens}
    return body


@pytest.mark.parametrize(
    ("content", "field", "ok"),
    [
        ("7QK2M9XD", "content", True),
        ("The code is 7qk2-m9xd.", "content", True),  # case, dashes and spaces ignored
        ("7QK2 M9XD", "reasoning_content", True),
        ("7QK2M9XB", "content", False),  # one character off
        ("7QK2M9X", "content", False),
        ("", "content", False),
    ],
)
def test_the_answer_must_contain_the_code(content: str, field: str, ok: bool) -> None:
    result = kvproof.judge_answer("7QK2M9XD", _answer(content, field=field))
    assert result.ok is ok
    failure = kvproof.probe_failure(result)
    assert (failure is None) is ok
    if not ok:
        assert "does not contain the code 7QK2M9XD" in str(failure)


@pytest.mark.parametrize(("tokens", "fails"), [(2000, False), (1999, True), (None, False)])
def test_a_prompt_shorter_than_the_floor_fails(tokens: int | None, fails: bool) -> None:
    result = kvproof.judge_answer("7QK2M9XD", _answer("7QK2M9XD", tokens))
    failure = kvproof.probe_failure(result)
    assert (failure is not None) is fails
    if fails:
        assert "only 1999 tokens, fewer than 2000" in str(failure)


METRICS = """\
# HELP ray_vllm_nixl_xfer_time_seconds Histogram of transfer duration.
# TYPE ray_vllm_nixl_xfer_time_seconds histogram
ray_vllm_nixl_xfer_time_seconds_bucket{ReplicaId="a",engine="0",le="0.005"} 3.0
ray_vllm_nixl_xfer_time_seconds_count{ReplicaId="a",engine="0"} 3.0
ray_vllm_nixl_xfer_time_seconds_count{ReplicaId="b",engine="0"} 2.0
ray_vllm_nixl_bytes_transferred_sum{ReplicaId="a",engine="0"} 1.5e+06
ray_vllm_nixl_num_failed_transfers_total{ReplicaId="a",engine="0"} 0.0
ray_vllm_nixl_num_failed_transfers_total{ReplicaId="b",engine="0"} NaN
ray_vllm_kv_cache_usage_perc{ReplicaId="a"} 0.4
"""


def test_metric_totals_sum_every_label_set_and_skip_the_rest() -> None:
    assert kvproof.metric_totals(METRICS) == {
        kvproof.XFER_COUNT: 5.0,
        kvproof.BYTES_SUM: 1.5e6,
        kvproof.FAILED_TOTAL: 0.0,
    }
    counters = kvproof.NixlCounters.from_texts({"b": METRICS, "a": METRICS})
    assert (counters.transfers, counters.bytes, counters.pods) == (10.0, 3e6, ("a", "b"))


def test_the_series_names_are_the_ones_the_metrics_table_lists() -> None:
    """As the pod's metrics port exposes them (the check reads that, not CloudWatch)."""
    from ray_pd_eks.metrics import EXPOSITION_SERIES

    assert set(kvproof.NIXL_SERIES) <= EXPOSITION_SERIES
    assert kvproof.BYTES_BUCKET in EXPOSITION_SERIES


def _counters(transfers: float | None, moved: float = 0.0, failed: float = 0.0) -> object:
    return kvproof.NixlCounters(transfers, moved, failed, ("decode-pod",))


TOKENS = 2600
LOW = (TOKENS - kvproof.UNCOUNTED_TOKENS) * kvproof.MIN_KV_BYTES_PER_TOKEN
HIGH = TOKENS * kvproof.MAX_KV_BYTES_PER_TOKEN


@pytest.mark.parametrize(
    ("after", "ok", "says"),
    [
        (_counters(None), False, "no NIXL transfer was counted"),
        (_counters(4, 1e9), False, "did not rise during the probe (ray_vllm_nixl_xfer_time"),
        (_counters(5, 1e9 + LOW, failed=1), False, "1 NIXL transfer(s) failed"),
        (_counters(5, 1e9 + LOW), True, ""),  # at the floor
        (_counters(5, 1e9 + LOW - 1), False, "the prompt's KV did not move"),  # one byte short
        (_counters(5, 1e9 + HIGH), True, ""),  # at the ceiling
        (_counters(5, 1e9 + HIGH + 1), False, "other requests were moving KV"),
    ],
    ids=["absent", "not-risen", "failed", "floor", "below-floor", "ceiling", "above-ceiling"],
)
def test_transfer_verdict(after: object, ok: bool, says: str) -> None:
    before = _counters(4, 1e9)
    verdict = kvproof.transfer_verdict(before, after, TOKENS)
    assert verdict.ok is ok
    assert says in verdict.failure
    if ok:
        assert verdict.summary.startswith("1 transfer(s),")


def test_without_a_token_count_only_the_rise_is_judged() -> None:
    verdict = kvproof.transfer_verdict(_counters(0), _counters(1, 10.0), None)
    assert verdict.ok
    assert verdict.summary == f"1 transfer(s), ~0.0 MiB ({kvproof.BYTES_SUM})"


# -- the byte check from the histogram's buckets ----------------------------------------------

INF = float("inf")


def _bucketed(transfers: float, buckets: tuple[tuple[float, float], ...]) -> object:
    """Counters whose byte histogram has these cumulative (bound, count) buckets; the ``_sum``
    is set far off to show it is not read."""
    return kvproof.NixlCounters(transfers, 123.0, 0.0, ("decode-pod",), buckets)


ZERO = _bucketed(4, ())


def test_ray_rebuilds_sum_from_midpoints_so_the_bounds_come_from_the_buckets() -> None:
    """Ray 2.58's export of one 279.8 MiB transfer (vLLM's buckets are 4x apart): the
    ``_sum`` says 320 MiB (the bucket's midpoint), the buckets say (128, 512] MiB."""
    from tests.fakes.kube_api import count_transfer, nixl_metrics_text

    counters: dict[str, float] = {"xfer": 1.0, "bytes": 279.8 * 2**20}
    count_transfer(counters, counters["bytes"])
    after = kvproof.NixlCounters.from_texts({"d": nixl_metrics_text(counters)})
    assert after.bytes == 320 * 2**20  # the midpoint, not the 279.8 MiB that moved
    assert kvproof.moved_bytes_bounds(ZERO, after) == (128 * 2**20, 512 * 2**20)


def test_bucket_totals_sum_label_sets_by_bound() -> None:
    text = (
        f'{kvproof.BYTES_BUCKET}{{ReplicaId="a",le="2048.0",engine="0"}} 1\n'
        f'{kvproof.BYTES_BUCKET}{{ReplicaId="b",le="2048.0"}} 2\n'
        f'{kvproof.BYTES_BUCKET}{{le="+Inf",ReplicaId="a"}} 3\n'
        f'{kvproof.BYTES_BUCKET}{{ReplicaId="a"}} 9\n'  # no le: not a bucket line
        f'{kvproof.BYTES_BUCKET}{{le="x"}} 9\n'
    )
    assert kvproof.bucket_totals(text) == {2048.0: 3.0, INF: 3.0}


def test_bounds_count_only_the_transfers_between_the_readings() -> None:
    before = _bucketed(1, ((2048.0, 1), (8192.0, 1), (INF, 1)))
    after = _bucketed(3, ((2048.0, 1), (8192.0, 2), (INF, 3)))
    # One new transfer in (2048, 8192], one above 8192 (at most: unbounded).
    assert kvproof.moved_bytes_bounds(before, after) == (2048.0 + 8192.0, INF)
    assert kvproof.moved_bytes_bounds(before, _bucketed(1, ())) is None


TOKENS_COUNTED = TOKENS - kvproof.UNCOUNTED_TOKENS
GENERIC_FLOOR = TOKENS_COUNTED * kvproof.MIN_KV_BYTES_PER_TOKEN
CEILING = TOKENS * kvproof.MAX_KV_BYTES_PER_TOKEN


@pytest.mark.parametrize(
    ("upper", "ok"),
    [(GENERIC_FLOOR, True), (GENERIC_FLOOR - 1, False)],
    ids=["bucket-top-at-the-floor", "one-byte-below"],
)
def test_too_few_bytes_only_when_even_the_buckets_upper_bound_is_below_the_floor(
    upper: float, ok: bool
) -> None:
    after = _bucketed(5, ((upper / 4, 0), (upper, 1), (INF, 1)))
    verdict = kvproof.transfer_verdict(ZERO, after, TOKENS)
    assert verdict.ok is ok
    if not ok:
        assert f"at most {upper:.0f} bytes" in verdict.failure
        assert "the prompt's KV did not move" in verdict.failure


@pytest.mark.parametrize(
    ("lower", "ok"), [(CEILING, True), (CEILING + 1, False)], ids=["at-ceiling", "one-past"]
)
def test_too_many_bytes_only_when_the_buckets_lower_bound_is_above_the_ceiling(
    lower: float, ok: bool
) -> None:
    after = _bucketed(5, ((lower, 0), (lower * 4, 1), (INF, 1)))
    verdict = kvproof.transfer_verdict(ZERO, after, TOKENS)
    assert verdict.ok is ok
    if not ok:
        assert f"at least {lower:.0f} bytes" in verdict.failure


QWEN35_9B = 8 * 4 * 256 * 2 * 2  # full-attention layers x KV heads x head dim x K,V x bf16
MODEL_FLOOR = TOKENS_COUNTED * QWEN35_9B * kvproof.MODEL_FLOOR_SHARE


@pytest.mark.parametrize(
    ("upper", "ok"),
    [(MODEL_FLOOR, True), (MODEL_FLOOR - 1, False)],
    ids=["at-the-model-floor", "one-byte-below"],
)
def test_a_known_models_floor_is_its_share_of_the_models_kv_bytes(upper: float, ok: bool) -> None:
    """The generic floor (4 KiB a token) passes what a 32 KiB-a-token model's floor fails."""
    after = _bucketed(5, ((upper / 4, 0), (upper, 1), (INF, 1)))
    assert kvproof.transfer_verdict(ZERO, after, TOKENS).ok  # generic: far below
    verdict = kvproof.transfer_verdict(ZERO, after, TOKENS, QWEN35_9B)
    assert verdict.ok is ok
    if not ok:
        assert f"0.5 x the model's {QWEN35_9B} bytes a token" in verdict.failure


@pytest.mark.parametrize(
    ("model", "floor"),
    [(0, 4096.0), (8192, 4096.0), (8194, 4097.0), (32768, 16384.0)],
)
def test_the_floor_per_token_is_never_below_the_generic_one(model: int, floor: float) -> None:
    assert kvproof.floor_bytes_per_token(model) == floor


def test_the_summary_gives_the_buckets_range() -> None:
    after = _bucketed(5, ((128 * 2**20, 0), (512 * 2**20, 1), (INF, 1)))
    verdict = kvproof.transfer_verdict(ZERO, after, TOKENS)
    assert verdict.summary == f"1 transfer(s), 128.0-512.0 MiB for {TOKENS} prompt tokens"
    above = kvproof.transfer_verdict(ZERO, _bucketed(5, ((8 * 2**30, 0), (INF, 1))), TOKENS)
    assert above.summary.startswith("1 transfer(s), 8192.0-more MiB")


@pytest.mark.parametrize(
    ("text", "provider"),
    [
        ("I1130 01:02:05 5151 libfabric_topology.cpp:131] Discovered 4 EFA devices\n", "efa"),
        ("Discovered 1 tcp devices (TCP fallback)\n", "tcp"),
        ("Discovered 1 sockets devices (TCP fallback)\n", "sockets"),
        ("Discovered 4 EFA devices\nDiscovered 1 tcp devices (TCP fallback)\n", "tcp"),  # last
        ("Backend LIBFABRIC was instantiated\n", None),
        ("", None),
    ],
)
def test_libfabric_provider_from_nixls_log_line(text: str, provider: str | None) -> None:
    assert kvproof.libfabric_provider(text) == provider


def test_provider_verdicts() -> None:
    assert kvproof.provider_failure("LIBFABRIC", {"p": "efa", "d": "efa"}, "logs") is None
    assert kvproof.provider_failure("UCX", {}, "logs") is None  # UCX has no provider
    tcp = kvproof.provider_failure("LIBFABRIC", {"p": "efa", "d": "tcp"}, "logs")
    assert tcp is not None and "TCP provider (d=tcp)" in tcp
    unknown = kvproof.provider_failure("LIBFABRIC", {"p": "efa", "d": "unknown: x"}, "3 files")
    assert unknown is not None and "d: unknown: x; looked at 3 files" in unknown
    nothing = kvproof.provider_failure("LIBFABRIC", {}, "the log API (down)")
    assert nothing is not None and "no engine logs were read (the log API (down))" in nothing


@pytest.mark.parametrize(
    ("attempts", "code"),
    [
        (["A1BCDEFG", "1234567A", "AB1CD2EF"], "AB1CD2EF"),  # 1 and 7 digits refused, 2 kept
        (["ABCDEFGH", "123456AB"], "123456AB"),  # 6 digits (length - 2) kept
    ],
)
def test_a_code_with_two_to_six_digits_is_kept_one_fewer_or_more_drawn_again(
    attempts: list[str], code: str
) -> None:
    picks = iter("".join(attempts))
    assert kvproof.new_code(lambda alphabet: next(picks)) == code


def test_the_prompts_first_lines_and_every_filler_sentence_equally_often() -> None:
    lines = kvproof.probe_prompt("7QK2M9XD").split("\n")
    assert lines[:2] == ["Remember this access code exactly: 7QK2M9XD.", ""]
    filler = lines[2:-2]
    for sentence in kvproof._FILLER_SENTENCES:
        assert filler.count(sentence) == kvproof._FILLER_REPEATS


@pytest.mark.parametrize(
    ("payload", "answer", "ok"),
    [
        ("not json object", "", False),
        ({"choices": []}, "", False),
        ({"choices": ["7QK2M9XD"]}, "", False),
        ({"choices": [{"message": {"reasoning": "7QK2M9XD"}}]}, "7QK2M9XD", True),
        ({"choices": [{"message": "x", "text": "7QK2M9XD"}]}, "7QK2M9XD", True),
        (
            {"choices": [{"message": {"content": "7QK2", "reasoning_content": "M"}}]},
            "7QK2 M",
            False,
        ),
    ],
    ids=["not-a-mapping", "no-choices", "choice-not-a-mapping", "reasoning", "text", "joined"],
)
def test_the_answer_is_read_from_each_field_a_server_may_use(
    payload: object, answer: str, ok: bool
) -> None:
    result = kvproof.judge_answer("7QK2M9XD", payload)
    assert (result.answer, result.ok) == (answer, ok)


def test_unreadable_and_nan_samples_are_skipped_and_later_lines_still_count() -> None:
    text = (
        f'{kvproof.XFER_COUNT}{{a="1"}} NaN\n'
        f'{kvproof.XFER_COUNT}{{a="2"}} 1.2.3\n'
        f'{kvproof.XFER_COUNT}{{a="3"}} 4\n'
    )
    assert kvproof.metric_totals(text) == {kvproof.XFER_COUNT: 4.0}


def test_failures_before_the_probe_are_not_counted_against_it() -> None:
    before = kvproof.NixlCounters(4, 1e9, 3, ("d",))
    after = kvproof.NixlCounters(5, 1e9 + LOW, 3, ("d",))
    assert kvproof.transfer_verdict(before, after, TOKENS).ok


def test_the_ceiling_scales_with_the_transfers_and_every_verdict_has_a_summary() -> None:
    before = _counters(4, 1e9)
    two = kvproof.transfer_verdict(before, _counters(6, 1e9 + 2 * HIGH), TOKENS)
    assert two.ok and two.summary.startswith("2 transfer(s),")
    for after in (_counters(4, 1e9), _counters(5, 1e9, failed=1), _counters(5, 1e9 + 3 * HIGH)):
        verdict = kvproof.transfer_verdict(before, after, TOKENS)
        assert not verdict.ok and " transfer(s), " in verdict.summary
    failed = kvproof.transfer_verdict(before, _counters(5, 1e9 + LOW, failed=1), TOKENS)
    assert failed.summary.endswith(", 1 failed")


def test_every_slow_or_unknown_engine_is_named() -> None:
    slow = kvproof.provider_failure("LIBFABRIC", {"p": "sockets", "d": "tcp"}, "logs")
    assert slow is not None and "TCP provider (d=tcp, p=sockets)" in slow
    unknown = kvproof.provider_failure("LIBFABRIC", {"p": "unknown: a", "d": "unknown: b"}, "l")
    assert unknown is not None and "d: unknown: b; p: unknown: a; looked at l" in unknown


@pytest.mark.parametrize(
    ("backend", "fi_provider", "provider"),
    [
        ("LIBFABRIC", "efa", "efa"),
        ("LIBFABRIC", " EFA ", "efa"),
        ("LIBFABRIC", "", None),
        ("LIBFABRIC", "tcp", None),
        ("UCX", "efa", None),
        (None, "efa", None),
    ],
)
def test_libfabric_with_fi_provider_efa_implies_the_efa_provider(
    backend: str | None, fi_provider: str, provider: str | None
) -> None:
    """With FI_PROVIDER=efa libfabric lists only EFA devices to NIXL, so a LIBFABRIC backend
    exists only where EFA does; nothing else implies a provider."""
    assert kvproof.implied_provider(backend, fi_provider) == provider


def test_no_provider_evidence_names_both_ways_to_prove_efa() -> None:
    message = kvproof.provider_failure("LIBFABRIC", {"d": "unknown: x"}, "2 files")
    assert message is not None
    assert "NIXL_LOG_LEVEL=INFO" in message and "FI_PROVIDER=efa" in message
