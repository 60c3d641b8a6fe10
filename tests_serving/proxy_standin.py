"""A stand-in for the API server's proxy path in front of the real serving plane.

The readiness Lambda, the KV probe and the CLI reach Ray only through the API server's
``services/<svc>:<port>/proxy/...`` and ``pods/<pod>:<port>/proxy/...`` subresources. The real
kube-apiserver of the cluster tier cannot be that proxy here: it refuses to proxy to loopback
addresses (``proxy: Address is not allowed``, k8s.io/apimachinery ``proxy/dial``), and every
Ray node here lives on the loopback range. So this module keeps the fake API server
(``tests/fakes/kube_api.py``, itself held to the real one by ``tests_cluster/
test_fake_vs_real.py``) for the Kubernetes objects (the RayService, the pods, whose IPs are the
Ray nodes' addresses) and replaces only its proxy answers: every proxied request is forwarded,
method, path, query, headers (the ``X-Ray-Authorization`` token included) and body, to the real
head service (dashboard 8265, Serve 8000) or to the real worker node's metrics port, and the
real answer comes back unchanged. Nothing about Ray, Serve, vLLM or NIXL is made up here.
"""

from __future__ import annotations

import http.client
import urllib.parse
from datetime import UTC, datetime

from ray_pd_eks.rehearse.plane import (
    DASHBOARD_PORT,
    HEAD_IP,
    RAY_TOKEN,
    SERVE_PORT,
    WORKER_IPS,
    RenderedApp,
    metrics_port,
)
from tests.fakes.kube_api import (
    HEAD_POD,
    SYSTEM_NODE,
    WORKER_POD_A,
    WORKER_POD_B,
    FakeKubeApi,
    ProxyRequest,
    ProxyResponse,
    make_node,
    make_pod,
    make_rayservice,
    make_secret,
)

WORKER_PODS = (WORKER_POD_A, WORKER_POD_B)
GPU_NODES = ("gpu-node-a", "gpu-node-b")
# The ports the RayService's pods expose and the proxy paths name (rayservice.yaml).
POD_METRICS_PORT = 8080


def _forward(host: str, port: int, request: ProxyRequest) -> ProxyResponse:
    """``request`` sent to ``host:port`` (the real backend); its answer, as the proxy gives it."""
    query = request.query
    target = "/" + request.rest + ("?" + urllib.parse.urlencode(query) if query else "")
    keep = {
        k: v
        for k, v in request.headers.items()
        if k.lower() in ("x-ray-authorization", "content-type", "accept")
    }
    connection = http.client.HTTPConnection(host, port, timeout=600)
    try:
        connection.request(request.method, target, body=request.body or None, headers=keep)
        response = connection.getresponse()
        data = response.read()
        return ProxyResponse(
            response.status, data, response.getheader("Content-Type") or "text/plain"
        )
    except OSError as exc:
        # What the real API server answers when the backend does not take the connection.
        text = f"error trying to reach service: dial tcp {host}:{port}: {exc}"
        return ProxyResponse(503, text.encode(), "text/plain")
    finally:
        connection.close()


class RealPlaneKubeApi(FakeKubeApi):
    """The fake API server whose proxy subresources reach the real plane (module docstring)."""

    def __init__(self, app: RenderedApp) -> None:
        super().__init__(
            namespace=app.namespace,
            rayservice=app.rayservice_name,
            app_name=app.app_name,
            model_id=app.model_id,
        )
        self.app = app
        self.ray_token = RAY_TOKEN
        name = f"{app.rayservice_name}-ray-token"
        self.secrets = {name: make_secret(name, {"auth_token": RAY_TOKEN}, namespace=app.namespace)}
        self.nodes = [
            make_node(SYSTEM_NODE, role="system", gpus=0, efa=0, instance_type="m7i.xlarge"),
            *(make_node(n) for n in GPU_NODES),
        ]
        # Registered as the stand-in starts (``coldstart`` counts from it; the tier's nodes
        # have no EC2 instance, so no providerID and no LaunchTime).
        registered = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for node in self.nodes:
            node["metadata"]["creationTimestamp"] = registered
        self.pods = [
            make_pod(HEAD_POD, node_type="head", node=SYSTEM_NODE, ip=HEAD_IP),
            *(
                make_pod(pod, node=node, ip=ip)
                for pod, node, ip in zip(WORKER_PODS, GPU_NODES, WORKER_IPS, strict=True)
            ),
        ]
        self.rayservice = make_rayservice(ready=True, app_status="RUNNING")

    def _route_proxy(self, request: ProxyRequest) -> ProxyResponse:
        service, port = request.service, request.port
        if service == self.head_service and port == DASHBOARD_PORT:
            return _forward(HEAD_IP, DASHBOARD_PORT, request)
        if service in (self.serve_service, self.head_service) and port == SERVE_PORT:
            return _forward(HEAD_IP, SERVE_PORT, request)
        return super()._route_proxy(request)

    def _pod_metrics(self, pod: str, port: int, rest: str) -> ProxyResponse:
        if pod in WORKER_PODS and port == POD_METRICS_PORT:
            index = WORKER_PODS.index(pod)
            real = metrics_port(self.app, index + 1)
            return _forward(WORKER_IPS[index], real, ProxyRequest("GET", pod, port, rest))
        return super()._pod_metrics(pod, port, rest)

    def pod_for_ip(self, ip: str) -> str:
        return WORKER_PODS[WORKER_IPS.index(ip)]
