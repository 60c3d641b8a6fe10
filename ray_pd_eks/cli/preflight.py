"""``preflight``: will a deploy with these settings work in this account and region?

Each check asks AWS one question a failed deploy would otherwise answer an hour in: does the
GPU type have EFA (and the NVMe the nodes' storage expects) here, which AZ offers it, does the
capacity reservation fit, is the vCPU quota enough for the GPU nodes, is the environment
bootstrapped, are the staged model and the token secret usable. Every finding is one line: OK,
WARN or FAIL, and what to do. Only metadata is read: never an object's or a secret's content.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from botocore import exceptions as bce

from ray_pd_eks import lambda_code
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.aws import Aws, error_code, same_name_other_path, same_principal
from ray_pd_eks.cli.errors import (
    ADD_ADMIN_ME_COMMAND,
    CLI,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    SET_COMMAND,
    AccessError,
    deploy_command,
)
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding, summary
from ray_pd_eks.config import AppConfig, set_hint
from ray_pd_eks.config.limits import MIN_CLOUDWATCH_ADDON_MAJOR, NVME_MOUNT
from ray_pd_eks.dlc_images import DLC_DOC, dlc_registry
from ray_pd_eks.eks_images import ADD_ONS_IMAGES_DOC, EKS_IMAGE_REGISTRIES
from ray_pd_eks.monitoring import (
    CLOUDWATCH_ADDON_NAME,
    CLOUDWATCH_AGENT_POLICY,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    addon_configuration,
    fixed_log_group_names,
)
from ray_pd_eks.trust import MODEL_ACCESS_TAG_KEY, MODEL_ACCESS_TAG_VALUE, secret_tag_command

NAME = "preflight"
HELP = (
    "check account, region, GPU type, AZs, capacity, vCPU quota, CDK bootstrap and model "
    "access before a deploy"
)
DESCRIPTION = """\
Check, before a deploy, that the settings fit this account and region:
  credentials  who you are (sts:GetCallerIdentity) and the region used (one with an Amazon
               EKS image registry, for the EFA device plugin)
  gpu type     gpuNodeType supports EFA here, with its EFA interfaces, vCPUs and GPUs
  gpu storage  its instance-store NVMe (for gpuLocalStorage) matches what the stack expects
  gpu AZ       the Availability Zones that offer gpuNodeType; recommends a gpuAz (settings --set)
  capacity reservation
               gpuCapacityReservationId is active, for gpuNodeType on Linux/UNIX, in gpuAz,
               has gpuNodeCount free instances (FAIL) and gpuNodeMaxCount free (else WARN:
               scale-ups past the free count cannot launch), counting those this cluster's
               GPU nodes already hold, and matches gpuPlacementGroupName
  vCPU quota   on-demand G and VT (or P) vCPU quota >= gpuNodeMaxCount x vCPUs
  node updates the quota also holds the 2 extra GPU nodes a node group update launches
               before draining the old ones (else WARN; none with a capacity reservation)
  bootstrap    the environment is CDK-bootstrapped (cdk bootstrap aws://ACCOUNT/REGION)
  model in S3  modelS3Uri's bucket is in the deploy region; config.json and *.safetensors
  hugging face token
               hfTokenSecretArn exists, is not deleted, uses the AWS managed key (the
               secret is described, never read)
  access       your principal is in adminPrincipalArns (so status/smoke can read the cluster)
  observability
               EKS offers cloudwatchAddonVersion of amazon-cloudwatch-observability for
               kubernetesVersion, and its configuration schema knows every key the stack sets
  endpoint certificate
               (endpointExposure set) endpointCertificateArn exists here, is ISSUED, is in the
               deploy region, covers endpointDomainName and is not about to expire
  endpoint CIDRs
               endpointAllowedCidrs suit the load balancer's scheme (private ranges for an
               internal one; what an open range means for an internet-facing one)
Exit 1 if any check FAILs; WARNs do not change the exit code."""

# Extra GPU nodes an EKS managed node group update launches before it drains the old ones:
# the larger of 2 x its AZs (one) and maxUnavailable (EKS's default, 1) (EKS User Guide,
# "Understand each phase of node updates"; see Preflight._update_headroom).
GPU_UPDATE_SURGE_NODES = 2

# On-demand vCPU quotas of EC2 (Service Quotas, service code ec2) by instance family class.
QUOTAS = {
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances", ("g*", "vt*")),
    "P": ("L-417A185B", "Running On-Demand P instances", ("p*",)),
}
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
# The AL2023 EKS AMIs are Linux; a reservation for another platform never matches the nodes.
AWS_MANAGED_SECRETS_KEY = "alias/aws/secretsmanager"
S3_LIST_LIMIT = 1000  # one ListObjectsV2 page: a model folder holds far fewer objects
GIB = 1024**3
MIN_BOOTSTRAP_VERSION = 6  # templates synthesized by CDK v2 check for at least this
CERTIFICATE_EXPIRY_WARN_DAYS = 30  # ACM renews managed certificates 60 days ahead; imported
# ones must be replaced by hand, so fewer than 30 days left is worth a warning.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # only the global flags


def quota_class(instance_type: str) -> str | None:
    """``g6.8xlarge`` -> ``G``, ``vt1.3xlarge`` -> ``G``, ``p5.48xlarge`` -> ``P``."""
    family = instance_type.split(".", 1)[0]
    if re.match(r"^(g|vt)\d", family):
        return "G"
    if re.match(r"^p\d", family):
        return "P"
    return None


def bucket_region(location: str | None) -> str:
    """``GetBucketLocation``'s answer as a region: none means us-east-1, ``EU`` eu-west-1."""
    if not location:
        return "us-east-1"
    return "eu-west-1" if location == "EU" else location


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


class Preflight:
    """The checks, in order; each yields findings and never raises for an expected answer."""

    def __init__(
        self, aws: Aws, config: AppConfig, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.aws = aws
        self.config = config
        self.now = now
        self.vcpus: int | None = None  # from describe_instance_types, used by the quota check

    def run(self) -> Iterator[Finding]:
        checks: list[Callable[[], Iterator[Finding]]] = [
            self.credentials,
            self.gpu_type,
            self.gpu_az,
            self.capacity_reservation,
            self.quota,
            self.bootstrap,
            self.model_in_s3,
            self.hf_token,
            self.access,
            self.observability,
            self.endpoint_certificate,
            self.endpoint_cidrs,
            self.leftover_log_groups,
        ]
        for check in checks:
            yield from check()

    def _call(self, action: str, fn: Callable[[], Any]) -> Any:
        with self.aws.errors(action):
            return fn()

    def credentials(self) -> Iterator[Finding]:
        # No credentials or rejected ones end the run (exit 3): nothing else can be checked.
        identity = self.aws.identity()
        account = str(identity.get("Account", ""))
        yield Finding(OK, "credentials", f"{identity.get('Arn', '?')} (account {account})")
        region = f"{self.aws.region} (from {self.aws.region_source})"
        if self.aws.region in EKS_IMAGE_REGISTRIES:
            yield Finding(OK, "region", region)
        else:
            # Synth checks a configured region; an environment-agnostic deploy's region is
            # only known here (and to CloudFormation, whose mapping lookup would fail).
            yield Finding(
                FAIL,
                "region",
                f"{region}: no Amazon EKS image registry known to this app for the EFA device "
                f"plugin (ray_pd_eks/eks_images.py); add the region's from {ADD_ONS_IMAGES_DOC} "
                "or deploy to another region",
            )
        if not self.config.dlc_image and dlc_registry(self.aws.region) is None:
            # Synth refuses a configured region like this; an environment-agnostic deploy
            # would fail at the workload stack's DLC registry mapping.
            yield Finding(
                FAIL,
                "ray image",
                f"no AWS Deep Learning Containers registry in {self.aws.region} ({DLC_DOC}): "
                "copy the Ray LLM image into an ECR repository there and set "
                f"{set_hint('dlcImage')}, or deploy to another region",
            )
        if self.config.account and self.config.account != account:
            yield Finding(
                FAIL,
                "account",
                f"context account {self.config.account} differs from your credentials' "
                f"account {account}: use that account's --profile or fix ray-pd-eks settings "
                f"--set account=...",
            )

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

    def bootstrap(self) -> Iterator[Finding]:
        account = self.aws.identity().get("Account", "ACCOUNT")
        command = f"npx cdk bootstrap aws://{account}/{self.aws.region}"
        version: str | None = None
        try:
            with self.aws.errors("ssm:GetParameter"):
                try:
                    version = str(
                        self.aws.client("ssm").get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"][
                            "Value"
                        ]
                    )
                except bce.ClientError as err:
                    if error_code(err) != "ParameterNotFound":
                        raise
                    yield Finding(FAIL, "bootstrap", f"not CDK-bootstrapped: run `{command}`")
                    return
        except AccessError:
            yield from self._bootstrap_stack(command)
            return
        if version.isdigit() and int(version) < MIN_BOOTSTRAP_VERSION:
            yield Finding(
                FAIL,
                "bootstrap",
                f"bootstrap version {version} is older than {MIN_BOOTSTRAP_VERSION}: "
                f"run `{command}`",
            )
        else:
            yield Finding(OK, "bootstrap", f"CDK bootstrap version {version}")

    def _bootstrap_stack(self, command: str) -> Iterator[Finding]:
        """Fallback when SSM is not readable: the ``CDKToolkit`` stack tells the same."""
        cfn = self.aws.client("cloudformation")
        try:
            with self.aws.errors("cloudformation:DescribeStacks"):
                try:
                    stack = cfn.describe_stacks(StackName="CDKToolkit")["Stacks"][0]
                except bce.ClientError as err:
                    if error_code(err) != "ValidationError":
                        raise
                    yield Finding(FAIL, "bootstrap", f"no CDKToolkit stack: run `{command}`")
                    return
        except AccessError as err:
            yield Finding(WARN, "bootstrap", f"cannot tell ({err.message})")
            return
        yield Finding(OK, "bootstrap", f"CDKToolkit stack is {stack.get('StackStatus', '?')}")

    def model_in_s3(self) -> Iterator[Finding]:
        """The staged model: a same-region bucket whose prefix holds config.json and
        safetensors weights. Lists keys and sizes only, never reads an object."""
        c = self.config
        if not c.model_s3_uri:
            return
        bucket, prefix = c.model_s3_bucket, c.model_s3_prefix
        uri = f"s3://{bucket}/{prefix}/"
        s3 = self.aws.client("s3")
        try:
            with self.aws.errors("s3:GetBucketLocation"):
                try:
                    location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
                except bce.ClientError as err:
                    if error_code(err) != "NoSuchBucket":
                        raise
                    yield Finding(
                        FAIL,
                        "model in S3",
                        f"bucket {bucket} does not exist: fix modelS3Uri={c.model_s3_uri} "
                        f"({set_hint('modelS3Uri')})",
                    )
                    return
            region = bucket_region(location)
            if region != self.aws.region:
                yield Finding(
                    FAIL,
                    "model in S3",
                    f"bucket {bucket} is in {region}, the deployment in {self.aws.region}: "
                    f"staging must be same-region; copy the model to a bucket in "
                    f"{self.aws.region} and point modelS3Uri at it ({set_hint('modelS3Uri')})",
                )
                return
            with self.aws.errors("s3:ListObjectsV2"):
                page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", MaxKeys=S3_LIST_LIMIT)
        except AccessError as err:
            yield Finding(
                WARN,
                "model in S3",
                f"cannot verify {uri} ({err.message}); the deploy's role is read-only on that "
                f"prefix anyway: check it holds config.json and *.safetensors (`aws s3 ls {uri}`)",
            )
            return
        objects = page.get("Contents", [])
        names = [str(o["Key"])[len(prefix) + 1 :] for o in objects]
        top = {n for n in names if n and "/" not in n}
        weights = sorted(n for n in top if n.endswith(".safetensors"))
        missing = [
            name
            for name, present in (("config.json", "config.json" in top), ("*.safetensors", weights))
            if not present
        ]
        count = f"{len(objects)}{'+' if page.get('IsTruncated') else ''}"
        if missing:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            found = f"found {count} objects: {shown}" if names else "it is empty"
            yield Finding(
                FAIL,
                "model in S3",
                f"{uri} has no {' and no '.join(missing)} directly under it ({found}): point "
                "modelS3Uri at the folder holding the model's config.json and weights "
                f"({set_hint('modelS3Uri')})",
            )
            return
        size = sum(int(o.get("Size", 0)) for o in objects) / GIB
        yield Finding(
            OK,
            "model in S3",
            f"{uri}: {count} objects, {size:.1f} GiB (config.json, {len(weights)} "
            f"*.safetensors), bucket in {region}",
        )

    def hf_token(self) -> Iterator[Finding]:
        """The token secret exists and the pods can decrypt it. Described, never read:
        preflight must not hold the token."""
        arn = self.config.hf_token_secret_arn
        if not arn:
            return
        secret_region = arn.split(":")[3] if arn.count(":") >= 6 else self.aws.region
        if secret_region != self.aws.region:
            yield Finding(
                FAIL,
                "hugging face token",
                f"the secret is in {secret_region}, the deployment in {self.aws.region}: use a "
                f"secret in {self.aws.region} (ray-pd-eks settings --set hfTokenSecretArn=...)",
            )
            return
        sm = self.aws.client("secretsmanager")
        try:
            with self.aws.errors("secretsmanager:DescribeSecret"):
                try:
                    secret = sm.describe_secret(SecretId=arn)
                except bce.ClientError as err:
                    if error_code(err) != "ResourceNotFoundException":
                        raise
                    secret = None
        except AccessError as err:
            yield Finding(WARN, "hugging face token", f"cannot check {arn} ({err.message})")
            return
        if secret is None:
            yield Finding(
                FAIL,
                "hugging face token",
                f"{arn} not found in {self.aws.region}: create it (`aws secretsmanager "
                "create-secret --name hf-token --secret-string file://hf-token.txt`) or fix "
                "ray-pd-eks settings --set hfTokenSecretArn=...",
            )
            return
        name = str(secret.get("Name") or arn)
        deleted = secret.get("DeletedDate")
        if deleted:
            when = deleted.strftime("%Y-%m-%d") if hasattr(deleted, "strftime") else deleted
            yield Finding(
                FAIL,
                "hugging face token",
                f"{name} is scheduled for deletion ({when}): restore it with `aws "
                f"secretsmanager restore-secret --secret-id {arn}` or use another secret",
            )
            return
        key = str(secret.get("KmsKeyId") or "")
        if key and not key.endswith(AWS_MANAGED_SECRETS_KEY):
            yield Finding(
                WARN,
                "hugging face token",
                f"{name} is encrypted with the customer managed KMS key {key}: the pods' role "
                "gets no kms:Decrypt on it, so the hf-token init container fails unless that "
                "key's policy lets the model-fetch roles decrypt; or re-encrypt the secret "
                f"with the AWS managed key ({AWS_MANAGED_SECRETS_KEY})",
            )
            return
        tags = {str(t.get("Key")): str(t.get("Value")) for t in secret.get("Tags") or []}
        if tags.get(MODEL_ACCESS_TAG_KEY) != MODEL_ACCESS_TAG_VALUE:
            yield Finding(
                FAIL,
                "hugging face token",
                f"{name} lacks the tag {MODEL_ACCESS_TAG_KEY}={MODEL_ACCESS_TAG_VALUE}: the "
                "pods may read only a secret tagged for this app, so the hf-token init "
                f"container would be denied; tag it: `{secret_tag_command(arn)}`",
            )
            return
        stages = secret.get("VersionIdsToStages") or {}
        if not any("AWSCURRENT" in s for s in stages.values()):
            yield Finding(
                WARN,
                "hugging face token",
                f"{name} lists no current value (AWSCURRENT): put the token with `aws "
                f"secretsmanager put-secret-value --secret-id {arn} --secret-string "
                "file://hf-token.txt`",
            )
            return
        yield Finding(
            OK,
            "hugging face token",
            f"{name} exists, encrypted with the AWS managed key; the pods read it, "
            "preflight only described it",
        )

    def access(self) -> Iterator[Finding]:
        """Can this principal use status/smoke/efa-check after the deploy? Two things decide:
        an access entry on the cluster, and a network path to its API endpoint."""
        yield self._admin_finding()
        cidrs = self.config.endpoint_public_cidrs
        if cidrs:
            yield Finding(OK, "api endpoint", f"public for {', '.join(cidrs)}, and private")
        else:
            yield Finding(
                WARN,
                "api endpoint",
                "private only: status/smoke/efa-check and kubectl work from inside the VPC; to "
                f"use them from here, `{SET_COMMAND} endpointPublicCidrs=<your-ip>/32`",
            )

    def _admin_finding(self) -> Finding:
        """The caller against adminPrincipalArns, whole ARNs compared (paths included)."""
        admins = self.config.admin_principal_arns
        if not admins:
            # allowNoAdmins: the user said so, and the deploy is not refused; still worth a line.
            return Finding(
                WARN if self.config.allow_no_admins else FAIL,
                "access",
                "adminPrincipalArns is empty: NOBODY can administer this cluster (no access "
                "entry: status/smoke/efa-check and kubectl are denied, for you too); add "
                f"yourself with `{ADD_ADMIN_ME_COMMAND}`"
                + ("" if self.config.allow_no_admins else "; the deploy is refused until then"),
            )
        me = self.aws.principal()
        if any(same_principal(me.arn, arn) for arn in admins):
            return Finding(OK, "access", f"{me.arn} is in adminPrincipalArns")
        if not me.path_known and any(same_name_other_path(me.arn, a) for a in admins):
            listed = next(a for a in admins if same_name_other_path(me.arn, a))
            return Finding(
                WARN,
                "access",
                f"{listed} in adminPrincipalArns names your role, but its path is not "
                f"checked ({me.unknown_path_reason}); it must be the role's full ARN "
                "(`aws iam get-role --role-name <name> --query Role.Arn`)",
            )
        wrong = [a for a in admins if same_name_other_path(me.arn, a)]
        if wrong:
            return Finding(
                FAIL,
                "access",
                f"adminPrincipalArns has {wrong[0]}, but your role is {me.arn}: that path "
                "names no role, and EKS refuses its access entry (the Cluster stack fails); "
                f"`{CLI} settings --remove adminPrincipalArns={wrong[0]} --add-admin-me`",
            )
        unsure = "" if me.path_known else f" (its path unknown: {me.unknown_path_reason})"
        return Finding(
            WARN,
            "access",
            f"{me.arn}{unsure} is not in adminPrincipalArns: status/smoke/efa-check will be "
            f"denied by the cluster; add it with `{ADD_ADMIN_ME_COMMAND}`",
        )

    def endpoint_certificate(self) -> Iterator[Finding]:
        """The ALB's certificate: found here, ISSUED, this region, covering the domain."""
        c = self.config
        if not c.endpoint_exposed:
            return
        arn = c.endpoint_certificate_arn
        cert_region = arn.split(":")[3]
        check = "endpoint certificate"
        if cert_region != self.aws.region:
            yield Finding(
                FAIL,
                check,
                f"the certificate is in {cert_region}, the deployment in {self.aws.region}: an "
                f"ALB uses certificates of its own region; request or import one in "
                f"{self.aws.region} (ray-pd-eks settings --set endpointCertificateArn=...)",
            )
            return
        try:
            with self.aws.errors("acm:DescribeCertificate"):
                try:
                    cert = self.aws.client("acm").describe_certificate(CertificateArn=arn)[
                        "Certificate"
                    ]
                except bce.ClientError as err:
                    if error_code(err) not in ("ResourceNotFoundException", "InvalidArnException"):
                        raise
                    cert = None
        except AccessError as err:
            yield Finding(WARN, check, f"cannot check {arn} ({err.message})")
            return
        if cert is None:
            yield Finding(
                FAIL,
                check,
                f"{arn} not found in this account and {self.aws.region}: request one (`aws acm "
                f"request-certificate --domain-name {c.endpoint_domain_name or '<name>'} "
                "--validation-method DNS`) or fix ray-pd-eks settings --set "
                "endpointCertificateArn=...",
            )
            return
        status = str(cert.get("Status", "?"))
        domain = str(cert.get("DomainName", ""))
        names = [str(n) for n in cert.get("SubjectAlternativeNames") or [domain]]
        if status != "ISSUED":
            fix = (
                "create the DNS validation record ACM lists (`aws acm describe-certificate`)"
                if status == "PENDING_VALIDATION"
                else "request a new certificate"
            )
            yield Finding(FAIL, check, f"{domain} is {status}, not ISSUED: {fix}")
            return
        if c.endpoint_domain_name and not certificate_covers(c.endpoint_domain_name, names):
            yield Finding(
                FAIL,
                check,
                f"the certificate covers {', '.join(names)}, not endpointDomainName "
                f"{c.endpoint_domain_name}: clients would reject TLS; use a certificate for it",
            )
            return
        not_after = cert.get("NotAfter")
        days = None
        if not_after is not None and hasattr(not_after, "timestamp"):
            days = int((not_after.timestamp() - self.now().timestamp()) // 86400)
        if days is not None and days < CERTIFICATE_EXPIRY_WARN_DAYS:
            renewal = (
                "ACM renews it if its DNS validation record is still there"
                if cert.get("Type") == "AMAZON_ISSUED"
                else "imported certificates are not renewed: import a new one"
            )
            yield Finding(WARN, check, f"{domain} expires in {days} days: {renewal}")
            return
        covers = (
            f"covers {c.endpoint_domain_name}"
            if c.endpoint_domain_name
            else "no endpointDomainName set: clients will reach the ALB by a name the "
            "certificate does not cover unless you add one"
        )
        level = OK if c.endpoint_domain_name else WARN
        yield Finding(level, check, f"{domain}: ISSUED in {self.aws.region}, {covers}")

    def endpoint_cidrs(self) -> Iterator[Finding]:
        """What the allowed CIDRs mean for this load balancer scheme."""
        c = self.config
        if not c.endpoint_exposed:
            return
        check = "endpoint CIDRs"
        nets = [ipaddress.IPv4Network(x) for x in c.endpoint_allowed_cidrs]
        listed = ", ".join(c.endpoint_allowed_cidrs)
        if c.endpoint_exposure == "internal":
            public = [str(n) for n in nets if n.is_global]
            if public:
                yield Finding(
                    WARN,
                    check,
                    f"{', '.join(public)} are public addresses, but an internal load balancer "
                    "is reached only from the VPC and networks connected to it (peering, VPN, "
                    "Direct Connect), which use private addresses: list those instead",
                )
                return
            vpc = ipaddress.IPv4Network(c.vpc_cidr)
            inside = any(n.overlaps(vpc) for n in nets)
            where = "including the VPC itself" if inside else "none of them the VPC itself"
            yield Finding(OK, check, f"internal ALB, HTTPS from {listed} ({where})")
            return
        opened = [str(n) for n in nets if n.prefixlen < 8]
        private = [str(n) for n in nets if n.is_private]
        if opened:
            yield Finding(
                WARN,
                check,
                f"{', '.join(opened)}: the endpoint is open to the internet; every request "
                "still needs a valid token (endpointAuth=jwt), and the ALB bills for what "
                "reaches it",
            )
        elif private:
            yield Finding(
                WARN,
                check,
                f"{', '.join(private)} are private ranges: an internet-facing load balancer "
                "sees clients' public addresses, so these match only traffic from inside AWS",
            )
        else:
            yield Finding(OK, check, f"internet-facing ALB, HTTPS from {listed} only")

    def leftover_log_groups(self) -> Iterator[Finding]:
        """A log group of a fixed name that exists but belongs to no stack (kept by
        ``retainLogs`` from an earlier deployment, or created by EKS or the add-on before the
        stacks did) makes CloudFormation's create fail with "already exists" and roll back."""
        logs = self.aws.client("logs")
        cloudformation = self.aws.client("cloudformation")
        leftovers: list[str] = []
        try:
            for name in fixed_log_group_names(self.config):
                with self.aws.errors("logs:DescribeLogGroups"):
                    groups = logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"]
                if not any(g.get("logGroupName") == name for g in groups):
                    continue
                try:
                    with self.aws.errors("cloudformation:DescribeStackResources"):
                        cloudformation.describe_stack_resources(PhysicalResourceId=name)
                except bce.ClientError as err:
                    if error_code(err) != "ValidationError":  # "Stack for ... does not exist"
                        raise
                    leftovers.append(name)
        except AccessError as err:
            yield Finding(WARN, "log groups", f"cannot tell ({err.message})")
            return
        if not leftovers:
            yield Finding(OK, "log groups", "no leftover log group blocks the deploy")
            return
        region = self.aws.region
        for name in leftovers:
            yield Finding(
                FAIL,
                "log groups",
                f"{name} exists but belongs to no stack (kept by retainLogs from an earlier "
                "deployment?): creating it again fails with 'already exists'. Export what you "
                "need (aws logs create-export-task), then: aws logs delete-log-group "
                f"--log-group-name {name} --region {region}",
            )

    def observability(self) -> Iterator[Finding]:
        """The add-on version exists for this Kubernetes version, and the configuration the
        stack passes fits that version's schema (EKS would refuse it an hour into the deploy)."""
        c = self.config
        if not c.observability_enabled:
            yield Finding(OK, "observability", "none: no add-on, dashboard or alarms to check")
            return
        eks = self.aws.client("eks")
        try:
            offered = self._addon_versions(eks)
        except AccessError as err:
            yield Finding(WARN, "observability", f"cannot tell ({err.message})")
            return
        usable = sorted(
            (v for v in offered if addon_major(v) >= MIN_CLOUDWATCH_ADDON_MAJOR),
            key=addon_sort_key,
        )
        if c.cloudwatch_addon_version not in offered:
            if usable:
                why = (
                    f"offered: {', '.join(usable[-5:])}; set ray-pd-eks settings --set "
                    f"cloudwatchAddonVersion={usable[-1]}"
                )
            else:
                why = (
                    f"none >= v{MIN_CLOUDWATCH_ADDON_MAJOR} is offered here; set "
                    "ray-pd-eks settings --set observability=none or use another region"
                )
            yield Finding(
                FAIL,
                "observability",
                f"{CLOUDWATCH_ADDON_NAME} {c.cloudwatch_addon_version} is not offered for "
                f"Kubernetes {c.kubernetes_version} in {self.aws.region}; {why}",
            )
            return
        yield Finding(
            OK,
            "observability",
            f"{CLOUDWATCH_ADDON_NAME} {c.cloudwatch_addon_version} offered for Kubernetes "
            f"{c.kubernetes_version}",
        )
        try:
            with self.aws.errors("eks:DescribeAddonConfiguration"):
                answer = eks.describe_addon_configuration(
                    addonName=CLOUDWATCH_ADDON_NAME, addonVersion=c.cloudwatch_addon_version
                )
        except AccessError as err:
            yield Finding(WARN, "addon config", f"cannot tell ({err.message})")
            return
        try:
            schema = json.loads(answer.get("configurationSchema") or "{}")
        except ValueError:
            yield Finding(WARN, "addon config", "EKS returned an unreadable schema")
            return
        yield from self._agent_identity(answer.get("podIdentityConfiguration") or [])
        unknown = unknown_keys(addon_configuration(c.gpu_node_telemetry), schema)
        if unknown:
            yield Finding(
                FAIL,
                "addon config",
                f"{c.cloudwatch_addon_version} does not accept {', '.join(unknown)} "
                "(assets/addons/cloudwatch-observability.yaml): pick a version that does",
            )
        else:
            yield Finding(OK, "addon config", "the version's schema accepts the stack's values")

    def _agent_identity(self, identities: list[dict[str, Any]]) -> Iterator[Finding]:
        """EKS names the service account(s) of the add-on that take a Pod Identity role, and
        the managed policies it recommends: the stack associates one role, with
        CloudWatchAgentServerPolicy's actions narrowed to this cluster's log groups, to
        ``cloudwatch-agent``."""
        if not identities:
            return
        by_account = {i.get("serviceAccount"): i for i in identities}
        if CLOUDWATCH_AGENT_SERVICE_ACCOUNT not in by_account:
            yield Finding(
                FAIL,
                "addon identity",
                f"{self.config.cloudwatch_addon_version} expects Pod Identity for "
                f"{', '.join(sorted(str(a) for a in by_account))}, not "
                f"{CLOUDWATCH_AGENT_SERVICE_ACCOUNT}: pick a version that uses it",
            )
            return
        recommended = (
            by_account[CLOUDWATCH_AGENT_SERVICE_ACCOUNT].get("recommendedManagedPolicies") or []
        )
        if recommended and not any(
            arn.endswith(f"/{CLOUDWATCH_AGENT_POLICY}") for arn in recommended
        ):
            yield Finding(
                WARN,
                "addon identity",
                f"EKS recommends {', '.join(recommended)} for {CLOUDWATCH_AGENT_SERVICE_ACCOUNT}; "
                f"the stack's role is {CLOUDWATCH_AGENT_POLICY} narrowed to this cluster",
            )
            return
        yield Finding(
            OK,
            "addon identity",
            f"{CLOUDWATCH_AGENT_SERVICE_ACCOUNT} with {CLOUDWATCH_AGENT_POLICY}, as EKS recommends",
        )

    def _addon_versions(self, eks: Any) -> set[str]:
        versions: set[str] = set()
        token: str | None = None
        with self.aws.errors("eks:DescribeAddonVersions"):
            while True:
                kwargs = {"nextToken": token} if token else {}
                page = eks.describe_addon_versions(
                    addonName=CLOUDWATCH_ADDON_NAME,
                    kubernetesVersion=self.config.kubernetes_version,
                    **kwargs,
                )
                for addon in page.get("addons", []):
                    versions |= {v["addonVersion"] for v in addon.get("addonVersions", [])}
                token = page.get("nextToken")
                if not token:
                    return versions


def addon_major(version: str) -> int:
    m = re.match(r"^v(\d+)\.", version)
    return int(m.group(1)) if m else 0


def addon_sort_key(version: str) -> tuple[int, ...]:
    """``v8.1.0-eksbuild.2`` -> (8, 1, 0, 2): newest last."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def unknown_keys(values: Any, schema: Any, path: str = "") -> list[str]:
    """Paths of ``values`` whose key the JSON schema node's ``properties`` do not list (the
    add-on schemas EKS returns list every key they accept; a node without ``properties``
    accepts anything)."""
    if not isinstance(values, dict) or not isinstance(schema, dict):
        return []
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key not in props:
            found.append(where)
        else:
            found += unknown_keys(value, props[key], where)
    return found


def certificate_covers(domain: str, names: list[str]) -> bool:
    """Whether a certificate for ``names`` (its domain and SANs) is valid for ``domain``: an
    exact match, or a wildcard ``*.example.com`` for exactly one more label."""
    domain = domain.lower().rstrip(".")
    for name in names:
        name = name.lower().rstrip(".")
        if name == domain:
            return True
        if name.startswith("*.") and domain.split(".", 1)[-1] == name[2:] and "." in domain:
            return True
    return False


def run(app: App) -> int:
    config = app.config
    app.print(
        f"Preflight for cluster {config.cluster_name}: {config.gpu_node_count} x "
        f"{config.gpu_node_type} (EFA), namespace {config.namespace}"
    )
    findings: list[Finding] = []
    for finding in Preflight(app.aws, config, app.runtime.now).run():
        findings.append(finding)
        app.print(finding.line())  # as found: a slow AWS call should not hide earlier checks
    verdict = f"ready to deploy: {deploy_command(config.stage_id)}"
    app.print(summary(findings, verdict, "not ready to deploy"))
    return EXIT_CHECK_FAILED if any(f.level == FAIL for f in findings) else EXIT_OK
