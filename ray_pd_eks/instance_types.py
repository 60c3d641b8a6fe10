"""What the app needs to know about EC2 instance types, without calling AWS.

Synthesis must work offline, so the few facts that size pods and gate validation are kept here:
GPU count, vCPUs, memory, EFA interfaces and local NVMe instance store of the GPU types the stack
supports, and a rule for the general-purpose x86 families the system node group may use.
``preflight`` checks the live values with ``ec2:DescribeInstanceTypes`` before a deploy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceSpec:
    """Sizing facts of one instance type."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    efa_interfaces: int = 0
    gpu_model: str = ""
    nvme_gb: int = 0  # total instance-store NVMe (GB, as EC2 states it); 0 = EBS only
    # The network card of each EFA interface, in launch-template order (the primary first);
    # empty = one per card, 0..efa_interfaces-1.
    efa_network_cards: tuple[int, ...] = ()
    # Whether the interfaces after the primary may be EFA-only (no ENA, no IP address).
    efa_only: bool = False

    def __post_init__(self) -> None:
        if not self.efa_network_cards:
            object.__setattr__(self, "efa_network_cards", tuple(range(self.efa_interfaces)))
        if len(self.efa_network_cards) != self.efa_interfaces:
            raise ValueError(f"{self.name}: one network card per EFA interface")


def _gpu(
    name: str,
    vcpus: int,
    memory_gib: int,
    gpus: int,
    efa: int,
    model: str,
    nvme_gb: int,
    *,
    efa_only: bool = False,
) -> InstanceSpec:
    """One EFA interface per network card, cards ``0..efa-1``: EC2 recommends one EFA per
    network card on the multi-card types (EC2 user guide, "Maximize network bandwidth on
    Amazon EC2 instances with multiple network cards"); every single-EFA type has card 0."""
    return InstanceSpec(name, vcpus, memory_gib, gpus, efa, model, nvme_gb, efa_only=efa_only)


# EFA-capable GPU instance types (EC2 "EFA supported instance types", x86_64, NVIDIA), with
# their NVMe instance store in GB (all of them have one: 2 x 450 GB on a g6.8xlarge).
# Multi-card types: p4d/p4de 4 network cards, p5/p5e 32, p5en 16, g6e.24xlarge 2 and
# g6e.48xlarge 4, one EFA each. ``efa_only``: the EC2 guide's P5/P5e/P5en and G6e
# configurations attach EFA-only interfaces (device index 1) on every card but the primary,
# which keeps one IP address per node; on p4d/p4de the extra interfaces are EFA with ENA.
EFA_GPU_TYPES: dict[str, InstanceSpec] = {
    s.name: s
    for s in (
        _gpu("g4dn.8xlarge", 32, 128, 1, 1, "T4", 900),
        _gpu("g4dn.12xlarge", 48, 192, 4, 1, "T4", 900),
        _gpu("g4dn.16xlarge", 64, 256, 1, 1, "T4", 900),
        _gpu("g4dn.metal", 96, 384, 8, 1, "T4", 1800),
        _gpu("g5.8xlarge", 32, 128, 1, 1, "A10G", 900),
        _gpu("g5.12xlarge", 48, 192, 4, 1, "A10G", 3800),
        _gpu("g5.16xlarge", 64, 256, 1, 1, "A10G", 1900),
        _gpu("g5.24xlarge", 96, 384, 4, 1, "A10G", 3800),
        _gpu("g5.48xlarge", 192, 768, 8, 1, "A10G", 7600),
        _gpu("g6.8xlarge", 32, 128, 1, 1, "L4", 900),
        _gpu("g6.12xlarge", 48, 192, 4, 1, "L4", 3760),
        _gpu("g6.16xlarge", 64, 256, 1, 1, "L4", 1880),
        _gpu("g6.24xlarge", 96, 384, 4, 1, "L4", 3760),
        _gpu("g6.48xlarge", 192, 768, 8, 1, "L4", 7520),
        _gpu("g6e.8xlarge", 32, 256, 1, 1, "L40S", 900),
        _gpu("g6e.12xlarge", 48, 384, 4, 1, "L40S", 3800),
        _gpu("g6e.16xlarge", 64, 512, 1, 1, "L40S", 1900),
        _gpu("g6e.24xlarge", 96, 768, 4, 2, "L40S", 3800, efa_only=True),
        _gpu("g6e.48xlarge", 192, 1536, 8, 4, "L40S", 7600, efa_only=True),
        _gpu("p4d.24xlarge", 96, 1152, 8, 4, "A100", 8000),
        _gpu("p4de.24xlarge", 96, 1152, 8, 4, "A100", 8000),
        _gpu("p5.48xlarge", 192, 2048, 8, 32, "H100", 30720, efa_only=True),
        _gpu("p5e.48xlarge", 192, 2048, 8, 32, "H200", 30720, efa_only=True),
        _gpu("p5en.48xlarge", 192, 2048, 8, 16, "H200", 30720, efa_only=True),
    )
}

# GPU types without EFA, named so the error can say "GPU, but no EFA" instead of "unknown".
NON_EFA_GPU_FAMILIES = ("g4dn", "g5", "g6", "g6e", "gr6", "g5g", "g4ad", "p3", "p2")

_SIZE_VCPUS = {
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "12xlarge": 48,
    "16xlarge": 64,
}
# GiB of memory per vCPU for the general-purpose, compute and memory families.
_FAMILY_GIB_PER_VCPU = {"m": 4, "c": 2, "r": 8}
_SYSTEM_TYPE = re.compile(r"^(?P<cls>[mcr])(?P<gen>[5-8])(?P<attrs>[ain]?[dn]?)\.(?P<size>\w+)$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
# EC2's size names (after the dot): nano .. large, xlarge, 2xlarge .. 48xlarge, metal, metal-24xl.
_INSTANCE_SIZE = re.compile(r"^(nano|micro|small|medium|large|metal|\d*xlarge|metal-\d+xl)$")

# The head pod and the KubeRay operator share the system nodes; below this they do not fit.
MIN_SYSTEM_VCPUS = 4
MIN_SYSTEM_MEMORY_GIB = 16


def is_instance_type_name(name: str) -> bool:
    """True for names shaped like ``family.size``."""
    return bool(_INSTANCE_TYPE.match(name))


def has_instance_size(name: str) -> bool:
    """True when the part after the dot is one of EC2's size names (``g6.8xl`` is not)."""
    family, dot, size = name.partition(".")
    return bool(family and dot and _INSTANCE_SIZE.match(size))


def gpu_spec(name: str) -> InstanceSpec | None:
    """The spec of an EFA-capable GPU type, or None."""
    return EFA_GPU_TYPES.get(name)


def is_known_gpu_family(name: str) -> bool:
    """True when the name belongs to an NVIDIA GPU family (with or without EFA)."""
    return name.split(".", 1)[0] in NON_EFA_GPU_FAMILIES or name in EFA_GPU_TYPES


def system_spec(name: str) -> InstanceSpec | None:
    """The spec of an x86_64 m/c/r type usable for system nodes, or None when not recognised.

    Graviton (``g``) families are rejected on purpose: the Ray head runs the x86_64 DLC image.
    """
    m = _SYSTEM_TYPE.match(name)
    if not m or m["size"] not in _SIZE_VCPUS:
        return None
    vcpus = _SIZE_VCPUS[m["size"]]
    return InstanceSpec(name, vcpus, vcpus * _FAMILY_GIB_PER_VCPU[m["cls"]])


@dataclass(frozen=True)
class GpuFacts:
    """What the model/GPU fit check needs of one GPU (per GPU, not per instance)."""

    model: str
    memory_gib: float  # as nvidia-smi reports memory.total (MiB / 1024)
    bf16: bool  # bfloat16 needs compute capability 8.0 (Ampere) or newer; vLLM refuses it below
    # FP8 tensor cores: compute capability 8.9 (Ada: L4, L40S) or newer (Hopper: H100, H200;
    # Blackwell). vLLM 0.26 runs FP8 weights below that only through its weight-only Marlin
    # kernels (layers/quantization/fp8.py), without FP8 matmuls; this app refuses it there.
    fp8: bool = False
    compute_capability: str = ""


# By instance family: p4d and p4de carry the same A100 with 40 and 80 GB.
GPU_FACTS_BY_FAMILY: dict[str, GpuFacts] = {
    "g4dn": GpuFacts("T4", 15.0, bf16=False, compute_capability="7.5"),  # Turing
    "g5": GpuFacts("A10G", 22.5, bf16=True, compute_capability="8.6"),  # Ampere
    "g6": GpuFacts("L4", 22.5, bf16=True, fp8=True, compute_capability="8.9"),  # Ada
    "g6e": GpuFacts("L40S", 45.0, bf16=True, fp8=True, compute_capability="8.9"),  # Ada
    "p4d": GpuFacts("A100 40GB", 40.0, bf16=True, compute_capability="8.0"),  # Ampere
    "p4de": GpuFacts("A100 80GB", 80.0, bf16=True, compute_capability="8.0"),
    "p5": GpuFacts("H100", 79.6, bf16=True, fp8=True, compute_capability="9.0"),  # Hopper
    "p5e": GpuFacts("H200", 140.4, bf16=True, fp8=True, compute_capability="9.0"),
    "p5en": GpuFacts("H200", 140.4, bf16=True, fp8=True, compute_capability="9.0"),
}


def gpu_facts(name: str) -> GpuFacts | None:
    """Memory, bf16 and FP8 support of the GPU of an EFA GPU type, or None."""
    if name not in EFA_GPU_TYPES:
        return None
    return GPU_FACTS_BY_FAMILY.get(name.split(".", 1)[0])
