"""The app's Kubernetes-facing Lambda code (assets/lambda/readiness/), run against the local
API server under the identity its EKS access entry gives it (a static token of
scripts/cluster/tokens.csv carrying the entry's groups): the same code, a different endpoint,
CA and bearer token."""

from __future__ import annotations

import base64
import time
from typing import Any

from ray_pd_eks import lambda_code
from tests_cluster.kube import Cluster, tokens

kube = lambda_code.kube()


def client(cluster: Cluster, identity: str) -> Any:
    token = tokens()[identity].token
    ca = base64.b64encode(cluster.ca_pem).decode()
    return kube.KubeClient(cluster.url, ca, lambda: token, timeout=10, retries=1, sleep=time.sleep)


def local_properties(cluster: Cluster, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        **properties,
        "ClusterName": "local",
        "ClusterEndpoint": cluster.url,
        "ClusterCertificateAuthorityData": base64.b64encode(cluster.ca_pem).decode(),
    }


def write_token(cluster: Cluster, properties: dict[str, Any]) -> str:
    """Custom::RayAuthToken: fill the Ray token Secret (written, or kept when it has one)."""
    writer = lambda_code.ray_token()
    return str(
        writer.ensure_token(
            client(cluster, "token-writer"), properties["Namespace"], properties["SecretName"]
        )
    )


def recreate_until_done(cluster: Cluster, properties: dict[str, Any], timeout_s: float = 90) -> str:
    """Custom::RayServiceRecreate, polled as its Provider polls it, until it says done."""
    recreate = lambda_code.recreate()
    props = recreate.Props.from_properties(local_properties(cluster, properties))
    api = client(cluster, "recreate")
    deadline = time.monotonic() + timeout_s
    notes = []
    while time.monotonic() < deadline:
        done, note = recreate.poll(props, api)
        notes.append(note)
        if done is not None:
            return str(done)
        time.sleep(0.25)  # the Provider polls every 15 s; the local control plane is quicker
    raise AssertionError(f"the recreate did not finish in {timeout_s:.0f}s: {notes[-3:]}")
