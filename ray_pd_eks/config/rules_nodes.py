"""Rules of the nodes: the GPU node type and count, the engine replicas each needs a GPU node
for, the autoscaling ranges and warm spares, the GPU nodes' storage, capacity (a reservation,
a placement group, how long to wait for capacity) and AZ, and the system nodes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ray_pd_eks import instance_types
from ray_pd_eks.config.limits import (
    CAPACITY_WATCH_EXTRA_MINUTES,
    GP3_IOPS,
    GP3_THROUGHPUT,
    GPU_LOCAL_STORAGE,
    MAX_CAPACITY_WAIT_MINUTES,
    MIN_GPU_OS_ROOT_GIB,
    MIN_GPU_ROOT_GIB,
    MIN_SYSTEM_ROOT_GIB,
    WAITER_DEADLINE_MINUTES,
)
from ray_pd_eks.config.problems import Bounds, Form, OneOf, check, problem

if TYPE_CHECKING:
    from ray_pd_eks.config.settings import AppConfig

_AZ = re.compile(r"^(?P<region>[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d)[a-z]$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")
_PLACEMENT_GROUP = re.compile(r"^[A-Za-z0-9][\w.+=@-]{0,254}$")

# How decode autoscaling reacts (Serve's autoscaling config).
_DECODE_AUTOSCALING = (
    Bounds("decodeTargetOngoingRequests", 1, 1024, "must be 1..1024 requests per decode replica"),
    Bounds("decodeUpscaleDelaySeconds", 0, 3600, "must be 0..3600 seconds"),
    Bounds("decodeDownscaleDelaySeconds", 0, 86400, "must be 0..86400 seconds"),
)
_GPU_LOCAL_STORAGE = OneOf(
    "gpuLocalStorage",
    GPU_LOCAL_STORAGE,
    "must be auto (NVMe RAID0 when the type has instance store), raid0 (require it) "
    "or none (images and caches on the root volume)",
)
# The GPU capacity settings: each stands alone.
CAPACITY = (
    Form(
        "gpuCapacityReservationId",
        _CAPACITY_RESERVATION,
        "must be an On-Demand Capacity Reservation id such as cr-0123456789abcdef0, or empty",
    ),
    Form(
        "gpuPlacementGroupName",
        _PLACEMENT_GROUP,
        "must be the name of an existing cluster placement group, or empty",
    ),
    Bounds(
        "gpuCapacityWaitMinutes",
        1,
        MAX_CAPACITY_WAIT_MINUTES,
        f"must be 1..{MAX_CAPACITY_WAIT_MINUTES}: how long GPU launches may fail for lack "
        "of capacity before the deploy fails (the watch then allows "
        f"{CAPACITY_WATCH_EXTRA_MINUTES} more minutes for the nodes to join, and every "
        f"waiter ends by {WAITER_DEADLINE_MINUTES} minutes, inside CloudFormation's hour)",
    ),
)
_SYSTEM_NODE_COUNT = Bounds("systemNodeCount", 1, 20, "must be 1..20")


def gpu_nodes(c: AppConfig) -> list[str]:
    out = []
    t = c.gpu_node_type
    examples = "g6.8xlarge, g6e.8xlarge, g5.8xlarge, p4d.24xlarge or p5.48xlarge"
    if instance_types.gpu_spec(t) is None:
        if not instance_types.has_instance_size(t):
            why = (
                "unknown instance type (EC2 sizes read like 8xlarge, 12xlarge, 48xlarge); use "
                f"an EFA-capable GPU type such as {examples}"
            )
        elif instance_types.is_known_gpu_family(t):
            why = f"this GPU type has no EFA interface; use an EFA-capable type such as {examples}"
        else:
            why = f"not an NVIDIA GPU instance type with EFA; use one such as {examples}"
        out.append(problem("gpuNodeType", t, why))
    if c.gpu_node_count < 2:
        why = "prefill and decode need separate nodes: at least 2"
        out.append(problem("gpuNodeCount", c.gpu_node_count, why))
    elif c.gpu_node_count > 64:
        out.append(problem("gpuNodeCount", c.gpu_node_count, "at most 64 nodes in one group"))
    for key, count in (
        ("prefillReplicas", c.prefill_replicas),
        ("decodeReplicas", c.decode_replicas),
    ):
        if count < 1:
            out.append(problem(key, count, "must be at least 1"))
    spec = instance_types.gpu_spec(t)
    tp = c.tensor_parallel_size
    if tp < 1:
        out.append(problem("tensorParallelSize", tp, "must be at least 1"))
    elif spec is not None and (tp > spec.gpus or spec.gpus % tp):
        fits = [n for n in range(1, spec.gpus + 1) if spec.gpus % n == 0]
        why = (
            f"one replica's GPUs must sit on one {t} node, which has {spec.gpus} GPU(s), and "
            f"divide them evenly: use one of {', '.join(map(str, fits))}, or a GPU type with "
            "more GPUs"
        )
        out.append(problem("tensorParallelSize", tp, why))
    if (
        2 <= c.gpu_node_count <= 64  # else gpuNodeCount's own line says what to fix
        and c.prefill_replicas >= 1
        and c.decode_replicas >= 1
        and c.worker_replicas > c.gpu_node_count
    ):
        why = (
            f"prefillReplicas + decodeReplicas = {c.worker_replicas} exceeds gpuNodeCount "
            f"{c.gpu_node_count}; each replica needs its own GPU node: raise gpuNodeCount "
            "or lower the replicas"
        )
        out.append(problem("decodeReplicas", c.decode_replicas, why))
    return out


def scaling(c: AppConfig) -> list[str]:
    """The autoscaling bounds: decode between decodeMinReplicas and decodeMaxReplicas, the GPU
    node group between gpuNodeMinCount and gpuNodeMaxCount, each range holding its starting
    value, and every decode replica the range allows on a GPU node of its own."""
    out: list[str] = []
    if c.prefill_replicas < 1 or c.decode_replicas < 1:
        return out  # gpu_nodes reports those
    if c.decode_min_replicas < 0 or c.decode_min_replicas > c.decode_replicas:
        why = (
            f"must be 0 (= decodeReplicas) or 1..decodeReplicas ({c.decode_replicas}): "
            "decodeReplicas is where decode starts, within the range"
        )
        out.append(problem("decodeMinReplicas", c.decode_min_replicas, why))
    if c.decode_max_replicas < 0 or 0 < c.decode_max_replicas < c.decode_replicas:
        why = (
            f"must be 0 (= decodeReplicas) or at least decodeReplicas ({c.decode_replicas}): "
            "decodeReplicas is where decode starts, within the range"
        )
        out.append(problem("decodeMaxReplicas", c.decode_max_replicas, why))
    elif c.decode_autoscales and not c.is_pd:
        why = (
            "decode autoscaling applies to servingMode=pd; an aggregated app has no decode "
            "deployment: leave decodeMinReplicas and decodeMaxReplicas at 0"
        )
        out.append(problem("decodeMaxReplicas", c.decode_max_replicas, why))
    out += check(_DECODE_AUTOSCALING, c)
    count_ok = 2 <= c.gpu_node_count <= 64  # else its own line says what to fix first
    if c.gpu_node_min_count < 0:
        why = "must not be negative: 0 (= gpuNodeCount) or 2..gpuNodeCount"
        out.append(problem("gpuNodeMinCount", c.gpu_node_min_count, why))
    elif count_ok and (0 < c.gpu_node_min_count < 2 or (c.gpu_node_min_count > c.gpu_node_count)):
        why = (
            f"must be 0 (= gpuNodeCount) or 2..gpuNodeCount ({c.gpu_node_count}): prefill and "
            "decode need separate nodes, and gpuNodeCount is the size the group starts with"
        )
        out.append(problem("gpuNodeMinCount", c.gpu_node_min_count, why))
    if c.gpu_node_max_count < 0:
        why = "must not be negative: 0 (= gpuNodeCount) or gpuNodeCount..64"
        out.append(problem("gpuNodeMaxCount", c.gpu_node_max_count, why))
    elif count_ok and (0 < c.gpu_node_max_count < c.gpu_node_count or (c.gpu_node_max_count > 64)):
        why = (
            f"must be 0 (= gpuNodeCount) or gpuNodeCount ({c.gpu_node_count})..64: the group "
            "starts at gpuNodeCount, and one node group holds at most 64 nodes here"
        )
        out.append(problem("gpuNodeMaxCount", c.gpu_node_max_count, why))
    if out or not 2 <= c.gpu_node_count <= 64 or c.worker_replicas > c.gpu_node_count:
        return out  # the starting sizes' own lines say what to fix first
    if c.worker_max_replicas > c.gpu_node_max:
        why = (
            f"prefillReplicas + decodeMaxReplicas = {c.worker_max_replicas} exceeds "
            f"gpuNodeMaxCount {c.gpu_node_max}; each replica needs its own GPU node: raise "
            "gpuNodeMaxCount or lower decodeMaxReplicas"
        )
        out.append(problem("decodeMaxReplicas", c.decode_max_replicas, why))
    if c.worker_min_replicas > c.gpu_node_min:
        why = (
            f"prefillReplicas + decodeMinReplicas = {c.worker_min_replicas} exceeds "
            f"gpuNodeMinCount {c.gpu_node_min}: the group could shrink below the replicas "
            "that always run; raise gpuNodeMinCount or lower decodeMinReplicas"
        )
        out.append(problem("decodeMinReplicas", c.decode_min_replicas, why))
    return out + _warm_spares(c)


def _warm_spares(c: AppConfig) -> list[str]:
    """gpuWarmSpareNodes: headroom for decode scale-out, so it needs decode autoscaling and a
    GPU node range (the Cluster Autoscaler adds the spare's node), and the spares beside the
    replicas that always run must fit the group's maximum."""
    spares, key = c.gpu_warm_spare_nodes, "gpuWarmSpareNodes"
    if spares == 0:
        return []
    if spares < 0:
        return [problem(key, spares, "must be 0 (no spare) or a number of GPU nodes")]
    out = []
    if not c.decode_autoscales:
        why = (
            "warm spare nodes are headroom for decode scale-out: set decodeMaxReplicas above "
            "decodeMinReplicas (decode autoscaling), or set gpuWarmSpareNodes=0"
        )
        out.append(problem(key, spares, why))
    if not c.gpu_nodes_autoscale:
        why = (
            "the Cluster Autoscaler adds a spare's node: set gpuNodeMaxCount above "
            "gpuNodeMinCount (a GPU node range), or set gpuWarmSpareNodes=0"
        )
        out.append(problem(key, spares, why))
    if not out and c.worker_min_replicas + spares > c.gpu_node_max:
        why = (
            f"prefillReplicas + decodeMinReplicas + gpuWarmSpareNodes = "
            f"{c.worker_min_replicas + spares} exceeds gpuNodeMaxCount {c.gpu_node_max}: each "
            "spare holds a GPU node of its own beside the replicas that always run; raise "
            f"gpuNodeMaxCount or set gpuWarmSpareNodes to at most "
            f"{c.gpu_node_max - c.worker_min_replicas}"
        )
        out.append(problem(key, spares, why))
    return out


def gpu_storage(c: AppConfig) -> list[str]:
    out: list[str] = []
    if storage := _GPU_LOCAL_STORAGE(c):
        return storage
    spec = instance_types.gpu_spec(c.gpu_node_type)
    if spec is None:
        return []  # reported by gpu_nodes
    if c.gpu_local_storage == "raid0" and spec.nvme_gb == 0:
        why = (
            f"{c.gpu_node_type} has no instance-store NVMe; use auto or none, or a type with "
            "NVMe such as g6.8xlarge"
        )
        out.append(problem("gpuLocalStorage", c.gpu_local_storage, why))
        return out
    size = c.gpu_root_volume_gib
    low = MIN_GPU_OS_ROOT_GIB if c.uses_local_nvme else MIN_GPU_ROOT_GIB
    if size and not low <= size <= 16384:
        holds = "the OS (NVMe holds the rest)" if c.uses_local_nvme else "the image and weights"
        why = f"must be 0 (automatic) or {low}..16384 GiB to hold {holds}"
        out.append(problem("gpuRootVolumeGib", size, why))
        return out
    if c.uses_local_nvme:
        return out  # the root volume keeps gp3's baseline; IOPS/throughput are not used
    out += _gp3_performance(
        "gpuRoot", c.gpu_root_gib, c.gpu_root_volume_iops, c.gpu_root_volume_throughput
    )
    return out


def gpu_az(c: AppConfig) -> list[str]:
    if not c.gpu_az:
        return []
    m = _AZ.match(c.gpu_az)
    if not m:
        why = "not an Availability Zone name such as us-west-2a; leave empty to choose at deploy"
        return [problem("gpuAz", c.gpu_az, why)]
    if c.region and m["region"] != c.region:
        why = f"is not in region {c.region}; use an AZ of {c.region} or leave empty"
        return [problem("gpuAz", c.gpu_az, why)]
    return []


def system_nodes(c: AppConfig) -> list[str]:
    out = []
    spec = instance_types.system_spec(c.system_node_type)
    if spec is None:
        why = "use an x86_64 m/c/r type from xlarge up, such as m7i.xlarge (the head runs the DLC)"
        out.append(problem("systemNodeType", c.system_node_type, why))
    elif (
        spec.vcpus < instance_types.MIN_SYSTEM_VCPUS
        or spec.memory_gib < instance_types.MIN_SYSTEM_MEMORY_GIB
    ):
        why = (
            f"has {spec.vcpus} vCPU / {spec.memory_gib} GiB; the Ray head and KubeRay need "
            f"at least {instance_types.MIN_SYSTEM_VCPUS} vCPU and "
            f"{instance_types.MIN_SYSTEM_MEMORY_GIB} GiB"
        )
        out.append(problem("systemNodeType", c.system_node_type, why))
    out += _SYSTEM_NODE_COUNT(c)
    if not MIN_SYSTEM_ROOT_GIB <= c.system_root_volume_gib <= 16384:
        why = f"must be {MIN_SYSTEM_ROOT_GIB}..16384 GiB: the Ray head's DLC image is ~20 GB"
        out.append(problem("systemRootVolumeGib", c.system_root_volume_gib, why))
        return out
    out += _gp3_performance(
        "systemRoot",
        c.system_root_volume_gib,
        c.system_root_volume_iops,
        c.system_root_volume_throughput,
    )
    return out


def _gp3_performance(prefix: str, gib: int, iops: int, mibps: int) -> list[str]:
    """gp3's limits on provisioned IOPS and throughput, for settings ``<prefix>VolumeIops`` and
    ``<prefix>VolumeThroughput`` of a ``gib``-sized volume."""
    out = []
    if not GP3_IOPS[0] <= iops <= GP3_IOPS[1]:
        why = f"gp3 allows {GP3_IOPS[0]}..{GP3_IOPS[1]} IOPS"
        out.append(problem(f"{prefix}VolumeIops", iops, why))
    elif iops > 500 * gib:
        why = f"gp3 allows at most 500 IOPS per GiB: raise {prefix}VolumeGib to {-(-iops // 500)}"
        out.append(problem(f"{prefix}VolumeIops", iops, why))
    if not GP3_THROUGHPUT[0] <= mibps <= GP3_THROUGHPUT[1]:
        why = f"gp3 allows {GP3_THROUGHPUT[0]}..{GP3_THROUGHPUT[1]} MiB/s"
        out.append(problem(f"{prefix}VolumeThroughput", mibps, why))
    elif GP3_IOPS[0] <= iops and mibps * 4 > iops:
        why = f"gp3 allows 0.25 MiB/s per IOPS: raise {prefix}VolumeIops to {mibps * 4}"
        out.append(problem(f"{prefix}VolumeThroughput", mibps, why))
    return out
