"""KWOK nodes shaped like the node groups the app synthesizes, and the DaemonSets EKS and the
app's add-ons put on every node, so that the real scheduler decides whether our pods fit.

Each ``AWS::EKS::Nodegroup`` of the synthesized templates becomes ``DesiredSize`` nodes with its
instance type, labels and taints, plus the labels EKS sets on every managed node
(``eks.amazonaws.com/nodegroup``, ``node.kubernetes.io/instance-type``, zone, arch, os,
hostname). Capacity and allocatable follow how an EKS AL2023 node reports itself:

* **pods** (max pods): the VPC CNI's ENI formula ``ENIs x (IPv4 per ENI - 1) + 2`` over the
  interfaces of network card 0 (the CNI uses no other card), as ``eni-max-pods.txt`` of
  awslabs/amazon-eks-ami lists it; the ENI limits are EC2's (User Guide, "Maximum IP addresses
  per network interface"): m7i.xlarge 4 x 15 = 58, g6.8xlarge 8 x 30 = 234, p5.48xlarge 2 x 50
  on card 0 = 100.
* **cpu**: capacity = vCPUs; kube-reserved by nodeadm's ranges (awslabs/amazon-eks-ami
  ``nodeadm/internal/kubelet/config.go``): 6 % of the first core, 1 % of the second, 0.5 % of
  the third and fourth, 0.25 % of every further core.
* **memory**: capacity = what the kernel reports of the nominal memory (``MemTotal``; about
  3.5 % goes to firmware and the kernel before the kubelet counts, see ``KERNEL_SHARE``);
  allocatable = capacity - kube-reserved (``11 MiB x max pods + 255 MiB``) - the hard eviction
  threshold (``memory.available<100Mi``).
* **ephemeral-storage**: the root volume (or, with local NVMe, the RAID0 array), less 1 GiB
  kube-reserved and the 10 % eviction threshold.
* **nvidia.com/gpu** = the instance's GPUs (NVIDIA device plugin) and **vpc.amazonaws.com/efa**
  = its EFA interfaces (EFA device plugin), capacity = allocatable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ray_pd_eks import instance_types
from tests.synth import Synthesized

ROOT = Path(__file__).resolve().parent.parent
ZONE = "us-west-2a"
KERNEL_SHARE = 0.035

# Interfaces on network card 0 and IPv4 addresses per interface (EC2's published limits).
ENI_LIMITS: dict[str, tuple[int, int]] = {
    "m7i.xlarge": (4, 15),
    "m7i.2xlarge": (4, 15),
    "g6.8xlarge": (8, 30),
    "g6e.8xlarge": (8, 30),
    "p5.48xlarge": (2, 50),
}


def max_pods(instance_type: str) -> int:
    enis, ips = ENI_LIMITS[instance_type]
    return enis * (ips - 1) + 2


def kube_reserved_millicpu(vcpus: int) -> int:
    """nodeadm's CPU reservation, in millicores (rounded down like nodeadm's integer math)."""
    reserved = 0.0
    for core in range(vcpus):
        if core == 0:
            reserved += 60
        elif core == 1:
            reserved += 10
        elif core < 4:
            reserved += 5
        else:
            reserved += 2.5
    return int(reserved)


@dataclass(frozen=True)
class NodeShape:
    instance_type: str
    vcpus: int
    memory_gib: int
    gpus: int
    efa: int
    disk_gib: int

    @property
    def pods(self) -> int:
        return max_pods(self.instance_type)

    @property
    def memory_capacity_ki(self) -> int:
        return int(self.memory_gib * 1024 * 1024 * (1 - KERNEL_SHARE))

    @property
    def memory_allocatable_ki(self) -> int:
        reserved_mi = 11 * self.pods + 255 + 100
        return self.memory_capacity_ki - reserved_mi * 1024

    @property
    def cpu_allocatable_m(self) -> int:
        return self.vcpus * 1000 - kube_reserved_millicpu(self.vcpus)

    def capacity(self) -> dict[str, str]:
        found = {
            "cpu": str(self.vcpus),
            "memory": f"{self.memory_capacity_ki}Ki",
            "pods": str(self.pods),
            "ephemeral-storage": f"{self.disk_gib}Gi",
        }
        return found | self._devices()

    def allocatable(self) -> dict[str, str]:
        storage_ki = int((self.disk_gib * 0.9 - 1) * 1024 * 1024)
        found = {
            "cpu": f"{self.cpu_allocatable_m}m",
            "memory": f"{self.memory_allocatable_ki}Ki",
            "pods": str(self.pods),
            "ephemeral-storage": f"{storage_ki}Ki",
        }
        return found | self._devices()

    def _devices(self) -> dict[str, str]:
        found = {}
        if self.gpus:
            found["nvidia.com/gpu"] = str(self.gpus)
        if self.efa:
            found["vpc.amazonaws.com/efa"] = str(self.efa)
        return found


def shape(instance_type: str, disk_gib: int) -> NodeShape:
    spec = instance_types.gpu_spec(instance_type) or instance_types.system_spec(instance_type)
    assert spec is not None, f"{instance_type} is in neither instance table"
    return NodeShape(
        instance_type, spec.vcpus, spec.memory_gib, spec.gpus, spec.efa_interfaces, disk_gib
    )


def _taint(taint: dict[str, Any]) -> dict[str, str]:
    effect = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}
    found = {"key": taint["Key"], "effect": effect.get(taint["Effect"], "PreferNoSchedule")}
    if taint.get("Value"):
        found["value"] = taint["Value"]
    return found


def nodegroups(app: Synthesized) -> list[dict[str, Any]]:
    found = []
    for stack in app.templates:
        found += list(app.resources(stack, "AWS::EKS::Nodegroup").values())
    return found


def node_objects(app: Synthesized, suffix: str = "") -> list[dict[str, Any]]:
    """Node objects (status included: a Node's status may be set on create) for every node of
    every node group, at its desired size. ``suffix`` ends every name: KWOK 0.8 loses track of
    a node deleted and created again under the same name (its pods never start), so each
    deploy's nodes get names of their own."""
    nodes = []
    for group in nodegroups(app):
        props = group["Properties"]
        (instance_type,) = props["InstanceTypes"]
        name = props["NodegroupName"]
        group_name = name if isinstance(name, str) else "gpu-workers"
        is_gpu = instance_types.gpu_spec(instance_type) is not None
        node_shape = shape(instance_type, 900 if is_gpu else 100)
        for i in range(props["ScalingConfig"]["DesiredSize"]):
            node_name = f"{group_name}-{instance_type.replace('.', '-')}-{i}{suffix}"
            labels = {
                **props.get("Labels", {}),
                "eks.amazonaws.com/nodegroup": group_name,
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": ZONE,
                "topology.kubernetes.io/region": "us-west-2",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": node_name,
                "type": "kwok",
            }
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": node_name,
                        "labels": labels,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "spec": {"taints": [_taint(t) for t in props.get("Taints", [])]},
                    "status": {
                        "capacity": node_shape.capacity(),
                        "allocatable": node_shape.allocatable(),
                    },
                }
            )
    return nodes


# The DaemonSets on every node, with their containers' requests: EKS's add-ons as their default
# manifests request them (vpc-cni v1.23's aws-node: 25m for aws-node and 25m for the network
# policy agent the app turns on; kube-proxy 100m; the Pod Identity agent none; the CloudWatch
# observability add-on's agent 250m/128Mi and Fluent Bit 50m/25Mi), and the device plugins with
# the requests of the app's own values files (assets/helm-values/, read below).
EKS_DAEMONSETS: dict[str, list[dict[str, str]]] = {
    "aws-node": [{"cpu": "25m"}, {"cpu": "25m"}],
    "kube-proxy": [{"cpu": "100m"}],
    "eks-pod-identity-agent": [{}],
    "cloudwatch-agent": [{"cpu": "250m", "memory": "128Mi"}],
    "fluent-bit": [{"cpu": "50m", "memory": "25Mi"}],
}
GPU_DAEMONSETS = {
    "aws-efa-k8s-device-plugin": "efa-device-plugin.yaml",
    "nvidia-device-plugin": "nvidia-device-plugin.yaml",
}


def _values_requests(values_file: str) -> dict[str, str]:
    values = yaml.safe_load((ROOT / "assets" / "helm-values" / values_file).read_text())
    return dict(values["resources"]["requests"])


def daemonset_objects(gpu_label: dict[str, str]) -> list[dict[str, Any]]:
    """The add-on DaemonSets in kube-system; the device plugins only on GPU nodes."""
    found = []
    every = {name: requests for name, requests in EKS_DAEMONSETS.items()}
    gpu = {name: [_values_requests(f)] for name, f in GPU_DAEMONSETS.items()}
    for name, requests in (every | gpu).items():
        spec: dict[str, Any] = {
            "tolerations": [{"operator": "Exists"}],
            "priorityClassName": "system-node-critical",
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": r},
                }
                for i, r in enumerate(requests)
            ],
        }
        if name in gpu:
            spec["nodeSelector"] = gpu_label
        found.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": "kube-system"},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
                },
            }
        )
    return found
