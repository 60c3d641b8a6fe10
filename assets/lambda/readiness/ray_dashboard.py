"""The Ray dashboard (the head service, port 8265) through the Kubernetes API server's service
proxy, with Ray token authentication: the reads the readiness check and the CLI make of Serve's
applications, the state API's nodes, log files and actors, and a Ray job's submission.

It rides on :mod:`kube`'s client (its retries, TLS and errors); a refusal by the dashboard is
:class:`kube.RayAuthError`, never a "not running" result.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

import kube

# Ray token authentication (Ray >= 2.52; KubeRay's rayClusterConfig.authOptions). The dashboard's
# aiohttp middleware (Ray 2.58: ray/_private/authentication/http_token_authentication.py) takes
# the token from `Authorization`, else `X-Ray-Authorization`, else a cookie; the API server's
# proxy consumes `Authorization` (our EKS token) itself, so the Ray token travels in the second,
# as KubeRay's own dashboard client sends it. Missing token: 401, wrong token: 403, both with a
# plain-text body. The token is the `auth_token` key of the Secret authOptions.secretName names.
RAY_AUTH_HEADER = "X-Ray-Authorization"
RAY_TOKEN_KEY = "auth_token"


def secret_path(namespace: str, secret: str) -> str:
    """The API path of Secret ``namespace/secret``."""
    return f"/api/v1/namespaces/{kube.path_segment(namespace)}/secrets/{kube.path_segment(secret)}"


def token_secret(
    client: kube.KubeClient,
    namespace: str,
    secret: str,
    missing: Callable[[str], Exception],
) -> dict[str, Any]:
    """The Ray token's Secret object (RBAC: ``get`` on that one Secret). A 404 raises what
    ``missing`` makes of the API server's reason; a denial raises :class:`kube.KubeAuthError`;
    any other error as :mod:`kube` raises it."""
    try:
        return client.get_json(secret_path(namespace, secret))
    except kube.KubeAuthError:
        raise
    except kube.KubeApiError as exc:
        if exc.status == 404:
            raise missing(exc.reason) from None
        raise


def read_ray_token(client: kube.KubeClient, namespace: str, secret: str) -> str:
    """The Ray token from ``secret``'s ``auth_token`` key (RBAC: ``get`` on that one Secret).

    Raises :class:`kube.RayAuthError` when the Secret or the key is missing,
    :class:`kube.KubeAuthError` when RBAC denies the read. Never logs or echoes the value.
    """
    obj = token_secret(
        client,
        namespace,
        secret,
        lambda reason: kube.RayAuthError(
            f"the Ray token Secret {namespace}/{secret} does not exist ({reason}); it is "
            "the one rayClusterConfig.authOptions.secretName names, created with the "
            "workload stack: redeploy it",
            status=404,
            reason=reason,
        ),
    )
    encoded = (obj.get("data") or {}).get(RAY_TOKEN_KEY)
    try:
        token = base64.b64decode(encoded or "", validate=True).decode("utf-8").strip()
    except (binascii.Error, ValueError):
        token = ""
    if not token:
        raise kube.RayAuthError(
            f"the Ray token Secret {namespace}/{secret} has no usable {RAY_TOKEN_KEY!r} key; the "
            "workload stack's RayAuthToken resource writes it: redeploy the workload stack",
            reason=f"no {RAY_TOKEN_KEY}",
        )
    return token


class RayDashboard:
    """The Ray dashboard (head service, port 8265) reached through the API server proxy.

    Only the read endpoints this project needs: Serve application details (replica placement)
    and the state API's node list and log files, which let us read worker logs without
    ``kubectl exec`` (no ``pods/exec`` permission needed).

    ``token_secret`` names the Secret holding the Ray token (Ray token authentication): it is
    read once, on the first call, and sent as ``X-Ray-Authorization: Bearer <token>``; None
    sends no token (a cluster without authentication). A refusal by the dashboard raises
    :class:`kube.RayAuthError`, never a "not running" result.
    """

    def __init__(
        self,
        client: kube.KubeClient,
        namespace: str,
        rayservice: str,
        *,
        port: int = 8265,
        token_secret: str | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.service = f"{rayservice}-head-svc"
        self.port = port
        self.token_secret = token_secret
        self._token: str | None = None

    def serve_applications(self) -> dict[str, Any]:
        """``GET /api/serve/applications/``: apps → deployments → replicas (node_id, node_ip)."""
        _, body = self._get("api/serve/applications/")
        return kube.decode_object(body, "GET /api/serve/applications/")

    def nodes(self) -> list[dict[str, Any]]:
        """Ray nodes from the state API (``node_id``, ``node_ip``, ``is_head_node``, ``state``)."""
        data = self._state_api("api/v0/nodes", {"limit": "1000"})
        rows = data.get("result") if isinstance(data, dict) else None
        return [row for row in rows or [] if isinstance(row, dict)]

    def list_log_files(self, node_id: str) -> list[str]:
        """Every log file name on a Ray node (flattened over the API's categories)."""
        data = self._state_api("api/v0/logs", {"node_id": node_id})
        files: list[str] = []
        if isinstance(data, dict):
            for names in data.values():
                if isinstance(names, list):
                    files.extend(str(name) for name in names)
        return files

    def read_log(self, node_id: str, filename: str, *, lines: int = 2000) -> str:
        """The last ``lines`` lines of one log file, as text (the body is the file's bytes:
        Ray 2.58's ``state_head.get_logs`` has no format parameter, so none is sent)."""
        _, body = self._get(
            "api/v0/logs/file",
            {"node_id": node_id, "filename": filename, "lines": str(lines)},
        )
        return body.decode("utf-8", errors="replace")

    def read_log_head(
        self,
        node_id: str,
        filename: str,
        *,
        max_bytes: int,
        until: Callable[[str], bool] | None = None,
    ) -> tuple[str, bool]:
        """The first ``max_bytes`` of one log file (fewer once ``until`` holds for the text read
        so far), and whether that was the whole file (False when ``until`` ended the read).

        Ray 2.58's log API has no offset or byte range over HTTP: ``state_head.get_logs`` takes
        ``filename``, ``lines``, ``interval`` (only with ``media_type`` stream), ``suffix`` and
        ``attempt_number``; start and end offsets exist only inside, for task logs
        (``log_manager.resolve_filename``). ``lines=N`` makes the agent seek back N lines from
        the end (``log_agent.find_start_offset_last_n_lines_from_offset``); ``lines=-1`` skips
        that and streams from offset 0 in 64 KiB blocks (``log_agent.StreamLog``,
        ``_stream_log_in_chunk``), which the head relays as they come (``StreamResponse``). So
        the beginning of a long file costs what is read of it: the connection closes after
        ``max_bytes``, or sooner.
        """
        stop = None if until is None else (lambda data: until(data.decode("utf-8", "replace")))
        _, body = self._get(
            "api/v0/logs/file",
            {"node_id": node_id, "filename": filename, "lines": "-1"},
            max_bytes=max_bytes,
            until=stop,
        )
        text = body.decode("utf-8", errors="replace")
        # Short of max_bytes is the end of the file, unless ``until`` ended the read.
        return text, len(body) < max_bytes and (until is None or not until(text))

    def alive_actor_pids(self, limit: int = 1000) -> dict[str, set[int]] | None:
        """The pids of the ALIVE actors per Ray node id (state API ``api/v0/actors``, filtered
        on ``state`` by the dashboard: ``state_api_utils.do_filter``; ``ActorState`` carries
        ``node_id``, ``pid``, ``state``, not the worker id). None when the list may be cut
        short (``limit`` rows or more)."""
        data = self._state_api(
            "api/v0/actors",
            {
                "filter_keys": "state",
                "filter_predicates": "=",
                "filter_values": "ALIVE",
                "limit": str(limit),
            },
        )
        rows = data.get("result") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) >= limit:
            return None
        pids: dict[str, set[int]] = {}
        for row in rows:
            if not isinstance(row, dict) or str(row.get("state", "")).upper() != "ALIVE":
                continue
            pid, node = row.get("pid"), row.get("node_id")
            if isinstance(pid, int) and pid > 0 and isinstance(node, str) and node:
                pids.setdefault(node, set()).add(pid)
        return pids

    def call(
        self, method: str, path: str, *, json_body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One JSON call on the dashboard with the Ray token (the CLI's drill submits and
        follows a Ray job with it: ``POST api/jobs/``, ``GET api/jobs/<id>``); only reads are
        retried, since a submission is not idempotent."""
        try:
            _, body = self.client.service_proxy(
                self.namespace,
                self.service,
                self.port,
                path,
                method=method,
                json_body=json_body,
                headers=self._headers(),
                retries=None if method == "GET" else 0,
            )
        except kube.UpstreamAuthError as exc:
            raise kube.RayAuthError(
                self._refusal(exc), status=exc.status, reason=exc.reason
            ) from None
        return kube.decode_object(body, f"{method} /{path}")

    def _headers(self) -> dict[str, str]:
        if not self.token_secret:
            return {}
        if self._token is None:
            self._token = read_ray_token(self.client, self.namespace, self.token_secret)
        return {RAY_AUTH_HEADER: f"Bearer {self._token}"}

    def _get(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        max_bytes: int | None = None,
        until: Callable[[bytes], bool] | None = None,
    ) -> tuple[int, bytes]:
        try:
            return self.client.service_proxy(
                self.namespace,
                self.service,
                self.port,
                path,
                params=params,
                headers=self._headers(),
                max_bytes=max_bytes,
                until=until,
            )
        except kube.UpstreamAuthError as exc:
            raise kube.RayAuthError(
                self._refusal(exc), status=exc.status, reason=exc.reason
            ) from None

    def _refusal(self, exc: kube.UpstreamAuthError) -> str:
        where = f"the Ray dashboard ({self.namespace}/{self.service}:{self.port})"
        if not self.token_secret:
            return (
                f"{where} requires a Ray token ({exc.status}: {exc.reason}) and none was "
                "configured; pass the Secret that rayClusterConfig.authOptions.secretName names"
            )
        if exc.status == 401:
            return (
                f"{where} did not receive the Ray token ({exc.status}: {exc.reason}); a proxy "
                f"between us and the dashboard dropped the {RAY_AUTH_HEADER} header"
            )
        return (
            f"{where} refused the Ray token from Secret {self.namespace}/{self.token_secret} "
            f"({exc.status}: {exc.reason}): the Ray pods started with another token; restart "
            f"them so they read the Secret again (kubectl delete pod -n {self.namespace} -l "
            "ray-pd-eks/ray-service) or put their token back into the Secret"
        )

    def _state_api(self, path: str, params: Mapping[str, str]) -> Any:
        # State API replies are {"result": <ok>, "msg": <error>, "data": {"result": <payload>}}.
        _, body = self._get(path, params)
        envelope = kube.decode_object(body, f"GET {path}")
        if envelope.get("result") is False:
            raise kube.KubeApiError(
                f"Ray dashboard {path} failed: {envelope.get('msg') or 'no message'}",
                status=None,
                reason=str(envelope.get("msg") or ""),
            )
        data = envelope.get("data")
        return data.get("result") if isinstance(data, dict) else None
