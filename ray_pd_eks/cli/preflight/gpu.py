"""Preflight's GPU node checks: the GPU type here (EFA, its GPUs and vCPUs), its instance-store
NVMe against what the stack's storage layout expects, and the AZs that offer it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore import exceptions as bce

from ray_pd_eks.cli.aws import error_code
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks
from ray_pd_eks.config.limits import NVME_MOUNT


class GpuChecks(Checks):
    def gpu_type(self) -> Iterator[Finding]:
        itype = self.config.gpu_node_type
        ec2 = self.aws.client("ec2")
        try:
            found = self._call(
                "ec2:DescribeInstanceTypes",
                lambda: ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"],
            )
        except bce.ClientError as err:
            if error_code(err) not in ("InvalidInstanceType", "InvalidParameterValue"):
                raise
            found = []
        if not found:
            yield Finding(
                FAIL,
                "gpu type",
                f"{itype} is not available in {self.aws.region}: pick another region "
                "(--region / ray-pd-eks settings --set region=...) or type (ray-pd-eks settings "
                "--set gpuNodeType=...)",
            )
            return
        info = found[0]
        network = info.get("NetworkInfo", {})
        self.vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0)) or None
        gpus = info.get("GpuInfo", {}).get("Gpus", [])
        gpu_count = sum(int(g.get("Count", 0)) for g in gpus)
        gpu_names = ", ".join(
            f"{g.get('Manufacturer', '')} {g.get('Name', '')}".strip() for g in gpus
        )
        efa = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
        facts = f"{self.vcpus} vCPUs, {gpu_count} GPU ({gpu_names or 'none'})"
        if not network.get("EfaSupported"):
            yield Finding(
                FAIL,
                "gpu type",
                f"{itype} does not support EFA ({facts}): use an EFA type such as g6.8xlarge "
                "(ray-pd-eks settings --set gpuNodeType=...)",
            )
        elif gpu_count < 1:
            yield Finding(
                FAIL,
                "gpu type",
                f"{itype} has no GPU: use ray-pd-eks settings --set gpuNodeType=g6.8xlarge",
            )
        else:
            yield Finding(OK, "gpu type", f"{itype}: EFA supported (max {efa} interfaces), {facts}")
        yield self._gpu_storage(itype, info.get("InstanceStorageInfo") or {})

    def _gpu_storage(self, itype: str, storage: dict[str, Any]) -> Finding:
        """The live instance store against the offline table the stack's storage layout uses."""
        c = self.config
        live = int(storage.get("TotalSizeInGB") or 0)
        table = c.gpu_spec.nvme_gb
        disks = ", ".join(
            f"{d.get('Count', 1)} x {d.get('SizeInGB', '?')} GB {d.get('Type', '')}".rstrip()
            for d in storage.get("Disks", [])
        )
        nvme = f"{live} GB of instance-store NVMe ({disks})" if disks else f"{live} GB of NVMe"
        root = (
            f"the {c.gpu_root_gib} GiB gp3 root volume holds images and caches "
            f"(gpuRootVolumeIops={c.gpu_root_volume_iops}, "
            f"gpuRootVolumeThroughput={c.gpu_root_volume_throughput} MiB/s)"
        )
        if c.gpu_local_storage == "raid0" and not live:
            return Finding(
                FAIL,
                "gpu storage",
                f"gpuLocalStorage=raid0 but EC2 reports no instance store for {itype} in "
                f"{self.aws.region} (the offline table says {table} GB): use "
                "ray-pd-eks settings --set gpuLocalStorage=none (the root volume then holds "
                "images and caches) or a "
                "type with NVMe",
            )
        if not c.uses_local_nvme:
            unused = f"; its {nvme} stays unused" if live else ""
            return Finding(
                OK, "gpu storage", f"gpuLocalStorage={c.gpu_local_storage}: {root}{unused}"
            )
        if live != table:
            consequence = (
                f"the nodes would find no disk for RAID0 and keep images and caches on the "
                f"{c.gpu_root_gib} GiB root volume: set ray-pd-eks settings --set "
                f"gpuLocalStorage=none"
                if not live
                else "containerd, kubelet and the model cache still go to its RAID0"
            )
            # No disk at all leaves a 50 GiB root volume to hold the image and the weights.
            return Finding(
                WARN if live else FAIL,
                "gpu storage",
                f"EC2 reports {live} GB of instance store for {itype}, the offline table "
                f"(ray_pd_eks/instance_types.py) {table} GB: {consequence}",
            )
        return Finding(
            OK,
            "gpu storage",
            f"{itype}: {nvme}; containerd, kubelet and the model cache go to its RAID0 at "
            f"{NVME_MOUNT}, the {c.gpu_root_gib} GiB root volume holds the OS",
        )

    def gpu_az(self) -> Iterator[Finding]:
        itype = self.config.gpu_node_type
        ec2 = self.aws.client("ec2")
        offerings = self._call(
            "ec2:DescribeInstanceTypeOfferings",
            lambda: ec2.describe_instance_type_offerings(
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": [itype]}],
            )["InstanceTypeOfferings"],
        )
        zones = sorted({str(o["Location"]) for o in offerings})
        listed = ", ".join(zones)
        configured = self.config.gpu_az
        if not zones:
            yield Finding(
                FAIL,
                "gpu AZ",
                f"no Availability Zone of {self.aws.region} offers {itype}: "
                "use another region or ray-pd-eks settings --set gpuNodeType=...",
            )
        elif configured and configured not in zones:
            yield Finding(
                FAIL,
                "gpu AZ",
                f"gpuAz {configured} does not offer {itype} (offered in {listed}): "
                f"use ray-pd-eks settings --set gpuAz={zones[0]}",
            )
        elif configured:
            yield Finding(OK, "gpu AZ", f"gpuAz {configured} offers {itype} (also: {listed})")
        elif self.config.gpu_capacity_reservation_id:
            yield Finding(
                OK,
                "gpu AZ",
                f"{itype} is offered in {listed}; the deploy uses the capacity reservation's AZ",
            )
        else:
            yield Finding(
                OK,
                "gpu AZ",
                f"{itype} is offered in {listed}; the deploy picks one — to pin it "
                f"(EFA needs one AZ), use ray-pd-eks settings --set gpuAz={zones[0]}",
            )
