"""A fake application endpoint: the Cognito token endpoint and the ALB in front of Serve, on
one real TLS server on 127.0.0.1.

What it does like the real ones:

* ``POST /oauth2/token`` (Cognito's OAuth 2.0 token endpoint): HTTP basic authentication with
  the app client's id and secret, form ``grant_type=client_credentials`` and ``scope``; answers
  ``{"access_token", "expires_in": 3600, "token_type": "Bearer"}`` or Cognito's error bodies
  (``invalid_client`` 401, ``unsupported_grant_type``/``invalid_scope`` 400).
* ``GET /v1/models`` and ``POST /v1/chat/completions`` behind the listener's JWT check: without
  ``Authorization: Bearer <a token it issued or was told to accept>`` the load balancer answers
  401 before the request reaches Serve. The completion streams as SSE, one flushed line per
  chunk, so the client can time the first token.
* ``status_override`` stands for the ALB's own answers (503 with no healthy target).
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import ssl
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_api import KeepAliveHandler, _shared_ca, serve_tls

CLIENT_ID = "4example0client0id0abcdefgh"
CLIENT_SECRET = "s3cr3t-client-secret-value-for-tests-only-0123456789"
SCOPE = "ray-llm/invoke"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeEndpoint:
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET
    scope: str = SCOPE
    auth: str = "jwt"  # or "none": the listener forwards everything
    models: list[str] = field(default_factory=lambda: ["qwen3.5-9b"])
    chunks: list[str] = field(default_factory=lambda: ["Prefill ", "and decode ", "split."])
    accepted_tokens: set[str] = field(default_factory=set)
    status_override: int | None = None  # the ALB's own answer for /v1/*
    # The KV integrity probe's answer (a request carrying "access code exactly: <code>."):
    # None answers with the code, as an intact KV cache does.
    probe_answer: str | None = None
    cert_names: tuple[str, ...] = ()  # empty: the shared 127.0.0.1/localhost certificate
    requests: list[Recorded] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)

    def start(self) -> FakeEndpoint:
        ca, cert = _shared_ca()
        if self.cert_names:
            cert = ca.issue_cert(*self.cert_names)
        self._httpd, self._thread = serve_tls(_Server, _Handler, self, cert)
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    @staticmethod
    def client_context() -> ssl.SSLContext:
        """A client context that trusts the fake's CA (as a real client trusts ACM's), and only
        it: the machine's CA bundle would take 30 ms to load for every test that calls."""
        ca, _ = _shared_ca()
        return ssl.create_default_context(cadata=ca.cert_pem.bytes().decode("ascii"))

    # -- behaviour -------------------------------------------------------------------------

    def token(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if headers.get("authorization") != f"Basic {expected}":
            return 401, {"error": "invalid_client"}
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if form.get("scope") != self.scope:
            return 400, {"error": "invalid_scope"}
        token = f"eyJhbGciOiJSUzI1NiJ9.fake-access-token-{len(self.issued) + 1}.sig"
        self.issued.append(token)
        return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}

    def authorized(self, headers: dict[str, str]) -> bool:
        if self.auth == "none":
            return True
        value = headers.get("authorization", "")
        token = value.removeprefix("Bearer ")
        return value.startswith("Bearer ") and (
            token in self.issued or token in self.accepted_tokens
        )


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: Any, handler: Any, context: ssl.SSLContext, fake: FakeEndpoint):
        super().__init__(address, handler)
        self.context = context
        self.fake = fake

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a client that rejects the certificate
        try:
            _Handler(tls, client_address, self)
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class _Handler(KeepAliveHandler):
    server: _Server

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake.requests.append(Recorded(self.command, self.path, headers, body))
        if self.command == "POST" and self.path == "/oauth2/token":
            status, answer = fake.token(headers, body)
            self._send(status, json.dumps(answer).encode())
            return
        if not fake.authorized(headers):
            # The ALB's own page: the request never reaches the targets.
            self._send(401, b"<html><body>401 Authorization Required</body></html>", "text/html")
            return
        if fake.status_override is not None:
            self._send(fake.status_override, b"<html>503 Service Temporarily Unavailable</html>")
            return
        if self.command == "GET" and self.path == "/v1/models":
            data = [{"id": m, "object": "model"} for m in fake.models]
            self._send(200, json.dumps({"object": "list", "data": data}).encode())
            return
        probe = re.search(rb"access code exactly: ([A-Z0-9]+)\.", body)
        streamed = re.search(rb'"stream": *true', body) is not None
        if self.command == "POST" and self.path == "/v1/chat/completions" and not streamed:
            # Not streamed (the KV integrity probe, the deploy's endpoint probe): one JSON
            # answer; an intact KV cache returns the probe's code.
            code = fake.probe_answer or (
                f"The code is {probe.group(1).decode()}." if probe else "ready"
            )
            answer = {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": code}}],
                "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 6},
            }
            self._send(200, json.dumps(answer).encode())
            return
        if self.command == "POST" and self.path == "/v1/chat/completions":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            lines: list[dict[str, Any]] = [
                {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
            ]
            lines += [{"choices": [{"index": 0, "delta": {"content": c}}]} for c in fake.chunks]
            lines.append({"choices": [], "usage": {"completion_tokens": len(fake.chunks)}})
            for obj in lines:
                self._chunk(f"data: {json.dumps(obj)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            return
        self._send(404, b'{"detail": "Not Found"}')

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
