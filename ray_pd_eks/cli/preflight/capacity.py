"""Preflight's capacity checks: the capacity reservation (active, matching, with enough free
instances), and the on-demand vCPU quota for the GPU nodes and a node update's extra ones."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from botocore import exceptions as bce

from ray_pd_eks import lambda_code
from ray_pd_eks.cli.aws import error_code
from ray_pd_eks.cli.errors import AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks
from ray_pd_eks.config import AppConfig, set_hint

# Extra GPU nodes an EKS managed node group update launches before it drains the old ones:
# the larger of 2 x its AZs (one) and maxUnavailable (EKS's default, 1) (EKS User Guide,
# "Understand each phase of node updates"; see CapacityChecks._update_headroom).
GPU_UPDATE_SURGE_NODES = 2

# On-demand vCPU quotas of EC2 (Service Quotas, service code ec2) by instance family class.
QUOTAS = {
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances", ("g*", "vt*")),
    "P": ("L-417A185B", "Running On-Demand P instances", ("p*",)),
}


def quota_class(instance_type: str) -> str | None:
    """``g6.8xlarge`` -> ``G``, ``vt1.3xlarge`` -> ``G``, ``p5.48xlarge`` -> ``P``."""
    family = instance_type.split(".", 1)[0]
    if re.match(r"^(g|vt)\d", family):
        return "G"
    if re.match(r"^p\d", family):
        return "P"
    return None


def scale_up_shortfall(reservation: dict[str, Any], config: AppConfig, held: int = 0) -> str:
    """Why the GPU group cannot scale up to ``gpuNodeMaxCount`` inside the reservation, or "".

    The launch template targets the reservation by id (``CapacityReservationTarget``), and EC2
    fails a launch that targets a specific reservation without enough free capacity instead of
    falling back to On-Demand (EC2 User Guide, "Launch instances into an existing Capacity
    Reservation"). So the deploy needs ``gpuNodeCount`` free instances (a FAIL below that, the
    same check as the GPU AZ custom resource's), and every node the Cluster Autoscaler adds
    above them needs one more: fewer than ``gpuNodeMaxCount`` is not a deploy failure, but the
    scale-ups past the free count never land (the Cluster Autoscaler backs off and retries).
    ``held``: instances of the reservation this cluster's GPU nodes already run on.
    """
    available = int(reservation.get("AvailableInstanceCount", 0))
    usable = available + held
    ceiling = config.gpu_node_max
    if usable >= ceiling:
        return ""
    rid = reservation.get("CapacityReservationId", "")
    holding = f" and this cluster's GPU nodes hold {held}" if held else ""
    return (
        f"{rid} has {available} instances free{holding} but gpuNodeMaxCount={ceiling}: the "
        "launch template targets only this reservation, so the Cluster Autoscaler's scale-ups "
        f"beyond {usable} nodes fail to launch and decode cannot grow past them; enlarge it "
        f"(`aws ec2 modify-capacity-reservation --capacity-reservation-id {rid} "
        f"--instance-count {int(reservation.get('TotalInstanceCount', 0)) + ceiling - usable}`)"
        f" or lower ray-pd-eks settings --set gpuNodeMaxCount={usable} (and decodeMaxReplicas "
        f"to fit)"
    )


class CapacityChecks(Checks):
    def capacity_reservation(self) -> Iterator[Finding]:
        c = self.config
        rid = c.gpu_capacity_reservation_id
        if not rid:
            yield Finding(
                OK,
                "capacity reservation",
                "none (On-Demand capacity; the deploy fails after gpuCapacityWaitMinutes="
                f"{c.gpu_capacity_wait_minutes} if the AZ has none)",
            )
            return
        gpu_az = lambda_code.gpu_az_handler()
        ec2 = self.aws.client("ec2")
        try:
            with self.aws.errors("ec2:DescribeCapacityReservations"):
                try:
                    found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
                        "CapacityReservations"
                    ]
                except bce.ClientError as err:
                    if error_code(err) not in gpu_az.NOT_FOUND_CODES:
                        raise
                    found = []
        except AccessError as err:
            yield Finding(WARN, "capacity reservation", f"cannot check {rid} ({err.message})")
            return
        if not found:
            yield Finding(
                FAIL,
                "capacity reservation",
                f"{rid} not found in this account and {self.aws.region}: check the id and the "
                "region, or leave gpuCapacityReservationId empty",
            )
            return
        r = found[0]
        # The AL2023 EKS AMIs are Linux; a reservation for another platform never matches the
        # nodes.
        # The deploy's own checks (the GPU AZ custom resource), all but the free count, which
        # is judged here counting the instances this cluster's GPU nodes already hold: on a
        # running deployment they use the reservation, and a redeploy keeps them.
        problems = gpu_az.reservation_problems(
            r,
            instance_type=c.gpu_node_type,
            requested_az=c.gpu_az,
            placement_group=c.gpu_placement_group_name,
            instance_count=c.gpu_node_count,
            creating=False,
        )
        available = int(r.get("AvailableInstanceCount", 0))
        total = int(r.get("TotalInstanceCount", 0))
        held = self._held_by_this_cluster(rid)
        holding = f" and this cluster's GPU nodes hold {held}" if held else ""
        if available + held < c.gpu_node_count:
            n = c.gpu_node_count
            problems.append(
                f"gpuCapacityReservationId={rid} has {available} of {total} instances free"
                f"{holding}, but gpuNodeCount={n} nodes need {n}; stop the instances that use "
                f"it or enlarge the reservation, or lower gpuNodeCount ({set_hint('gpuNodeCount')})"
            )
        for problem in problems:
            yield Finding(FAIL, "capacity reservation", problem)
        if problems:
            return
        az = r.get("AvailabilityZone", "?")
        group = gpu_az.placement_group_of(r)
        where = f" in placement group {group}" if group else ""
        yield Finding(
            OK,
            "capacity reservation",
            f"{rid}: {c.gpu_node_type} in {az}{where}, {available} of {total} instances free"
            f"{holding} for gpuNodeCount={c.gpu_node_count}; the GPU AZ will be {az}, the "
            "reservation's",
        )
        short = scale_up_shortfall(r, c, held)
        if short:
            yield Finding(WARN, "capacity reservation", short)

    def _held_by_this_cluster(self, reservation_id: str) -> int:
        """Pending or running instances in the reservation that belong to this cluster (EKS
        tags its nodes ``eks:cluster-name``); 0 when they cannot be listed."""
        filters = [
            {"Name": "capacity-reservation-id", "Values": [reservation_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
            {"Name": "tag:eks:cluster-name", "Values": [self.config.cluster_name]},
        ]
        ec2 = self.aws.client("ec2")
        try:
            with self.aws.errors("ec2:DescribeInstances"):
                pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
                return sum(
                    len(reservation.get("Instances", []))
                    for page in pages
                    for reservation in page.get("Reservations", [])
                )
        except AccessError:
            return 0

    def quota(self) -> Iterator[Finding]:
        itype = self.config.gpu_node_type
        cls = quota_class(itype)
        if cls is None:
            yield Finding(WARN, "vCPU quota", f"no known on-demand quota for {itype}; check it")
            return
        code, title, patterns = QUOTAS[cls]
        vcpus = self.vcpus or self.config.gpu_spec.vcpus
        # Enough for the most nodes the group may hold (gpuNodeMaxCount when it scales).
        needed = self.config.gpu_node_max * vcpus

        def request(desired: int) -> str:
            return (
                "aws service-quotas request-service-quota-increase --service-code ec2 "
                f"--quota-code {code} --desired-value {desired} --region {self.aws.region}"
            )

        try:
            value = self._call(
                "servicequotas:GetServiceQuota",
                lambda: self.aws.client("service-quotas").get_service_quota(
                    ServiceCode="ec2", QuotaCode=code
                )["Quota"]["Value"],
            )
        except AccessError as err:
            yield Finding(WARN, "vCPU quota", f"cannot read '{title}' ({err.message})")
            return
        limit = int(value)
        sizing = f"{self.config.gpu_node_max} x {itype} = {needed} vCPUs"
        if limit < needed:
            yield Finding(
                FAIL,
                "vCPU quota",
                f"'{title}' is {limit} vCPUs, below {sizing}: "
                f"request more with `{request(needed)}`",
            )
            return
        in_use = self._in_use(patterns)
        if in_use is not None and limit - in_use < needed:
            yield Finding(
                WARN,
                "vCPU quota",
                f"'{title}' is {limit} vCPUs and other instances already use {in_use}; "
                f"{sizing} will not fit: stop some or `{request(needed + in_use)}`",
            )
            return
        used = f", {in_use} in use elsewhere" if in_use else ""
        yield Finding(OK, "vCPU quota", f"'{title}' is {limit} vCPUs{used}; needs {sizing}")
        yield from self._update_headroom(limit, in_use or 0, needed, vcpus, title, request)

    def _update_headroom(
        self,
        limit: int,
        in_use: int,
        needed: int,
        vcpus: int,
        title: str,
        request: Callable[[int], str],
    ) -> Iterator[Finding]:
        """Whether the quota also holds the extra nodes a node group update launches.

        With EKS's default update strategy the update first raises the Auto Scaling group's
        desired size by the larger of twice its AZ count and maxUnavailable, and drains the
        old nodes only once the new ones are Ready (EKS User Guide, "Understand each phase of
        node updates", scale up phase). The GPU group is in one AZ with maxUnavailable at EKS's
        default of 1 (no updateConfig), so that is 2 nodes above the group's size. With a
        capacity reservation the group updates with MINIMAL (terminate first): no extra node.
        """
        itype = self.config.gpu_node_type
        if self.config.gpu_capacity_reservation_id:
            yield Finding(
                OK,
                "node updates",
                "gpuCapacityReservationId set: updates terminate each old node before its "
                "replacement launches (MINIMAL), so they need no vCPUs beyond the group's",
            )
            return
        surge = GPU_UPDATE_SURGE_NODES * vcpus
        total = needed + surge
        free = limit - in_use
        sizing = f"{self.config.gpu_node_max} + {GPU_UPDATE_SURGE_NODES} x {itype} = {total} vCPUs"
        if free < total:
            yield Finding(
                WARN,
                "node updates",
                f"'{title}' leaves {free} vCPUs for the GPU nodes: a node update (new AMI, "
                f"launch template or Kubernetes version) launches {GPU_UPDATE_SURGE_NODES} "
                f"more {itype} before draining the old ones, {sizing}, so it would fail with "
                f"NodeCreationFailure; request more with `{request(total + in_use)}`, or use a "
                "capacity reservation (ray-pd-eks settings --set gpuCapacityReservationId=..., "
                "updates then replace "
                "nodes one at a time)",
            )
            return
        yield Finding(OK, "node updates", f"room for an update's extra nodes: {sizing}")

    def _in_use(self, patterns: tuple[str, ...]) -> int | None:
        """vCPUs of running instances in the same quota class, not counting this cluster's own.

        A redeploy would otherwise count the cluster's GPU nodes against itself. Returns None
        when the instances cannot be listed: the quota check then stands alone.
        """
        ec2 = self.aws.client("ec2")
        filters = [
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
            {"Name": "instance-type", "Values": list(patterns)},
        ]
        total = 0
        try:
            with self.aws.errors("ec2:DescribeInstances"):
                for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
                    for reservation in page.get("Reservations", []):
                        for instance in reservation.get("Instances", []):
                            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                            if tags.get("eks:cluster-name") == self.config.cluster_name:
                                continue
                            cpu = instance.get("CpuOptions", {})
                            total += int(cpu.get("CoreCount", 0)) * int(
                                cpu.get("ThreadsPerCore", 1)
                            )
        except AccessError:
            return None
        return total
