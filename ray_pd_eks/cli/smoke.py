"""``smoke``: one real request to the model, through the application endpoint when the stack
has one (``endpointExposure``), else through the Kubernetes API server's service proxy.

Through the endpoint the request takes the path an application takes: an access token (from
the stack's Cognito app client, or ``$TOKEN`` for an existing identity provider), HTTPS to the
load balancer, JWT validation, the target group. The stream is read as it arrives, so the time
to the first token is measured.

The proxy path needs no port-forward and no route to pod IPs, only the same access as
``status``. The price: the API server buffers a proxied response, and the client here reads it
whole, so the streamed chunks arrive together. The time to first token is therefore reported
as an upper bound (the whole response's latency), and says so.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli import alb, https, probe
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_OK, CheckFailed, UsageError

NAME = "smoke"
HELP = "list the models and send one chat completion (through the endpoint, or the API server)"
DESCRIPTION = """\
Send GET /v1/models and one streamed POST /v1/chat/completions (temperature 0) and print the
answer, the latency and the tokens per second as measured from this machine.

With endpointExposure set, the requests go to the application endpoint (the URL from the
workload stack's outputs) with an access token: from the stack's Cognito app client (its
secret is read with cognito-idp:DescribeUserPoolClient and never printed), or from $TOKEN for
an existing identity provider. The time to first token is measured on the stream.

Otherwise (or with --via-api-server) they go to <rayServiceName>-serve-svc:8000 through the
Kubernetes API server's service proxy, which delivers the stream in one piece, so "first token"
is an upper bound there. Then the KV integrity probe, the readiness check's own: a
~2,500-token prompt with a random code only at its start, at temperature 0; the answer must
contain the code (decode reading wrong or stale KV cannot produce it). Exit 1 if the model is
not listed, no text comes back, or the probe's answer lacks the code (--no-probe skips it)."""

DEFAULT_PROMPT = "In one sentence: why separate prefill and decode onto different GPUs?"
COMPLETION_TIMEOUT_SECONDS = 180.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the user message to send")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=64,
        metavar="N",
        help="completion length limit (default: 64)",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="skip the KV integrity probe (one more chat completion)",
    )
    parser.add_argument(
        "--via-api-server",
        action="store_true",
        help="use the API server proxy even when the stack has an application endpoint",
    )
    alb.add_stack_argument(parser)


@dataclass(frozen=True)
class Completion:
    text: str
    chunks: int  # SSE data chunks that carried text
    completion_tokens: int | None  # from usage, when the server sent it
    streamed: bool


def parse_completion(body: bytes) -> Completion:
    """An SSE stream (``data: {...}`` lines, ``data: [DONE]``) or, if the server did not
    stream, a plain chat completion object."""
    text = body.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        obj = json.loads(text)
        choices = obj.get("choices") or [{}]
        content = str((choices[0].get("message") or {}).get("content") or "")
        usage = obj.get("usage") or {}
        return Completion(content, 1 if content else 0, usage.get("completion_tokens"), False)
    parts: list[str] = []
    chunks = 0
    tokens: int | None = None
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            continue
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                parts.append(str(piece))
                chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            tokens = int(usage["completion_tokens"])
    return Completion("".join(parts), chunks, tokens, True)


def _proxy(cluster: Cluster, path: str, **kwargs: Any) -> tuple[int, bytes]:
    """Call the serve service; a proxy error means the service has no ready endpoint yet."""
    config = cluster.app.config
    service = f"{config.ray_service_name}-serve-svc"
    with cluster.errors():  # access and reachability problems keep their own messages
        try:
            result: tuple[int, bytes] = cluster.client.service_proxy(
                config.namespace, service, 8000, path, **kwargs
            )
            return result
        except cluster.kube.KubeAuthError:
            raise
        except cluster.kube.KubeApiError as err:
            if err.status is None:
                raise
            raise CheckFailed(
                f"/{path} through svc/{service}:8000 failed: {err} — is the app RUNNING? "
                "Check with `ray-pd-eks status`"
            ) from None


def chat_request(app: App) -> dict[str, Any]:
    return {
        "model": app.config.model_id,
        "messages": [{"role": "user", "content": app.args.prompt}],
        "max_tokens": app.args.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def listed_models(body: bytes) -> list[str]:
    try:
        return [str(m.get("id")) for m in json.loads(body).get("data", [])]
    except (json.JSONDecodeError, AttributeError):
        raise CheckFailed(f"/v1/models did not return a model list: {body[:200]!r}") from None


def require_model(app: App, listed: list[str]) -> None:
    model_id = app.config.model_id
    if model_id not in listed:
        raise CheckFailed(
            f"/v1/models does not list '{model_id}' "
            f"(it lists: {', '.join(listed) or 'none'}): the app may still be deploying, "
            "or modelId differs from the deployed one"
        )


def require_text(completion: Completion, body: bytes) -> None:
    if not completion.text.strip():
        raise CheckFailed(
            f"the chat completion returned no text ({len(body)} bytes: {body[:200]!r}); "
            "look at the worker logs (`ray-pd-eks status`, then kubectl logs)"
        )


def report_rate(app: App, completion: Completion, seconds: float) -> None:
    tokens, source = completion.completion_tokens, "usage.completion_tokens"
    if tokens is None and completion.streamed:
        tokens, source = completion.chunks, "streamed chunks"  # one token per chunk in vLLM
    if tokens is None or seconds <= 0:
        app.print("  tokens/s    n/a  (no token count or no measurable time)")
    else:
        app.print(
            f"  tokens/s    {tokens / seconds:.1f}  ({tokens} tokens from {source} in "
            f"{seconds:.2f} s, end to end)"
        )


def run_through_endpoint(app: App) -> int:
    """The application's path: token, HTTPS to the load balancer, JWT check, Serve."""
    config = app.config
    endpoint = alb.describe(app, app.args.stack)
    app.print(
        f"Smoke test of {config.model_id} via the application endpoint {endpoint.url} "
        f"({config.endpoint_exposure} load balancer, auth {endpoint.auth})"
    )
    token = alb.bearer_token(app, endpoint)
    if endpoint.uses_cognito:
        app.print(
            f"  token       from Cognito app client {endpoint.client_id} (scope "
            f"{endpoint.scope}); secret and token not shown"
        )
    elif token is not None:
        app.print(f"  token       from ${alb.TOKEN_ENV} (issuer {endpoint.issuer})")
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    context = app.runtime.ssl_context()
    clock = app.runtime.clock

    models = https.request(
        "GET", f"{endpoint.url}/v1/models", context=context, clock=clock, headers=headers
    )
    alb.check_status("/v1/models", models)
    listed = listed_models(models.body)
    require_model(app, listed)
    app.print(f"  models      {', '.join(listed)}  ({models.total_seconds:.2f} s)")

    answer = https.request(
        "POST",
        f"{endpoint.url}/v1/chat/completions",
        context=context,
        clock=clock,
        headers={**headers, "Content-Type": "application/json", "Accept": "text/event-stream"},
        body=json.dumps(chat_request(app)).encode(),
        timeout=COMPLETION_TIMEOUT_SECONDS,
        stream=True,
    )
    alb.check_status("/v1/chat/completions", answer)
    completion = parse_completion(answer.body)
    require_text(completion, answer.body)
    app.print(f"  answer      {completion.text.strip()[:300]!r}")
    if answer.first_text_seconds is not None:
        app.print(f"  first token {answer.first_text_seconds:.2f} s  (measured on the stream)")
    app.print(f"  latency     {answer.total_seconds:.2f} s  (whole answer)")
    report_rate(app, completion, answer.total_seconds)
    if not app.args.no_probe:
        kvproof = lambda_code.kvproof()
        code = kvproof.new_code()
        reply = https.request(
            "POST",
            f"{endpoint.url}/v1/chat/completions",
            context=context,
            clock=clock,
            headers={**headers, "Content-Type": "application/json"},
            body=json.dumps(kvproof.probe_request(config.model_id, code)).encode(),
            timeout=COMPLETION_TIMEOUT_SECONDS,
        )
        alb.check_status("/v1/chat/completions (KV integrity probe)", reply)
        try:
            payload = json.loads(reply.body)
        except json.JSONDecodeError:
            payload = None
        result = kvproof.judge_answer(code, payload)
        report_probe(app, result, kvproof.probe_failure(result))
    app.print("OK: the endpoint answers")
    return EXIT_OK


def report_probe(app: App, result: Any, failure: str | None) -> None:
    """Print what the probe saw; fail (exit 1) with the reason when the code is missing."""
    app.print(f"  integrity   {result.describe()}")
    if failure:
        raise CheckFailed(failure)


def run(app: App) -> int:
    config = app.config
    if app.args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    if config.endpoint_exposed and not app.args.via_api_server:
        return run_through_endpoint(app)
    cluster = Cluster(app)
    cluster.rayservice()  # a missing RayService is exit 3 with its own fix, not a proxy 404
    clock = app.runtime.clock
    app.print(
        f"Smoke test of {config.model_id} via svc/{config.ray_service_name}-serve-svc:8000 "
        f"(API server proxy, cluster {config.cluster_name})"
    )

    started = clock()
    _, body = _proxy(cluster, "v1/models")
    models_seconds = clock() - started
    listed = listed_models(body)
    require_model(app, listed)
    app.print(f"  models      {', '.join(listed)}  ({models_seconds:.2f} s)")

    started = clock()
    _, body = _proxy(
        cluster,
        "v1/chat/completions",
        method="POST",
        json_body=chat_request(app),
        timeout=COMPLETION_TIMEOUT_SECONDS,
        retries=0,  # never send a completion twice
    )
    seconds = clock() - started
    completion = parse_completion(body)
    require_text(completion, body)
    app.print(f"  answer      {completion.text.strip()[:300]!r}")
    if completion.streamed:
        app.print(
            f"  first token <= {seconds:.2f} s  (upper bound: the proxy delivered all "
            f"{completion.chunks} chunks at once)"
        )
    else:
        app.print(f"  latency     {seconds:.2f} s  (the server did not stream)")
    report_rate(app, completion, seconds)
    if not app.args.no_probe:
        run_, _ = probe.run(cluster, None, pd=False)
        if run_.pending:
            raise CheckFailed(f"the KV integrity probe got no answer: {run_.pending}")
        report_probe(app, run_.probe, run_.failure or None)
    app.print("OK: the endpoint answers")
    return EXIT_OK
