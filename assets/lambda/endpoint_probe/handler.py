"""The endpoint probe: ONE authenticated chat completion through the application endpoint's
load balancer, after the readiness check proved the model inside the cluster
(pd_constructs/readiness/endpoint_probe.py; docs/readiness.md, "Through the load balancer").

With the stack's Cognito client (``UserPoolId``/``ClientId`` set) it reads the client's secret
at run time (``cognito-idp:DescribeUserPoolClient``: the secret is never in the template, the
event or the logs), gets an access token by the OAuth 2.0 client-credentials grant from
``TokenUrl`` with ``Scope``, then POSTs a short chat completion to ``https://<LoadBalancerDns>``
with ``Authorization: Bearer <token>``. Without them (``endpointAuth=none``) it sends none.

Answers: 200 with a choice succeeds; 401/403 fails at once (the ALB refused the token: JWKS
fetch, scope/audience, or the WAF's rate limit); 502/503/504 (the ALB's "no healthy target")
and connection errors are retried until ``WaitSeconds`` has passed (the target group may still
be registering the serve pods), then fail naming target health; any other answer fails at once.
Delete and CloudFormation's rollback Update answer at once.

TLS: the certificate's chain is verified; its name is checked against ``Host`` (the
``endpointDomainName``, sent as SNI and ``Host``) when set. Without a domain name the listener's
certificate cannot cover the ALB's own DNS name, so only the chain is checked: the name comes
from the stack's own template.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pd_lambda import rollback

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

PROMPT = "Reply with the single word: ready."
MAX_TOKENS = 8
REQUEST_TIMEOUT_SECONDS = 60.0
RETRY_INTERVAL_SECONDS = 10.0
RETRYABLE = (502, 503, 504)
OUTPUT_KEY = "EndpointProbe"


class ProbeFailed(Exception):
    """The endpoint did not answer as a client expects; the message says what to check."""


@dataclass(frozen=True)
class Props:
    load_balancer_dns: str
    host: str
    port: int
    model_id: str
    token_url: str
    user_pool_id: str
    client_id: str
    scope: str
    wait_seconds: int

    @classmethod
    def from_properties(cls, p: Mapping[str, Any]) -> Props:
        return cls(
            load_balancer_dns=str(p["LoadBalancerDns"]),
            host=str(p.get("Host") or ""),
            port=int(str(p.get("Port") or 443)),
            model_id=str(p["ModelId"]),
            token_url=str(p.get("TokenUrl") or ""),
            user_pool_id=str(p.get("UserPoolId") or ""),
            client_id=str(p.get("ClientId") or ""),
            scope=str(p.get("Scope") or ""),
            wait_seconds=int(str(p.get("WaitSeconds") or 300)),
        )

    @property
    def uses_cognito(self) -> bool:
        return bool(self.user_pool_id and self.client_id)


def on_event(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    request = event["RequestType"]
    physical_id = str(event.get("PhysicalResourceId") or "endpoint-probe")
    if request == "Delete":
        return {"PhysicalResourceId": physical_id}
    if request == "Update" and rollback.stack_rolling_back(event):
        return {
            "PhysicalResourceId": physical_id,
            "Data": {OUTPUT_KEY: "not probed: answering CloudFormation's rollback at once"},
        }
    props = Props.from_properties(event["ResourceProperties"])
    try:
        summary = probe(props)
    except ProbeFailed as exc:
        LOG.error("endpoint probe failed: %s", exc)
        raise
    LOG.info("endpoint probe: %s", summary)
    return {"PhysicalResourceId": "endpoint-probe", "Data": {OUTPUT_KEY: summary}}


def probe(
    props: Props,
    *,
    cognito: Any = None,
    context: ssl.SSLContext | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """The one chat completion; returns a one-line summary or raises :class:`ProbeFailed`."""
    context = context or ssl.create_default_context()
    headers = {"Content-Type": "application/json"}
    how = "without a token (endpointAuth=none)"
    if props.uses_cognito:
        secret = client_secret(props, cognito)
        headers["Authorization"] = f"Bearer {access_token(props, secret, context)}"
        how = f"with a Cognito access token (client credentials, scope {props.scope})"
    body = json.dumps(
        {
            "model": props.model_id,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
        }
    ).encode()
    url = f"https://{props.host or props.load_balancer_dns}/v1/chat/completions"
    deadline = clock() + props.wait_seconds
    attempts = 0
    while True:
        attempts += 1
        started = clock()
        status, text, error = _post(props, body, headers, context)
        elapsed = clock() - started
        if status == 200:
            return _success(text, url, how, elapsed, attempts)
        if status in (401, 403):
            raise ProbeFailed(_refused(props, status, text))
        if status is not None and status not in RETRYABLE:
            raise ProbeFailed(
                f"POST {url} answered {status} ({_snippet(text)}): the request reached the "
                "load balancer; check the Serve application's logs (ray-pd-eks status)"
            )
        if clock() + RETRY_INTERVAL_SECONDS > deadline:
            raise ProbeFailed(_gave_up(props, url, status, text, error, attempts))
        LOG.info("attempt %d: %s; retrying", attempts, error or f"{status} {_snippet(text)}")
        sleep(RETRY_INTERVAL_SECONDS)


def client_secret(props: Props, cognito: Any = None) -> str:
    """The app client's secret, read now (never logged)."""
    if cognito is None:
        import boto3  # the Lambda runtime's

        cognito = boto3.client("cognito-idp")
    try:
        answer = cognito.describe_user_pool_client(
            UserPoolId=props.user_pool_id, ClientId=props.client_id
        )
    except Exception as exc:  # botocore's ClientError/BotoCoreError
        raise ProbeFailed(
            f"cognito-idp DescribeUserPoolClient on client {props.client_id} of pool "
            f"{props.user_pool_id} failed ({exc}): check the probe role's policy and its "
            "HTTPS egress through the NAT gateway"
        ) from None
    secret = str(answer.get("UserPoolClient", {}).get("ClientSecret") or "")
    if not secret:
        raise ProbeFailed(f"app client {props.client_id} has no secret (generate_secret is off)")
    return secret


def access_token(props: Props, secret: str, context: ssl.SSLContext) -> str:
    """An access token by the client-credentials grant (RFC 6749 section 4.4)."""
    basic = base64.b64encode(f"{props.client_id}:{secret}".encode()).decode()
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "scope": props.scope})
    request = urllib.request.Request(
        props.token_url,
        data=form.encode(),
        headers={
            "Authorization": f"Basic {basic}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(
            request, timeout=REQUEST_TIMEOUT_SECONDS, context=context
        ) as answer:
            token = json.loads(answer.read()).get("access_token")
    except urllib.error.HTTPError as exc:
        detail = _snippet(exc.read().decode(errors="replace"))
        raise ProbeFailed(
            f"the token endpoint {props.token_url} answered {exc.code} ({detail}): check the "
            f"app client {props.client_id} allows the client-credentials grant for scope "
            f"{props.scope}"
        ) from None
    except (OSError, ValueError) as exc:
        raise ProbeFailed(
            f"the token endpoint {props.token_url} could not be reached ({exc}): check the "
            "probe's HTTPS egress (its security group, the NAT gateway)"
        ) from None
    if not token:
        raise ProbeFailed(f"the token endpoint {props.token_url} answered without access_token")
    return str(token)


class _Connection(http.client.HTTPSConnection):
    """HTTPS to the load balancer's address, with ``server_name`` as SNI and checked name."""

    def __init__(
        self, address: str, port: int, server_name: str, context: ssl.SSLContext, timeout: float
    ) -> None:
        super().__init__(address, port, timeout=timeout, context=context)
        self._server_name = server_name
        self._tls = context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)


def _post(
    props: Props, body: bytes, headers: Mapping[str, str], context: ssl.SSLContext
) -> tuple[int | None, str, str]:
    """(status, body text, connection error): status None when no answer came."""
    if not props.host:
        # The listener's certificate covers endpointDomainName, not the ALB's own name.
        context = _chain_only(context)
    server_name = props.host or props.load_balancer_dns
    conn = _Connection(
        props.load_balancer_dns, props.port, server_name, context, REQUEST_TIMEOUT_SECONDS
    )
    try:
        conn.request(
            "POST", "/v1/chat/completions", body=body, headers={**headers, "Host": server_name}
        )
        answer = conn.getresponse()
        return answer.status, answer.read().decode(errors="replace"), ""
    except (OSError, http.client.HTTPException) as exc:
        return None, "", f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def _chain_only(context: ssl.SSLContext) -> ssl.SSLContext:
    copy = ssl.create_default_context()
    copy.check_hostname = False
    copy.verify_mode = ssl.CERT_REQUIRED
    # Keep the caller's trust (the default store, or a test's CA).
    for cert in context.get_ca_certs(binary_form=True):
        copy.load_verify_locations(cadata=cert)
    return copy


def _success(text: str, url: str, how: str, elapsed: float, attempts: int) -> str:
    try:
        choices = json.loads(text).get("choices") or []
        content = str(choices[0].get("message", {}).get("content", ""))
    except (ValueError, AttributeError, IndexError, TypeError):
        raise ProbeFailed(
            f"POST {url} answered 200 but not a chat completion ({_snippet(text)}): is the "
            "target group bound to the Ray serve service?"
        ) from None
    tries = "" if attempts == 1 else f" after {attempts} attempts"
    return (
        f"chat completion through {url} {how}: 200 in {elapsed:.1f} s{tries}, "
        f"{content.strip()[:40]!r}"
    )


def _refused(props: Props, status: int, text: str) -> str:
    who = (
        "the load balancer refused the token"
        if props.uses_cognito
        else "the load balancer refused the request"
    )
    return (
        f"{status} from https://{props.load_balancer_dns} ({_snippet(text)}): {who}. Check that "
        "the ALB can fetch the issuer's JWKS (its security group's HTTPS egress, rule 'JWKS of "
        "the token issuer'), that the token's scope/audience match the listener's claims "
        f"(scope {props.scope or '-'}, token_use access), and for 403 the WAF rate limit"
    )


def _gave_up(
    props: Props, url: str, status: int | None, text: str, error: str, attempts: int
) -> str:
    if status is not None:
        return (
            f"POST {url} still answered {status} ({_snippet(text)}) after {attempts} attempts "
            f"in {props.wait_seconds} s: the load balancer has no healthy target. Check the "
            "target health (aws elbv2 describe-target-health) and the TargetGroupBinding's "
            "events (kubectl describe targetgroupbinding -n <namespace>)"
        )
    return (
        f"no answer from {url} after {attempts} attempts in {props.wait_seconds} s ({error}): "
        "check that the ALB's security group admits the probe (its security group for an "
        "internal ALB, the NAT gateway's address for an internet-facing one) on 443"
    )


def _snippet(text: str) -> str:
    return " ".join(text.split())[:160] or "empty body"
