"""Who may open a connection to the Ray pods and the warm-up pods: Kubernetes NetworkPolicies,
enforced by the VPC CNI's network-policy agent (:class:`pd_constructs.cluster.vpc_cni.VpcCniAddon`).

The Ray ports are pinned here, once: the RayService's ``rayStartParams`` and the worker
environment are rendered from :data:`RAY_PORTS`, and so are the policies, so a port cannot be
opened in one place and forgotten in the other. Ray picks most of its ports at random unless
told otherwise (``ray start --node-manager-port``, ``--object-manager-port``,
``--runtime-env-agent-port``, ``--dashboard-agent-grpc-port``; Ray 2.58's
``RayParams.update_pre_selected_port`` lists every listener), which no policy could allow
exactly; vLLM's NIXL side channel likewise (Ray Serve LLM's ``NixlConnectorBackend`` picks an
open port unless ``VLLM_NIXL_SIDE_CHANNEL_PORT`` is set).

The policies are YAML files under ``assets/manifests/network-policies/``, one per purpose;
``ray-default-deny.yaml``'s header says how to add one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pd_constructs.common.helm import kuberay_operator_identity
from pd_constructs.common.namespaces import OPERATOR_NAMESPACE, WARMUP_NAMESPACE
from pd_constructs.common.templates import ASSETS, render_from
from ray_pd_eks.bench.job import BENCH_POD_LABELS
from ray_pd_eks.config import AppConfig
from ray_pd_eks.vpc_layout import vpc_layout

POLICY_DIR = "manifests/network-policies"
# The label the KubeRay operator chart puts on the operator pod (kuberay-operator chart 1.7.0,
# templates/deployment.yaml: app.kubernetes.io/name, the chart's `kuberay-operator.name`),
# derived with the operator's service account in pd_constructs/common/helm.py.
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": kuberay_operator_identity().pod_name_label}
# Labels the RayService template puts on its pods (assets/manifests/rayservice.yaml).
RAY_SERVICE_LABEL = "ray-pd-eks/ray-service"
ROLE_LABEL = "ray-pd-eks/role"
HEAD_ROLE = "head"
WORKER_ROLE = "gpu-worker"


@dataclass(frozen=True)
class RayPorts:
    """Every port a Ray pod listens on for other pods, pinned (defaults as Ray/KubeRay's own
    where they have one)."""

    gcs: int = 6379  # head only: `ray start --port` (KubeRay's default)
    dashboard: int = 8265  # head only: Ray's default; Jobs API, state API, Serve REST API
    serve: int = 8000  # Serve HTTP proxy on every node (KubeRay's serve-svc targets it)
    node_manager: int = 6380  # raylet
    object_manager: int = 6381  # raylet's object transfers between nodes
    runtime_env_agent: int = 6382
    dashboard_agent_grpc: int = 6383  # also the metrics agent
    dashboard_agent_http: int = 52365  # Ray's default; KubeRay's readiness probe calls it
    # Prometheus endpoint (KubeRay's default); on the GPU workers the API server may reach it
    # (the readiness check reads the NIXL counters, ray-metrics-from-api-server.yaml).
    metrics_export: int = 8080
    min_worker: int = 10002  # core worker gRPC servers: Ray's `ray start` default range
    max_worker: int = 19999
    # vLLM's NIXL handshake listener: base + data-parallel index (vLLM NixlConnector), so a
    # block of eight covers every engine one 8-GPU node can hold.
    nixl_side_channel: int = 5600
    nixl_side_channel_count: int = 8
    # UCX's TCP transport (kvBackend=UCX only): listens on a port from UCX_TCP_PORT_RANGE.
    ucx_tcp_first: int = 5700
    ucx_tcp_last: int = 5799

    def node_start_params(self) -> dict[str, str]:
        """``rayStartParams`` every Ray node gets (values are strings, as KubeRay requires)."""
        return {
            "node-manager-port": str(self.node_manager),
            "object-manager-port": str(self.object_manager),
            "runtime-env-agent-port": str(self.runtime_env_agent),
            "dashboard-agent-grpc-port": str(self.dashboard_agent_grpc),
            "dashboard-agent-listen-port": str(self.dashboard_agent_http),
            "metrics-export-port": str(self.metrics_export),
            "min-worker-port": str(self.min_worker),
            "max-worker-port": str(self.max_worker),
        }

    def head_start_params(self) -> dict[str, str]:
        return {"port": str(self.gcs), "dashboard-port": str(self.dashboard)}

    @property
    def ucx_tcp_port_range(self) -> str:
        return f"{self.ucx_tcp_first}-{self.ucx_tcp_last}"


RAY_PORTS = RayPorts()


@dataclass(frozen=True)
class ServeSwitch:
    """An environment switch of Ray Serve (LLM) that, turned on, opens ports outside
    :data:`RAY_PORTS` or moves traffic between deployments off Ray's actor calls."""

    name: str
    would_open: tuple[tuple[int, int], ...]  # (first, last) ports it would listen on
    why: str


# Ray 2.58, python/ray/serve/_private/constants.py (and ray/llm/_internal/serve/constants.py
# for the last one), read in the ray-2.58.0 wheel. Each is pinned "0" on the head and the
# workers (every Ray process inherits the container's environment), so an image or a user
# default that turns one on cannot open a port the NetworkPolicies do not list. With them
# off, Serve listens only on RAY_PORTS.serve (its HTTP proxy) and calls replicas through Ray
# actor calls on the pinned worker ports. (Each replica also starts its inter-deployment gRPC
# server on a random port, "[::]:0" in replica.py; with these off no caller uses it, and the
# default-deny policy keeps it closed.)
DIRECT_INGRESS_PORTS = ((30000, 31000), (40000, 41000))  # RAY_SERVE_DIRECT_INGRESS_MIN/MAX_*
SERVE_SWITCHES: tuple[ServeSwitch, ...] = (
    ServeSwitch(
        "RAY_SERVE_THROUGHPUT_OPTIMIZED",
        DIRECT_INGRESS_PORTS,
        "defaults RAY_SERVE_ENABLE_DIRECT_INGRESS and RAY_SERVE_USE_GRPC_BY_DEFAULT to 1",
    ),
    ServeSwitch(
        "RAY_SERVE_ENABLE_HA_PROXY",
        ((8404, 8404), (9101, 9101), *DIRECT_INGRESS_PORTS),
        "HAProxy in front of the replicas (stats 8404, metrics 9101); forces direct ingress "
        "and binds replicas' HTTP ports on all interfaces",
    ),
    ServeSwitch(
        "RAY_SERVE_ENABLE_DIRECT_INGRESS",
        ((8500, 8500), (9500, 9500), *DIRECT_INGRESS_PORTS),
        "ingress replicas serve HTTP/gRPC on their own ports (30000-31000, 40000-41000), a "
        "fallback proxy on the head (8500, 9500)",
    ),
    ServeSwitch(
        "RAY_SERVE_USE_GRPC_BY_DEFAULT",
        (),
        "deployment handles call replicas' gRPC servers (random ports) instead of Ray actor calls",
    ),
    ServeSwitch(
        "RAY_SERVE_PROXY_USE_GRPC",
        (),
        "the HTTP proxy calls replicas' gRPC servers (random ports) instead of Ray actor calls",
    ),
    ServeSwitch(
        "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING",
        (),
        "Ray Serve LLM makes decode the ASGI ingress behind an ingress request router "
        "(direct ingress)",
    ),
)


def serve_switches_env() -> list[dict[str, str]]:
    """The environment that pins every :data:`SERVE_SWITCHES` entry off."""
    return [{"name": switch.name, "value": "0"} for switch in SERVE_SWITCHES]


# The policies of each namespace, in the order they are applied. A file under POLICY_DIR that
# is in neither tuple fails the tests (tests/test_network_policies.py).
KV_TRANSFER_POLICY = "ray-kv-transfer.yaml"
# The readiness check's (and KV probe's) reads of the decode engines' NIXL counters: P/D only.
METRICS_FROM_API_SERVER_POLICY = "ray-metrics-from-api-server.yaml"
LOAD_BALANCER_POLICY = "ray-serve-from-load-balancer.yaml"
RAY_POLICIES = (
    "ray-default-deny.yaml",
    "ray-cluster-internal.yaml",
    "ray-gcs-from-cluster.yaml",
    KV_TRANSFER_POLICY,
    "ray-from-kuberay-operator.yaml",
    "ray-serve-from-api-server.yaml",
    "ray-dashboard-from-api-server.yaml",
    METRICS_FROM_API_SERVER_POLICY,
    "ray-serve-from-bench.yaml",
    LOAD_BALANCER_POLICY,
)
WARMUP_POLICIES = ("warmup-default-deny.yaml",)


def _port(number: int, end: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"protocol": "TCP", "port": number}
    if end is not None and end != number:
        entry["endPort"] = end
    return entry


def kv_transfer_ports(config: AppConfig, ports: RayPorts = RAY_PORTS) -> list[dict[str, Any]]:
    """Ports the GPU workers open to each other for the KV cache (none when aggregated): the
    NIXL side channel, and UCX's TCP transport when the KV cache itself moves over TCP. (With
    LIBFABRIC the cache moves over EFA's SRD, which bypasses the pod network.)"""
    if not config.is_pd:
        return []
    found = [
        _port(ports.nixl_side_channel, ports.nixl_side_channel + ports.nixl_side_channel_count - 1)
    ]
    if not config.uses_efa_transport:
        found.append(_port(ports.ucx_tcp_first, ports.ucx_tcp_last))
    return found


def control_plane_cidrs(vpc_cidr: str) -> list[str]:
    """Where the API server's service proxy connects from: the control plane's network
    interfaces, which sit in subnets of their own that no node group uses
    (:mod:`ray_pd_eks.vpc_layout`; ``PdCluster``'s ``control_plane_subnets``). No node, and so no
    pod, takes an address from them, so this peer admits the API server and nothing else."""
    return list(vpc_layout(vpc_cidr).control_plane)


def load_balancer_cidrs(config: AppConfig) -> list[str]:
    """Where the application endpoint's ALB connects from: the subnets it is placed in
    (pd_constructs/endpoint/endpoint.py), as :mod:`ray_pd_eks.vpc_layout` carves them: the two /27
    subnets of its own for an internal ALB, the two public subnets for an internet-facing one;
    none without one. No node group uses either pair, so no pod matches these peers."""
    layout = vpc_layout(config.vpc_cidr)
    if config.endpoint_exposure == "internal":
        return list(layout.load_balancer)
    if config.endpoint_exposure == "internet-facing":
        return list(layout.public)
    return []


def policy_values(config: AppConfig, ports: RayPorts = RAY_PORTS) -> dict[str, Any]:
    """The closed set of placeholders a policy file may use (see ray-default-deny.yaml)."""
    return {
        "NAMESPACE": config.namespace,
        "WARMUP_NAMESPACE": WARMUP_NAMESPACE,
        "RAY_SERVICE": config.ray_service_name,
        "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
        "OPERATOR_POD_LABELS": dict(OPERATOR_POD_LABELS),
        "BENCH_POD_LABELS": dict(BENCH_POD_LABELS),
        "CONTROL_PLANE_PEERS": [
            {"ipBlock": {"cidr": cidr}} for cidr in control_plane_cidrs(config.vpc_cidr)
        ],
        "LOAD_BALANCER_PEERS": [
            {"ipBlock": {"cidr": cidr}} for cidr in load_balancer_cidrs(config)
        ],
        "GCS_PORT": ports.gcs,
        "DASHBOARD_PORT": ports.dashboard,
        "SERVE_PORT": ports.serve,
        "NODE_MANAGER_PORT": ports.node_manager,
        "OBJECT_MANAGER_PORT": ports.object_manager,
        "RUNTIME_ENV_AGENT_PORT": ports.runtime_env_agent,
        "DASHBOARD_AGENT_GRPC_PORT": ports.dashboard_agent_grpc,
        "DASHBOARD_AGENT_HTTP_PORT": ports.dashboard_agent_http,
        "METRICS_EXPORT_PORT": ports.metrics_export,
        "MIN_WORKER_PORT": ports.min_worker,
        "MAX_WORKER_PORT": ports.max_worker,
        "KV_TRANSFER_PORTS": kv_transfer_ports(config, ports),
    }


def render_policy(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """One policy file, filled from ``values``; an unknown placeholder fails synthesis."""
    return dict(render_from(f"{POLICY_DIR}/{name}", values))


def render_ray_network_policies(config: AppConfig) -> list[dict[str, Any]]:
    """The Ray namespace's policies: default-deny ingress, then one allow per purpose. An
    aggregated app moves no KV cache, so it has no KV-transfer policy (an empty port list would
    mean every port); without an application endpoint there is no load-balancer policy (an
    empty peer list would mean every source)."""
    values = policy_values(config)
    pd_only = (KV_TRANSFER_POLICY, METRICS_FROM_API_SERVER_POLICY)
    names = [n for n in RAY_POLICIES if config.is_pd or n not in pd_only]
    names = [n for n in names if config.endpoint_exposed or n != LOAD_BALANCER_POLICY]
    return [render_policy(name, values) for name in names]


def render_warmup_network_policies(config: AppConfig) -> list[dict[str, Any]]:
    """The warm-up namespace's policies: its pods accept no connections at all."""
    values = policy_values(config)
    return [render_policy(name, values) for name in WARMUP_POLICIES]


def policy_files() -> list[str]:
    """Every policy file on disk (for the test that each one is applied)."""
    return sorted(p.name for p in (ASSETS / POLICY_DIR).glob("*.yaml"))
