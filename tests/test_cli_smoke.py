"""``smoke`` through the fake API server's service proxy to the serve service."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli_fixtures import Harness, cli_harness
from tests.fakes.kube_api import FakeKubeApi, chat_completion_body

SERVE = "ray-llm-serve-svc"

pytest_plugins = ["tests.fakes.fixtures"]  # the ``kube_api`` fixture: a fresh fake API server


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    return cli_harness(kube_api, tmp_path)


def sse(*pieces: str, usage_tokens: int | None = None) -> str:
    """A vLLM-style OpenAI chat stream."""
    chunks: list[dict[str, object]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    if usage_tokens is not None:
        chunks.append({"choices": [], "usage": {"completion_tokens": usage_tokens}})
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return "".join(lines) + "data: [DONE]\n\n"


def serve(kube_api: FakeKubeApi, body: str | dict[str, object]) -> None:
    kube_api.set_stage("serving")
    kube_api.set_proxy(
        SERVE,
        8000,
        "v1/chat/completions",
        method="POST",
        body=body,
        content_type="text/event-stream" if isinstance(body, str) else None,
    )


def test_models_and_a_streamed_completion(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, sse("KV cache ", "moves ", "fast.", usage_tokens=12))
    cli.clock.tick = 0.25
    out = cli.succeeds("smoke", "--max-tokens", "16", "--prompt", "hi", "--no-probe")
    assert re.search(r"^  models      qwen3\.5-9b  \(\d+\.\d\d s\)$", out, re.M)
    assert "  answer      'KV cache moves fast.'" in out
    assert "(upper bound: the proxy delivered all 3 chunks at once)" in out
    rate = re.search(
        r"tokens/s    (\S+)  \(12 tokens from usage\.completion_tokens in (\d+\.\d\d) s", out
    )
    assert rate is not None, out
    assert out.rstrip().endswith("OK: the endpoint answers")
    (post,) = kube_api.requests_to(f"/services/{SERVE}:8000/proxy/v1/chat/completions", "POST")
    sent = json.loads(post.body)
    assert sent == {
        "model": "qwen3.5-9b",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_token_rate_uses_measured_time(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, sse("a", "b", "c", "d"))  # no usage: counts the chunks
    cli.clock.tick = 0.5
    out = cli.succeeds("smoke", "--no-probe")
    match = re.search(r"tokens/s    (\S+)  \(4 tokens from streamed chunks in (\S+) s", out)
    assert match is not None, out
    seconds = float(match.group(2))
    assert seconds >= 0.5
    assert match.group(1) == f"{4 / seconds:.1f}"
    assert f"first token <= {seconds:.2f} s" in out


def test_model_not_listed_fails(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, sse("x"))
    kube_api.set_proxy(SERVE, 8000, "v1/models", body={"data": [{"id": "llama-3"}]})
    err = cli.fails("smoke")
    assert err == (
        "error: /v1/models does not list 'qwen3.5-9b' (it lists: llama-3): the app may still "
        "be deploying, or modelId differs from the deployed one\n"
    )
    assert kube_api.requests_to("chat/completions") == []


def test_no_text_fails(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, sse(usage_tokens=0))
    err = cli.fails("smoke")
    assert err.startswith("error: the chat completion returned no text (")


def test_serve_service_without_endpoints_fails_with_a_hint(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("running")  # Serve app RUNNING but serve-svc has no endpoints yet
    err = cli.fails("smoke")
    assert err.startswith(f"error: /v1/models through svc/{SERVE}:8000 failed:")
    assert 'no endpoints available for service "ray-llm-serve-svc"' in err
    assert err.rstrip().endswith("Check with `ray-pd-eks status`")


def test_completion_is_never_retried(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, sse("x"))
    kube_api.inject_fault(502, path_contains="chat/completions")
    cli.fails("smoke")
    assert len(kube_api.requests_to("chat/completions")) == 1


def test_a_server_that_does_not_stream_is_reported(kube_api: FakeKubeApi, cli: Harness) -> None:
    serve(kube_api, chat_completion_body("Plain answer."))
    out = cli.succeeds("smoke", "--no-probe")
    assert "  answer      'Plain answer.'" in out
    assert "(the server did not stream)" in out
    assert "  latency     " in out
    assert "  tokens/s    n/a  (no token count or no measurable time)" in out


def test_rayservice_missing_is_exit_3(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.rayservice = None
    err = cli.fails("smoke", code=3)
    assert err.startswith("error: RayService 'ray-llm' not found in namespace 'inference'")


def test_the_kv_integrity_probe_prints_what_it_saw(kube_api: FakeKubeApi, cli: Harness) -> None:
    """The readiness check's probe: the answer holds the random code from the prompt's start."""
    kube_api.set_stage("serving")  # the fake's chat world answers with the probe's code
    out = cli.succeeds("smoke")
    line = next(x for x in out.splitlines() if x.startswith("  integrity"))
    assert re.match(r"^  integrity   code [A-Z0-9]{8} returned \(\d+ prompt tokens; answer", line)
    probe, *_ = [
        json.loads(r.body)
        for r in kube_api.requests_to("v1/chat/completions", "POST")
        if "access code" in r.body.decode()
    ]
    assert probe["temperature"] == 0 and probe["chat_template_kwargs"] == {"enable_thinking": False}


def test_an_answer_without_the_code_fails_smoke(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.chat_answer = "The access code is 7QK2M9XD."
    result = cli.run("smoke")
    assert result.code == 1
    assert "  integrity   code " in result.out and " NOT returned (" in result.out
    assert "KV integrity probe failed: the answer does not contain the code" in result.err
