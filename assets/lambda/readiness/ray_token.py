"""Custom resource ``Custom::RayAuthToken``: puts a random Ray token into the stack's Ray token
Secret, once, from inside the deploy, so the token never appears in a template, a
CloudFormation property, an event or a log.

The workload stack creates the Secret (``assets/manifests/ray-auth-secret.yaml``) without data;
this function (its own IAM role, mapped by an EKS access entry to a group that may only ``get``
and ``patch`` that one Secret) fills the ``auth_token`` key with 32 random bytes from
:mod:`secrets`, base64-encoded as KubeRay encodes the tokens it generates itself. A Secret that
already has a token keeps it: Updates (a redeploy, or CloudFormation rolling back) change
nothing, so the running Ray pods' token stays valid. The write is a JSON merge patch carrying
the ``resourceVersion`` it read, so it never overwrites a token someone else wrote meanwhile
(409 Conflict: read again). Delete does nothing: the Secret goes with its manifest.

Shares this folder with the readiness check for the Kubernetes client (``kube.py``) and the
Secret's key (``ray_dashboard.py``).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import kube
import ray_dashboard
from pd_lambda import props as props_helpers

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

TOKEN_BYTES = 32
CONFLICT_ATTEMPTS = 3
REQUIRED_PROPERTIES = (
    "ClusterName",
    "ClusterEndpoint",
    "ClusterCertificateAuthorityData",
    "Namespace",
    "SecretName",
)


class RayTokenError(Exception):
    """The token could not be written; the message says why and what to do."""


def new_token() -> str:
    """A fresh token: base64 of 32 random bytes (what KubeRay's generateRandomToken makes)."""
    return base64.b64encode(secrets.token_bytes(TOKEN_BYTES)).decode("ascii")


def make_client(properties: Mapping[str, Any]) -> kube.KubeClient:
    """A client authenticated as the function's own IAM role (its EKS access entry)."""
    cluster = str(properties["ClusterName"])
    return kube.KubeClient(
        str(properties["ClusterEndpoint"]),
        str(properties["ClusterCertificateAuthorityData"]),
        lambda: kube.eks_token(cluster),
        sleep=time.sleep,
    )


client_factory: Callable[[Mapping[str, Any]], kube.KubeClient] = make_client
token_factory: Callable[[], str] = new_token


def ensure_token(
    client: kube.KubeClient,
    namespace: str,
    secret: str,
    *,
    generate: Callable[[], str] = new_token,
) -> str:
    """Write a token into ``namespace/secret`` unless it has one; "kept" or "written"."""

    def missing(reason: str) -> RayTokenError:
        return RayTokenError(
            f"Secret {namespace}/{secret} does not exist ({reason}); the workload stack creates "
            "it (without data) before this resource: check that this resource depends on it"
        )

    path = ray_dashboard.secret_path(namespace, secret)
    for _ in range(CONFLICT_ATTEMPTS):
        obj = ray_dashboard.token_secret(client, namespace, secret, missing)
        if (obj.get("data") or {}).get(ray_dashboard.RAY_TOKEN_KEY):
            return "kept"
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        value = base64.b64encode(generate().encode("ascii")).decode("ascii")
        patch = {
            "metadata": {"resourceVersion": version},
            "data": {ray_dashboard.RAY_TOKEN_KEY: value},
        }
        try:
            client.request(
                "PATCH",
                path,
                body=json.dumps(patch).encode("utf-8"),
                headers={
                    "Content-Type": "application/merge-patch+json",
                    "Accept": "application/json",
                },
            )
        except kube.KubeAuthError:
            raise
        except kube.KubeApiError as exc:
            if exc.status == 409:
                continue  # changed since we read it: read again, keep a token written meanwhile
            raise
        return "written"
    raise RayTokenError(
        f"Secret {namespace}/{secret} kept changing while the token was written "
        f"({CONFLICT_ATTEMPTS} conflicts); retry the deploy"
    )


def on_event(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Create/Update: ensure the token; Delete: nothing (the id never changes on Delete)."""
    request_type = event.get("RequestType")
    if request_type == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "")}
    properties = event.get("ResourceProperties") or {}
    props_helpers.require(
        properties, REQUIRED_PROPERTIES, construct="RayAuthToken", error=RayTokenError
    )
    namespace, secret = str(properties["Namespace"]), str(properties["SecretName"])
    physical_id = f"{properties['ClusterName']}/{namespace}/{secret}"
    try:
        outcome = ensure_token(
            client_factory(properties), namespace, secret, generate=token_factory
        )
    except (RayTokenError, kube.KubeApiError) as exc:
        message = " ".join(f"Ray token for {physical_id}: {exc}".split())
        LOG.error("%s %s: FAILED: %s", request_type, physical_id, message)
        raise RayTokenError(message) from None
    # Only the outcome is logged and returned, never the token.
    LOG.info("%s %s: token %s", request_type, physical_id, outcome)
    return {"PhysicalResourceId": physical_id, "Data": {"Token": outcome}}
