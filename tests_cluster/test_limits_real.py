"""Every request the real scheduler would leave Pending is refused by our synth first: one test
per limit, each showing both halves (the real scheduler's Unschedulable with the resource it
lacks, and the ConfigError that names the setting)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pd_constructs.serving.admission import OPERATOR_USER
from ray_pd_eks.config import AppConfig, ConfigError
from tests.synth import cdk_json_context
from tests_cluster import variants
from tests_cluster.conftest import Deployer
from tests_cluster.kube import Cluster, wait_until


@pytest.fixture(scope="module")
def deployed(deployer: Deployer) -> Cluster:
    deployer.ensure("default")
    cluster = deployer.cluster
    namespace = variants.app("default").config.namespace

    def workers_placed() -> bool:
        found = cluster.items("pods", "-n", namespace, "-l", "ray.io/node-type=worker")
        return len(found) == 2 and all(p["spec"].get("nodeName") for p in found)

    # Both GPU nodes hold a worker (another module may just have re-created the RayService).
    wait_until("the two workers on the GPU nodes", workers_placed, timeout_s=90)
    return cluster


def _worker_pod(name: str, change: Any) -> dict[str, Any]:
    app = variants.app("default")
    (rayservice,) = variants.of_kind(app, "RayService")
    (group,) = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    spec = copy.deepcopy(group["template"]["spec"])
    spec["initContainers"] = []
    change(spec["containers"][0]["resources"])
    # The worker's own labels and the group label KubeRay adds (not ray.io/cluster, so the
    # operator does not adopt it): the Ray pods' admission policy admits its IPC_LOCK and node
    # cache only in such a pod, created by the operator's identity (see _unschedulable).
    labels = {**group["template"].get("metadata", {}).get("labels", {})}
    labels["ray.io/group"] = group["groupName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": app.config.namespace, "labels": labels},
        "spec": spec,
    }


def _unschedulable(cluster: Cluster, pod: dict[str, Any]) -> str:
    cluster.kubectl(
        "create", "-o", "json", f"--as={OPERATOR_USER}", "-f", "-", stdin=json.dumps(pod)
    )
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    try:

        def reason() -> str | None:
            found = cluster.get("pod", name, "-n", namespace)
            for c in found["status"].get("conditions", []):
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    return str(c.get("message", ""))
            assert not found["spec"].get("nodeName"), f"scheduled on {found['spec']['nodeName']}"
            return None

        return str(wait_until(f"{name} to be Unschedulable", reason, timeout_s=30))
    finally:
        cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")


def _refused(**overrides: Any) -> str:
    with pytest.raises(ConfigError) as refused:
        AppConfig.from_context({**cdk_json_context(), **overrides})
    return str(refused.value)


def test_gpus_per_worker_above_the_node_stay_pending_and_synth_refuses(deployed: Cluster) -> None:
    def two_gpus(resources: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            resources[part]["nvidia.com/gpu"] = 2

    message = _unschedulable(deployed, _worker_pod("limit-gpus", two_gpus))
    assert "Insufficient nvidia.com/gpu" in message, message
    assert "context key 'tensorParallelSize' = 2" in _refused(tensorParallelSize=2)


def test_more_workers_than_gpu_nodes_stay_pending_and_synth_refuses(deployed: Cluster) -> None:
    """A third worker while both GPU nodes hold one each (the default's prefill and decode)."""
    message = _unschedulable(deployed, _worker_pod("limit-workers", lambda r: None))
    assert "Insufficient nvidia.com/gpu" in message, message
    assert "exceeds gpuNodeCount 2" in _refused(decodeReplicas=2)


def test_efa_interfaces_above_the_node_stay_pending(deployed: Cluster) -> None:
    """The EFA count is derived from the node (worker_efa_interfaces), never set; asking one
    more than a g6.8xlarge has is what a wrong derivation would do."""

    def two_efa(resources: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            resources[part]["vpc.amazonaws.com/efa"] = 2

    message = _unschedulable(deployed, _worker_pod("limit-efa", two_efa))
    assert "Insufficient vpc.amazonaws.com/efa" in message, message


def test_worker_cpu_above_allocatable_stays_pending(deployed: Cluster) -> None:
    """Workers ask half the node's vCPUs; the whole node's vCPUs never fit once EKS and the
    add-ons have reserved theirs (nodes.py), which is why the app asks half."""

    def all_cpus(resources: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            resources[part]["cpu"] = "32"

    message = _unschedulable(deployed, _worker_pod("limit-cpu", all_cpus))
    assert "Insufficient cpu" in message, message
