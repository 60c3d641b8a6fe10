"""The benchmark Job's pods reach the Serve port of the Ray pods and nothing else, proven with
the NetworkPolicy evaluator (tests/netpol.py) on the rendered policies and pod templates."""

from __future__ import annotations

from typing import Any

import pytest

from pd_constructs.network.network_policy import RAY_PORTS, render_ray_network_policies
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.bench import job as bench_job
from ray_pd_eks.config import DEFAULTS, AppConfig
from tests.bench_sweep import SWEEP
from tests.netpol import Cluster, Pod, pods_from_template

NS = DEFAULTS.namespace


def _bench_template() -> dict[str, Any]:
    job = bench_job.render_job(SWEEP, name="b", namespace=NS, image="i:1", deadline_seconds=60)
    return dict(job["spec"]["template"])


def _world(config: AppConfig, bench_ip: str = "10.0.1.50") -> tuple[Cluster, Pod, list[Pod]]:
    """The Ray pods and a bench pod; by default the bench pod has an address of the system
    nodes' subnet (10.0.0.0/18 in the default VPC), as it does on the system node."""
    rs = render_rayservice(config, image="img:1")["spec"]["rayClusterConfig"]
    (workers,) = rs["workerGroupSpecs"]
    ray = [
        pods_from_template(
            rs["headGroupSpec"]["template"], namespace=NS, name="head", ip="10.0.1.10"
        ),
        pods_from_template(workers["template"], namespace=NS, name="w0", ip="10.0.192.10"),
        pods_from_template(workers["template"], namespace=NS, name="w1", ip="10.0.192.11"),
    ]
    bench = pods_from_template(_bench_template(), namespace=NS, name="bench", ip=bench_ip)
    cluster = Cluster(
        namespaces={NS: {}, "default": {}}, policies=render_ray_network_policies(config)
    )
    return cluster, bench, ray


OTHER_PORTS = [
    RAY_PORTS.gcs,
    RAY_PORTS.dashboard,
    RAY_PORTS.node_manager,
    RAY_PORTS.object_manager,
    RAY_PORTS.dashboard_agent_http,
    RAY_PORTS.min_worker,
    RAY_PORTS.metrics_export,
    RAY_PORTS.nixl_side_channel,
    RAY_PORTS.ucx_tcp_first,
]


@pytest.mark.parametrize(
    "overrides", [{}, {"servingMode": "aggregated"}, {"kvBackend": "UCX"}], ids=str
)
def test_bench_pods_reach_the_serve_port_and_nothing_else(overrides: dict[str, Any]) -> None:
    # An address outside every subnet a policy names isolates what the bench policy allows.
    cluster, bench, ray = _world(DEFAULTS.with_overrides(overrides), bench_ip="10.0.131.50")
    assert bench.labels.items() >= bench_job.BENCH_POD_LABELS.items()
    for pod in ray:
        assert cluster.allowed(bench, pod, RAY_PORTS.serve), pod.name
        for port in OTHER_PORTS:
            assert not cluster.allowed(bench, pod, port), (pod.name, port)


def test_on_the_system_node_the_bench_pod_reaches_serve_only() -> None:
    # The control plane's interfaces have subnets of their own (ray_pd_eks/vpc_layout.py), so a
    # pod with a system-subnet address no longer matches the API server's ipBlock: the bench
    # policy's Serve port is all it reaches, the head's dashboard included in what stays shut.
    cluster, bench, ray = _world(DEFAULTS)
    opened = {
        (pod.name, port)
        for pod in ray
        for port in [RAY_PORTS.serve, RAY_PORTS.dashboard, *OTHER_PORTS]
        if cluster.allowed(bench, pod, port)
    }
    assert opened == {
        ("head", RAY_PORTS.serve),
        ("w0", RAY_PORTS.serve),
        ("w1", RAY_PORTS.serve),
    }


def test_only_the_bench_label_in_this_namespace_opens_the_serve_port() -> None:
    cluster, bench, ray = _world(DEFAULTS, bench_ip="10.0.131.50")
    unlabelled = Pod("debug", NS, {"app": "debug"}, ip="10.0.131.30")
    elsewhere = Pod("bench", "default", dict(bench.labels), ip="10.0.131.40")
    for source in (unlabelled, elsewhere):
        assert not any(cluster.allowed(source, pod, RAY_PORTS.serve) for pod in ray)


def test_nothing_may_connect_to_the_bench_pods() -> None:
    cluster, bench, ray = _world(DEFAULTS)
    for pod in ray:
        assert not cluster.allowed(pod, bench, RAY_PORTS.serve)
        assert not cluster.allowed(pod, bench, 8080)


def test_without_the_bench_policy_the_serve_port_is_closed_to_it() -> None:
    # The allow is this one policy's doing: without it the default deny holds.
    config = DEFAULTS
    policies = [
        p
        for p in render_ray_network_policies(config)
        if p["metadata"]["name"] != "ray-serve-from-bench"
    ]
    _, bench, ray = _world(config, bench_ip="10.0.131.50")
    cluster = Cluster(namespaces={NS: {}, "default": {}}, policies=policies)
    assert not cluster.allowed(bench, ray[0], RAY_PORTS.serve)
