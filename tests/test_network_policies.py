"""NetworkPolicies of the Ray and warm-up namespaces, proven with the evaluator in tests/netpol.py
against the pods the synthesized manifests create."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pd_constructs.common.namespaces import OPERATOR_NAMESPACE, WARMUP_NAMESPACE
from pd_constructs.common.templates import ASSETS
from pd_constructs.network.network_policy import (
    OPERATOR_POD_LABELS,
    RAY_POLICIES,
    RAY_PORTS,
    WARMUP_POLICIES,
    policy_files,
    render_ray_network_policies,
)
from tests.netpol import Cluster, External, Pod, pods_from_template, policies_in
from tests.synth import Synthesized, resolve

# Addresses in the default VPC 10.0.0.0/16 (ray_pd_eks/vpc_layout.py): the cluster's private
# subnets are 10.0.0.0/18 and 10.0.64.0/18 (system nodes), the EKS control plane's interfaces
# have 10.0.130.0/28 and 10.0.130.16/28 to themselves, the GPU subnet sits in the last quarter.
API_SERVER = External(ip="10.0.130.20")
OUTSIDE_VPC = External(ip="198.51.100.7")
GPU_SUBNET_HOST = External(ip="10.0.200.9")


def _objects(app: Synthesized, stack: str) -> list[tuple[str, dict[str, Any]]]:
    """(logical id of the manifest resource, object) for every object a stack applies."""
    out = []
    resources = app.resources(stack, "Custom::AWSCDK-EKS-KubernetesResource")
    for logical_id, r in resources.items():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            out.append((logical_id, obj))
    return out


def _rayservice(app: Synthesized) -> dict[str, Any]:
    (rs,) = [o for _, o in _objects(app, "Workload") if o["kind"] == "RayService"]
    return rs


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


class World:
    """The pods of one synthesized app plus a few strangers, and the policies in force."""

    def __init__(self, app: Synthesized) -> None:
        ns = app.config.namespace
        rs = _rayservice(app)
        cluster_cfg = rs["spec"]["rayClusterConfig"]
        self.head_spec = cluster_cfg["headGroupSpec"]
        (self.worker_spec,) = cluster_cfg["workerGroupSpecs"]
        self.head = pods_from_template(
            self.head_spec["template"], namespace=ns, name="head", ip="10.0.1.10", node="sys-1"
        )
        self.workers = [
            pods_from_template(
                self.worker_spec["template"],
                namespace=ns,
                name=f"worker-{i}",
                ip=f"10.0.192.{10 + i}",
                node=f"gpu-{i}",
            )
            for i in range(2)
        ]
        self.operator = Pod(
            "kuberay-operator",
            OPERATOR_NAMESPACE,
            {**OPERATOR_POD_LABELS, "app.kubernetes.io/instance": "kuberay-operator"},
            ip="10.0.1.20",
            node="sys-1",
        )
        # A pod of the Ray namespace that is not part of the Ray cluster, and one elsewhere.
        self.neighbour = Pod("debug", ns, {"app": "debug"}, ip="10.0.1.30", node="sys-1")
        self.stranger = Pod("web", "default", {"app": "web"}, ip="10.0.65.40", node="sys-2")
        daemon_sets = [o for _, o in _objects(app, "Workload") if o["kind"] == "DaemonSet"]
        self.warmup = [
            pods_from_template(
                d["spec"]["template"], namespace=WARMUP_NAMESPACE, name=d["metadata"]["name"]
            )
            for d in daemon_sets
        ]
        objects = [o for _, o in _objects(app, "Workload")]
        self.cluster = Cluster(
            namespaces={ns: {}, WARMUP_NAMESPACE: {}, OPERATOR_NAMESPACE: {}, "default": {}},
            policies=policies_in(objects),
        )

    @property
    def ray_pods(self) -> list[Pod]:
        return [self.head, *self.workers]

    def allowed(self, source: Pod | External, destination: Pod, port: int) -> bool:
        return self.cluster.allowed(source, destination, port)


@pytest.fixture(scope="module")
def world(default_app: Synthesized) -> World:
    return World(default_app)


def _start_ports(spec: dict[str, Any]) -> list[int]:
    return [int(v) for k, v in spec["rayStartParams"].items() if k.endswith("port")]


# -- what is applied ------------------------------------------------------------------------


def test_every_policy_file_is_applied_and_documented() -> None:
    assert sorted(RAY_POLICIES + WARMUP_POLICIES) == policy_files()
    for name in policy_files():
        text = (ASSETS / "manifests" / "network-policies" / name).read_text()
        assert text.startswith("# "), f"{name} has no header comment"


def test_policies_are_applied_after_the_namespace_and_before_the_pods(
    default_app: Synthesized,
) -> None:
    resources = default_app.templates["Workload"]["Resources"]
    objects = _objects(default_app, "Workload")
    ns = default_app.config.namespace

    def in_ray_namespace(o: dict[str, Any]) -> bool:
        return ns in (o["metadata"].get("namespace"), o["metadata"]["name"])

    (policy_id,) = {
        lid for lid, o in objects if o["kind"] == "NetworkPolicy" and in_ray_namespace(o)
    }
    (namespace_id,) = {
        lid for lid, o in objects if o["kind"] == "Namespace" and in_ray_namespace(o)
    }
    (rayservice_id,) = {lid for lid, o in objects if o["kind"] == "RayService"}
    assert namespace_id in resources[policy_id]["DependsOn"]
    assert policy_id in resources[rayservice_id]["DependsOn"]
    names = [o["metadata"]["name"] for lid, o in objects if lid == policy_id]
    assert names[0] == "default-deny-ingress"
    # Every policy of the config (setting-dependent ones, such as the endpoint's, only with it).
    assert names == [p["metadata"]["name"] for p in render_ray_network_policies(default_app.config)]
    warm = [
        (lid, o)
        for lid, o in _objects(default_app, "Workload")
        if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == WARMUP_NAMESPACE
    ]
    assert len({lid for lid, _ in warm}) == 1
    (warm_ns_id,) = {
        lid
        for lid, o in _objects(default_app, "Workload")
        if o["kind"] == "Namespace" and o["metadata"]["name"] == WARMUP_NAMESPACE
    }
    assert warm_ns_id in resources[warm[0][0]]["DependsOn"]


def test_both_namespaces_deny_ingress_by_default(world: World) -> None:
    for pod in [*world.ray_pods, *world.warmup]:
        assert world.cluster.selecting(pod, "Ingress"), pod.name
    # Nothing selects the strangers' namespaces: the policies isolate only our pods.
    assert not world.cluster.selecting(world.stranger, "Ingress")


def test_control_plane_peers_are_exactly_the_cluster_subnets(default_app: Synthesized) -> None:
    """The API server connects from its interfaces in the subnets the cluster was created in."""
    subnet_ids = default_app.only("Cluster", "AWS::EKS::Cluster")["Properties"][
        "ResourcesVpcConfig"
    ]["SubnetIds"]
    exported = {
        json.dumps(v["Value"]): k for k, v in default_app.templates["Network"]["Outputs"].items()
    }
    network = default_app.templates["Network"]["Resources"]
    cidrs = set()
    for ref in subnet_ids:
        export_name = ref["Fn::ImportValue"]
        output = next(
            o
            for o in default_app.templates["Network"]["Outputs"].values()
            if o.get("Export", {}).get("Name") == export_name
        )
        cidrs.add(network[output["Value"]["Ref"]]["Properties"]["CidrBlock"])
    assert exported  # the subnets reach the cluster stack as exports
    assert cidrs == {"10.0.130.0/28", "10.0.130.16/28"}
    for name in ("ray-serve-from-api-server", "ray-dashboard-from-api-server"):
        (policy,) = [
            o for _, o in _objects(default_app, "Workload") if o["metadata"]["name"] == name
        ]
        blocks = {p["ipBlock"]["cidr"] for p in policy["spec"]["ingress"][0]["from"]}
        assert blocks == cidrs, name
    assert ipaddress.ip_address(API_SERVER.ip) in ipaddress.ip_network(sorted(cidrs)[1])


# -- inside the Ray cluster ------------------------------------------------------------------


def test_ray_pods_reach_every_port_ray_listens_on(world: World) -> None:
    """Ports read from the rendered rayStartParams, not from the policies' own constants."""
    head_ports = _start_ports(world.head_spec)
    worker_ports = _start_ports(world.worker_spec)
    assert RAY_PORTS.gcs in head_ports and RAY_PORTS.node_manager in worker_ports
    for port in head_ports:
        if port in (RAY_PORTS.dashboard, RAY_PORTS.metrics_export):
            continue  # the dashboard is for the operator and the API server; metrics: below
        for worker in world.workers:
            assert world.allowed(worker, world.head, port), port
    for port in worker_ports:
        if port == RAY_PORTS.metrics_export:
            continue
        low = int(world.worker_spec["rayStartParams"]["min-worker-port"])
        high = int(world.worker_spec["rayStartParams"]["max-worker-port"])
        for probe in {port, low, high} if port == low else {port}:
            assert world.allowed(world.head, world.workers[0], probe), probe
            assert world.allowed(world.workers[1], world.workers[0], probe), probe
    assert not world.allowed(world.head, world.workers[0], high + 1)
    assert not world.allowed(world.head, world.workers[0], low - 1)


def test_nothing_outside_the_ray_cluster_reaches_its_internal_ports(world: World) -> None:
    """Every port but the dashboard (which the operator and the API server reach, below) and
    the workers' metrics port (the API server reads the NIXL counters, below)."""
    internal = set(_start_ports(world.head_spec) + _start_ports(world.worker_spec))
    internal.discard(RAY_PORTS.dashboard)
    internal.discard(RAY_PORTS.metrics_export)
    sources: list[Pod | External] = [
        world.neighbour,
        world.stranger,
        world.operator,
        API_SERVER,
        *world.warmup,
    ]
    for source in sources:
        for port in sorted(internal):
            for pod in world.ray_pods:
                assert not world.allowed(source, pod, port), (source, pod.name, port)


def test_nothing_reaches_the_ray_client_port(world: World) -> None:
    """`ray start --head` listens on 10001 for Ray Client; nothing here uses it."""
    for source in (world.workers[0], world.operator, API_SERVER, world.neighbour):
        assert not world.allowed(source, world.head, 10001)


def test_kv_transfer_side_channel_only_between_gpu_workers(world: World) -> None:
    (container,) = world.worker_spec["template"]["spec"]["containers"]
    port = int(_env(container)["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    a, b = world.workers
    assert world.allowed(a, b, port) and world.allowed(b, a, port)
    assert world.allowed(a, b, port + RAY_PORTS.nixl_side_channel_count - 1)  # DP index offset
    assert not world.allowed(a, b, port + RAY_PORTS.nixl_side_channel_count)
    assert not world.allowed(world.head, a, port)
    assert not world.allowed(world.neighbour, a, port)
    # LIBFABRIC moves the cache over EFA: no UCX TCP range is open.
    assert "UCX_TCP_PORT_RANGE" not in _env(container)
    assert not world.allowed(a, b, RAY_PORTS.ucx_tcp_first)


def test_ucx_variant_opens_exactly_ucx_tcp_range_between_workers(
    variant_app: Synthesized,
) -> None:
    ucx_world = World(variant_app)
    (container,) = ucx_world.worker_spec["template"]["spec"]["containers"]
    first, last = (int(p) for p in _env(container)["UCX_TCP_PORT_RANGE"].split("-"))
    a, b = ucx_world.workers
    for port in (first, last):
        assert ucx_world.allowed(a, b, port)
        assert not ucx_world.allowed(ucx_world.head, a, port)
        assert not ucx_world.allowed(ucx_world.neighbour, a, port)
    assert not ucx_world.allowed(a, b, first - 1) and not ucx_world.allowed(a, b, last + 1)


# -- from outside the Ray cluster -------------------------------------------------------------


def test_kuberay_operator_reaches_the_head_dashboard_and_serve_only(world: World) -> None:
    assert world.allowed(world.operator, world.head, RAY_PORTS.dashboard)
    assert world.allowed(world.operator, world.head, RAY_PORTS.serve)
    assert not world.allowed(world.operator, world.head, RAY_PORTS.gcs)
    assert not world.allowed(world.operator, world.workers[0], RAY_PORTS.dashboard_agent_http)
    # Off the cluster subnets (whose ipBlock also admits it, see below), the operator's
    # selector alone admits it; the same labels in another namespace are not the operator.
    elsewhere = Pod("kuberay-operator", OPERATOR_NAMESPACE, dict(world.operator.labels))
    assert world.allowed(elsewhere, world.head, RAY_PORTS.serve)
    assert not world.allowed(elsewhere, world.workers[0], RAY_PORTS.serve)
    impostor = Pod("impostor", "default", dict(world.operator.labels), ip="10.0.192.50")
    assert not world.allowed(impostor, world.head, RAY_PORTS.dashboard)
    assert not world.allowed(impostor, world.head, RAY_PORTS.serve)


def test_api_server_proxy_reaches_serve_everywhere_and_the_dashboard_on_the_head(
    world: World,
) -> None:
    for pod in world.ray_pods:
        assert world.allowed(API_SERVER, pod, RAY_PORTS.serve), pod.name
    assert world.allowed(API_SERVER, world.head, RAY_PORTS.dashboard)
    assert not world.allowed(API_SERVER, world.workers[0], RAY_PORTS.dashboard_agent_http)
    assert not world.allowed(API_SERVER, world.head, RAY_PORTS.gcs)
    for outsider in (OUTSIDE_VPC, GPU_SUBNET_HOST):
        assert not world.allowed(outsider, world.head, RAY_PORTS.dashboard)
        assert not world.allowed(outsider, world.workers[0], RAY_PORTS.serve)


def test_pods_of_system_nodes_do_not_share_the_api_servers_allow(world: World) -> None:
    """The control plane's interfaces have subnets of their own, so a pod on a system node (its
    IP in the cluster's private subnets) no longer matches the API server's ipBlock: it reaches
    neither Serve (past the ALB's JWT check) nor the dashboard."""
    for stranger in (world.stranger, world.neighbour):
        assert not world.allowed(stranger, world.head, RAY_PORTS.dashboard)
        for pod in world.ray_pods:
            assert not world.allowed(stranger, pod, RAY_PORTS.serve), (stranger.name, pod.name)
    system_node = External(ip="10.0.64.25", node="sys-2")
    assert not world.allowed(system_node, world.head, RAY_PORTS.dashboard)
    assert not world.allowed(system_node, world.workers[0], RAY_PORTS.serve)


def test_api_server_reaches_the_gpu_workers_metrics_port_only(world: World) -> None:
    """The readiness check reads the decode engines' NIXL counters through the pod proxy
    (ray-metrics-from-api-server.yaml): API server -> GPU worker metrics port, nothing else."""
    for worker in world.workers:
        assert world.allowed(API_SERVER, worker, RAY_PORTS.metrics_export), worker.name
    assert not world.allowed(API_SERVER, world.head, RAY_PORTS.metrics_export)
    outsiders: list[Pod | External] = [OUTSIDE_VPC, GPU_SUBNET_HOST, *world.warmup]
    for outsider in outsiders:
        assert not world.allowed(outsider, world.workers[0], RAY_PORTS.metrics_export)
    # The control plane's interfaces have subnets of their own: pods on system nodes do not
    # share this allow.
    assert not world.allowed(world.stranger, world.workers[0], RAY_PORTS.metrics_export)


def test_aggregated_app_opens_no_metrics_port_to_the_api_server() -> None:
    """No KV cache moves, so there are no counters to read and no allow."""
    from pd_constructs.network.network_policy import render_ray_network_policies
    from ray_pd_eks.config import AppConfig

    names = {
        p["metadata"]["name"]
        for p in render_ray_network_policies(AppConfig(serving_mode="aggregated"))
    }
    assert "ray-metrics-from-api-server" not in names
    assert "ray-metrics-from-api-server" in {
        p["metadata"]["name"] for p in render_ray_network_policies(AppConfig())
    }


def test_the_scraper_reaches_the_metrics_port_of_every_ray_pod_and_nothing_else_does(
    world: World,
) -> None:
    """Where scrapes come from (pd_constructs/inventory/flows.py, flow scrape-metrics): the add-on's
    CloudWatch agent is a DaemonSet with ``hostNetwork: true`` (aws-observability/helm-charts,
    amazon-cloudwatch-observability values.yaml ``agent.hostNetwork``) that scrapes the
    PodMonitor targets on its own node (AWS, "Scraping ServiceMonitor and PodMonitor targets",
    add-on 8.0.0 and later). A host-network process reaching a pod on its node leaves from the
    node's primary IP, which the VPC CNI's policy agent admits to every pod
    (aws-network-policy-agent, pkg/fwruleprocessor: "Traffic from the local node should always
    be allowed", the IMDS local-ipv4 address). So no rule opens 8080, and nothing but the node
    itself reaches it: not the cluster-level scraper on another node, not a pod of the agent's
    namespace, not the operator or another Ray pod. The API server (its pod proxy) reaches the
    GPU workers' port only: the readiness check's and the KV probe's NIXL counters
    (test_api_server_reaches_the_gpu_workers_metrics_port_only)."""
    port = RAY_PORTS.metrics_export
    agent_pod = Pod(
        "cloudwatch-agent-x", "default", {"app.kubernetes.io/name": "cloudwatch-agent"}, "10.0.1.77"
    )
    for pod in world.ray_pods:
        assert pod.ports["metrics"] == port
        on_its_node = External(ip=f"primary-ip-of-{pod.node}", node=pod.node)
        assert world.allowed(on_its_node, pod, port), pod.name
        cluster_scraper = External(ip="10.0.64.9", node="sys-2")
        others = [w for w in world.ray_pods if w.node != pod.node]
        sources: list[Pod | External] = [cluster_scraper, agent_pod, world.operator]
        if pod not in world.workers:
            sources.append(API_SERVER)
        for source in [*sources, *others]:
            assert not world.allowed(source, pod, port), (source, pod.name)


def test_each_node_still_reaches_its_own_pods(world: World) -> None:
    """kubelet's HTTP probe of the dashboard agent (KubeRay with Ray >= 2.53)."""
    kubelet = External(ip="10.0.192.5", node=world.workers[0].node)
    assert world.allowed(kubelet, world.workers[0], RAY_PORTS.dashboard_agent_http)
    other_node = External(ip="10.0.192.6", node=world.workers[1].node)
    assert not world.allowed(other_node, world.workers[0], RAY_PORTS.dashboard_agent_http)


def test_warmup_pods_accept_no_connection(world: World) -> None:
    assert {p.name for p in world.warmup} == {"image-prepull", "model-prefetch"}
    for pod in world.warmup:
        for source in (world.head, world.workers[0], world.stranger, API_SERVER):
            for port in (22, 80, 443, 8000, 8080):
                assert not world.allowed(source, pod, port), (source, pod.name, port)


def test_aggregated_app_opens_no_kv_transfer_port(token_app: Synthesized) -> None:
    """No KV cache moves between the workers, so no policy (an empty port list would be every
    port) and no side-channel setting."""
    aggregated = World(token_app)
    assert token_app.config.serving_mode == "aggregated"
    names = {p["metadata"]["name"] for p in aggregated.cluster.policies}
    assert "ray-kv-transfer" not in names and "ray-cluster-internal" in names
    (container,) = aggregated.worker_spec["template"]["spec"]["containers"]
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in _env(container)
    a, b = aggregated.workers
    assert not aggregated.allowed(a, b, RAY_PORTS.nixl_side_channel)
    assert aggregated.allowed(a, b, RAY_PORTS.object_manager)
