"""A small Kubernetes API client for EKS: bearer token from IAM, TLS pinned to the cluster CA.

Why not the official ``kubernetes`` package: the readiness Lambda runs on the plain Python
runtime (standard library + boto3 only) and reads four kinds of objects plus two service
proxies, so a few hundred lines of ``http.client`` are cheaper than vendoring a client and its
dependencies. The project's CLI imports this module too (its ``bench`` command also creates and
deletes a Job and reads a pod's log), so the public names here are a contract. The Ray
dashboard behind the service proxy has its own module on this client, ``ray_dashboard.py``.

Failure policy (the reason this module exists rather than ``urllib``):

* 5xx, 429, connection reset/refused/aborted and timeouts are retried a bounded number of times,
  with exponential backoff through an injected ``sleep`` (tests pass a no-op);
* 401/403 raise :class:`KubeAuthError` at once, naming the EKS access entry / RBAC as the fix;
* a certificate that does not chain to the given CA raises :class:`KubeTlsError` at once;
* other 4xx (404 included) raise :class:`KubeApiError` at once with the API server's message.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import importlib
import json
import os
import select
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

TOKEN_PREFIX = "k8s-aws-v1."
# The API server accepts an EKS token for 15 minutes after signing; refreshing after 10 leaves
# room for clock skew and for a request that starts just before the refresh point.
TOKEN_REFRESH_SECONDS = 600.0
# aws-iam-authenticator signs with a 60 s expiry; EKS ignores it in favour of its own 15-minute
# window, but we keep the conventional value so the token is byte-for-byte what `aws eks
# get-token` would produce.
TOKEN_PRESIGN_EXPIRES_SECONDS = 60
CLUSTER_ID_HEADER = "x-k8s-aws-id"

_MAX_RETRY_AFTER_SECONDS = 10.0
_ERROR_BODY_CHARS = 300


class KubeApiError(Exception):
    """A Kubernetes API call failed; ``str()`` is one line a person can act on.

    ``status`` is the HTTP status (``None`` when no response arrived, e.g. connection refused or
    timeout after all retries); ``reason`` is the API server's own message (or the transport
    error), kept separately so callers can match on it without parsing the sentence.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class KubeAuthError(KubeApiError):
    """401/403: retrying cannot help; the IAM principal needs an access entry or RBAC."""


class KubeTlsError(KubeApiError):
    """The endpoint's certificate did not verify against the given cluster CA."""


class UpstreamAuthError(KubeAuthError):
    """401/403 from the service behind the API server's proxy (not a Kubernetes ``Status``):
    the proxy let us through, the backend refused the request."""


class RayAuthError(KubeAuthError):
    """The Ray token is missing, unreadable or refused by the Ray dashboard. The message names
    the Secret and the fix; it never contains the token."""


def _botocore(module: str) -> Any:
    # botocore ships no type information; importing through importlib keeps mypy strict without
    # a type-ignore that would turn stale if a stubs package is ever added, and keeps this module
    # importable (e.g. for the CLI's --help) on a machine without botocore.
    return importlib.import_module(f"botocore.{module}")


def eks_token(
    cluster_name: str,
    session: Any | None = None,
    region: str | None = None,
) -> str:
    """Return a bearer token for the EKS API server, as ``aws eks get-token`` does.

    The token is ``k8s-aws-v1.`` + unpadded base64url of a presigned STS ``GetCallerIdentity``
    URL whose signature covers the ``x-k8s-aws-id: <cluster_name>`` header, so the API server can
    prove who signed it and that it was meant for this cluster. Signing is local: no network call,
    and it works offline with fake credentials.

    ``session`` may be a ``botocore.session.Session`` or a ``boto3.Session`` (default: a new
    botocore session, i.e. the standard credential chain). ``region`` defaults to the session's
    region, then ``AWS_REGION`` / ``AWS_DEFAULT_REGION``.
    """
    if not cluster_name:
        raise ValueError("eks_token: cluster_name is empty; pass the EKS cluster's name")
    if session is None:
        session = _botocore("session").get_session()
    region = region or _session_region(session) or os.environ.get("AWS_REGION")
    region = region or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise ValueError(
            "eks_token: no AWS region; pass region= or set AWS_REGION to the cluster's region"
        )
    credentials = session.get_credentials()
    if credentials is None:
        raise KubeAuthError(
            "no AWS credentials found to sign the EKS token; configure credentials "
            "(environment, profile or role) for the principal that has the cluster access entry",
            reason="no credentials",
        )
    # boto3.Session has .client(); botocore's Session has .create_client().
    make_client = getattr(session, "create_client", None) or session.client
    sts = make_client("sts", region_name=region)
    signer = _botocore("signers").RequestSigner(
        sts.meta.service_model.service_id,
        region,
        "sts",
        "v4",
        credentials,
        sts.meta.events,
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"{sts.meta.endpoint_url}/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {CLUSTER_ID_HEADER: cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=TOKEN_PRESIGN_EXPIRES_SECONDS,
        operation_name="",
    )
    encoded = base64.urlsafe_b64encode(str(url).encode("utf-8")).decode("ascii")
    return TOKEN_PREFIX + encoded.rstrip("=")


def _session_region(session: Any) -> str | None:
    region = getattr(session, "region_name", None)  # boto3.Session
    if region is None and hasattr(session, "get_config_variable"):  # botocore Session
        region = session.get_config_variable("region")
    return str(region) if region else None


def ssl_context_from_ca_data(ca_data_b64: str) -> ssl.SSLContext:
    """Build a verifying TLS context trusting only the cluster CA (base64 PEM, as EKS returns it).

    Raises :class:`KubeTlsError` when the value is not base64 of a PEM certificate, because the
    usual cause is passing the wrong attribute (e.g. the endpoint) in its place.
    """
    try:
        pem = base64.b64decode(ca_data_b64, validate=True).decode("ascii")
        context = ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        raise KubeTlsError(
            "ClusterCertificateAuthorityData is not a base64-encoded PEM certificate "
            f"({exc}); pass the cluster's certificateAuthority.data from EKS DescribeCluster",
            reason=str(exc),
        ) from exc
    return context


class KubeClient:
    """Kubernetes API over HTTPS with a lazily fetched, periodically refreshed bearer token."""

    def __init__(
        self,
        endpoint: str,
        ca_data_b64: str,
        token_provider: Callable[[], str],
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff_seconds: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme != "https" or not parsed.hostname:
            raise ValueError(
                f"ClusterEndpoint must be an https:// URL, got {endpoint!r}; "
                "pass the cluster's endpoint from EKS DescribeCluster"
            )
        self.endpoint = endpoint.rstrip("/")
        self._host = parsed.hostname
        self._port = parsed.port or 443
        self._base_path = parsed.path.rstrip("/")
        self._context = ssl_context_from_ca_data(ca_data_b64)
        self._token_provider = token_provider
        self._timeout = timeout
        self._retries = max(0, retries)
        self._backoff = backoff_seconds
        self._sleep = sleep
        self._clock = clock
        self._token: str | None = None
        self._token_at = 0.0
        # The connection the last request left open (HTTP keep-alive): one TLS handshake for
        # a poll's dozens of reads instead of one each.
        self._idle: http.client.HTTPSConnection | None = None

    # -- public API ---------------------------------------------------------------------------

    def get_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET ``path`` and decode a JSON object (the shape of every Kubernetes read)."""
        _, body = self.request("GET", path, params=params, headers={"Accept": "application/json"})
        return decode_object(body, f"GET {path}")

    def get_text(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """GET ``path`` as text (a pod's ``/log``)."""
        _, body = self.request("GET", path, params=params, headers={"Accept": "*/*"})
        return body.decode("utf-8", errors="replace")

    def post_json(
        self, path: str, obj: Mapping[str, Any], *, retries: int | None = 0
    ) -> dict[str, Any]:
        """POST (create) one object; not retried by default, since a create is not idempotent
        (a retry after a lost response would meet 409 AlreadyExists)."""
        _, body = self.request(
            "POST",
            path,
            body=json.dumps(obj).encode("utf-8"),
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            retries=retries,
        )
        return decode_object(body, f"POST {path}")

    def delete(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """DELETE one object (``params`` such as ``propagationPolicy``); retried like reads,
        because deleting twice is harmless (the second answers 404)."""
        _, body = self.request(
            "DELETE", path, params=params, headers={"Accept": "application/json"}
        )
        return decode_object(body, f"DELETE {path}")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        max_bytes: int | None = None,
        until: Callable[[bytes], bool] | None = None,
    ) -> tuple[int, bytes]:
        """Send one request, retrying transient failures; return ``(status, body)`` for 2xx.

        ``timeout``/``retries`` override the client's defaults for one call (e.g. a chat
        completion that may legitimately take longer than a metadata read). ``max_bytes`` reads
        at most that much of a 2xx body and closes the connection (the rest is never sent on);
        ``until`` ends the read sooner, once it holds for the body read so far.
        """
        url = self._base_path + path
        if params:
            url += "?" + urllib.parse.urlencode(dict(params))
        attempts = 1 + (self._retries if retries is None else max(0, retries))
        what = f"{method} {path}"
        last_error: KubeApiError | None = None
        for attempt in range(attempts):
            if attempt:
                self._sleep(self._delay(attempt, last_error))
            try:
                status, reason, data, retry_after = self._send(
                    method, url, body, headers, timeout or self._timeout, max_bytes, until
                )
            except ssl.SSLCertVerificationError as exc:
                raise KubeTlsError(
                    f"TLS verification of {self.endpoint} failed ({exc.verify_message}): the "
                    "server certificate does not chain to ClusterCertificateAuthorityData; pass "
                    "this cluster's certificateAuthority.data",
                    reason=str(exc),
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                # Reset/refused/aborted/timeouts, TLS EOFs mid-handshake, truncated responses.
                last_error = KubeApiError(
                    f"could not reach the Kubernetes API at {self.endpoint} for {what} after "
                    f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}; check that the "
                    "caller can reach the endpoint on 443 (security group into the cluster "
                    "security group, endpoint access) and that the API server is healthy",
                    status=None,
                    reason=f"{type(exc).__name__}: {exc}",
                )
                continue
            if 200 <= status < 300:
                return status, data
            message = _status_message(data) or reason
            if status in (401, 403) and "/proxy/" in path and not _is_status(data):
                raise UpstreamAuthError(
                    f"{what}: the proxied service answered {status}: {message}",
                    status=status,
                    reason=message,
                )
            if status in (401, 403):
                raise KubeAuthError(
                    _auth_message(status, what, message), status=status, reason=message
                )
            error = KubeApiError(
                f"Kubernetes API {what} returned {status}: {message}",
                status=status,
                reason=message,
                retry_after=retry_after,
            )
            if status != 429 and status < 500:
                raise error
            last_error = error
        assert last_error is not None  # the loop always runs at least once
        raise last_error

    def service_proxy(
        self,
        namespace: str,
        service: str,
        port: int,
        path: str,
        *,
        method: str = "GET",
        json_body: dict[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
        until: Callable[[bytes], bool] | None = None,
    ) -> tuple[int, bytes]:
        """Call ``path`` on a Service through the API server's proxy subresource; ``headers``
        go to the service (the API server forwards them, except ``Authorization``).

        Why the proxy: the caller (a Lambda in the VPC) reaches the API server but has no route
        to pod IPs, and the proxy reuses the same token and RBAC (``services/proxy``).
        """
        proxy_path = (
            f"/api/v1/namespaces/{path_segment(namespace)}/services/{path_segment(service)}:{int(port)}/proxy/"
            + path.lstrip("/")
        )
        body = None
        all_headers = {"Accept": "application/json", **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            all_headers["Content-Type"] = "application/json"
        return self.request(
            method,
            proxy_path,
            body=body,
            params=params,
            headers=all_headers,
            timeout=timeout,
            retries=retries,
            max_bytes=max_bytes,
            until=until,
        )

    def pod_proxy(
        self,
        namespace: str,
        pod: str,
        port: int,
        path: str,
        *,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> str:
        """GET ``path`` on one pod's port through the API server's proxy subresource
        (``pods/proxy``), as text: how the readiness check reads a worker's metrics port
        without a route to pod IPs. The API server connects from its own interfaces, so the
        pod's NetworkPolicy must admit the control plane on that port."""
        proxy_path = (
            f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(pod)}:{int(port)}/proxy/"
            + path.lstrip("/")
        )
        _, body = self.request(
            "GET", proxy_path, headers={"Accept": "text/plain"}, timeout=timeout, retries=retries
        )
        return body.decode("utf-8", errors="replace")

    # -- internals ----------------------------------------------------------------------------

    def _bearer(self) -> str:
        now = self._clock()
        if self._token is None or now - self._token_at >= TOKEN_REFRESH_SECONDS:
            self._token = self._token_provider()
            self._token_at = now
        return self._token

    def _delay(self, attempt: int, last_error: KubeApiError | None) -> float:
        if last_error is not None and last_error.retry_after is not None:
            return min(last_error.retry_after, _MAX_RETRY_AFTER_SECONDS)
        return float(self._backoff * (2 ** (attempt - 1)))

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: float,
        max_bytes: int | None = None,
        until: Callable[[bytes], bool] | None = None,
    ) -> tuple[int, str, bytes, float | None]:
        all_headers = {"Authorization": f"Bearer {self._bearer()}", "User-Agent": "ray-pd-eks"}
        all_headers.update(headers or {})
        connection = self._connection(timeout)
        reusable = False
        try:
            connection.request(method, url, body=body, headers=all_headers)
            response = connection.getresponse()
            if max_bytes is None or not 200 <= response.status < 300:
                data = response.read()
                reusable = not response.will_close
            else:
                # The rest of the body is never read, so the connection carries nothing more.
                data = _read_some(response, max_bytes, until)
            return response.status, response.reason, data, _retry_after(response)
        finally:
            if reusable:
                self._idle = connection
            else:
                connection.close()

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        """The connection the last request left open, unless the server has closed it since
        (an API server closes an idle one after a minute or so), else a new one."""
        idle, self._idle = self._idle, None
        if idle is not None and idle.sock is not None and not _readable(idle.sock):
            idle.sock.settimeout(timeout)
            return idle
        if idle is not None:
            idle.close()
        return http.client.HTTPSConnection(
            self._host, self._port, timeout=timeout, context=self._context
        )


def _readable(sock: Any) -> bool:
    """Whether an idle connection has something to read: the server's close (or bytes nobody
    asked for); either way it cannot carry the next request."""
    if hasattr(select, "poll"):  # not on Windows; poll has no limit on descriptor numbers
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


READ_CHUNK_BYTES = 64 * 1024


def _read_some(
    response: http.client.HTTPResponse, max_bytes: int, until: Callable[[bytes], bool] | None
) -> bytes:
    """At most ``max_bytes`` of the body, in chunks, ending early once ``until`` holds."""
    data = bytearray()
    while len(data) < max_bytes:
        chunk = response.read(min(READ_CHUNK_BYTES, max_bytes - len(data)))
        if not chunk:
            break
        data += chunk
        if until is not None and until(bytes(data)):
            break
    return bytes(data)


def path_segment(segment: str) -> str:
    """``segment`` quoted for a URL path (a ``/`` in it is quoted too)."""
    return urllib.parse.quote(segment, safe="")


def _retry_after(response: http.client.HTTPResponse) -> float | None:
    value = response.getheader("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def decode_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KubeApiError(
            f"{what} returned a body that is not JSON ({exc}): {_snippet(body)}",
            reason="invalid JSON",
        ) from exc
    if not isinstance(value, dict):
        raise KubeApiError(f"{what} returned JSON that is not an object", reason="not an object")
    return value


def _is_status(body: bytes) -> bool:
    """Whether a body is a Kubernetes ``Status`` (an error of the API server itself)."""
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(value, dict) and value.get("kind") == "Status"


def _status_message(body: bytes) -> str:
    """Pull ``message`` out of a Kubernetes ``Status`` body, else a short snippet of the body."""
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _snippet(body)
    if isinstance(value, dict):
        for key in ("message", "msg", "detail", "error"):
            if isinstance(value.get(key), str) and value[key]:
                return str(value[key])
    return _snippet(body)


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text[:_ERROR_BODY_CHARS]


def _auth_message(status: int, what: str, message: str) -> str:
    if status == 401:
        return (
            f"Kubernetes API rejected the token for {what} (401 Unauthorized: {message}); the "
            "caller's IAM role needs an EKS access entry on this cluster, and the token must be "
            "signed for this cluster name (x-k8s-aws-id) in the cluster's region"
        )
    return (
        f"Kubernetes API denied {what} (403 Forbidden: {message}); grant the caller's Kubernetes "
        "group the verb on this resource in its ClusterRole/RoleBinding (RBAC), via the IAM "
        "role's EKS access entry"
    )


__all__ = [
    "KubeApiError",
    "KubeAuthError",
    "KubeClient",
    "KubeTlsError",
    "RayAuthError",
    "UpstreamAuthError",
    "decode_object",
    "eks_token",
    "path_segment",
    "ssl_context_from_ca_data",
]
