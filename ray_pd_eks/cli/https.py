"""A small HTTPS client for the application endpoint and its OAuth token endpoint.

``http.client`` rather than ``urllib``: the chat completion is read as it streams, so the time
to the first token is measured, not the time to the whole answer; and TLS failures (a
certificate that does not cover the name) are told apart from refused connections.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ray_pd_eks.cli.errors import AccessError
from ray_pd_eks.config import set_hint


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds from sending the request to the first SSE data line that carried text
    # (streamed requests only), and to the end of the body.
    first_text_seconds: float | None = None
    total_seconds: float = 0.0


def _has_text(line: bytes) -> bool:
    """An SSE ``data:`` line of a chat chunk whose delta carries content."""
    return line.startswith(b"data:") and b'"content":"' in line.replace(b'": "', b'":"')


def request(
    method: str,
    url: str,
    *,
    context: ssl.SSLContext,
    clock: Callable[[], float],
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 30.0,
    stream: bool = False,
) -> Response:
    """One request; raises :class:`AccessError` when the server cannot be reached or its
    certificate is not valid for the host (the message says which)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise AccessError(f"{url}: expected an https:// URL")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    connection = http.client.HTTPSConnection(
        parts.hostname, parts.port or 443, context=context, timeout=timeout
    )
    started = clock()
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        first: float | None = None
        if stream:
            chunks = []
            while line := response.readline():
                if first is None and _has_text(line):
                    first = clock() - started
                chunks.append(line)
            data = b"".join(chunks)
        else:
            data = response.read()
        return Response(
            status=response.status,
            body=data,
            headers={k.lower(): v for k, v in response.getheaders()},
            first_text_seconds=first,
            total_seconds=clock() - started,
        )
    except ssl.SSLCertVerificationError as err:
        raise AccessError(
            f"TLS to {parts.hostname} failed: {err.verify_message}. The certificate must cover "
            "the name you connect to: set "
            f"{set_hint('endpointDomainName', '<a name the certificate covers>')} and point its "
            "DNS record at the load balancer (docs/endpoint.md)"
        ) from None
    except (OSError, http.client.HTTPException) as err:
        raise AccessError(
            f"cannot reach {parts.scheme}://{parts.netloc} ({err}): an internal load balancer "
            "is reachable only from the VPC and connected networks, and only from "
            "endpointAllowedCidrs"
        ) from None
    finally:
        connection.close()
