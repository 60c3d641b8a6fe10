"""``preflight``: will a deploy with these settings work in this account and region?

Each check asks AWS one question a failed deploy would otherwise answer an hour in: does the
GPU type have EFA here, which AZ offers it, is the vCPU quota enough for the GPU nodes, is the
environment bootstrapped. Every finding is one line: OK, WARN or FAIL, and what to do.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from typing import Any

from botocore import exceptions as bce

from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.aws import Aws, error_code
from ray_pd_eks.cli.errors import DEPLOY_COMMAND, EXIT_CHECK_FAILED, EXIT_OK, AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding, summary
from ray_pd_eks.config import AppConfig

NAME = "preflight"
HELP = "check account, region, GPU type, AZs, vCPU quota and CDK bootstrap before a deploy"
DESCRIPTION = """\
Check, before a deploy, that the settings fit this account and region:
  credentials  who you are (sts:GetCallerIdentity) and the region used
  gpu type     gpuNodeType supports EFA here, with its EFA interfaces, vCPUs and GPUs
  gpu AZ       the Availability Zones that offer gpuNodeType; recommends -c gpuAz=...
  vCPU quota   on-demand G and VT (or P) vCPU quota >= gpuNodeCount x vCPUs
  bootstrap    the environment is CDK-bootstrapped (cdk bootstrap aws://ACCOUNT/REGION)
  access       your principal is in adminPrincipalArns (so status/smoke can read the cluster)
Exit 1 if any check FAILs; WARNs do not change the exit code."""

# On-demand vCPU quotas of EC2 (Service Quotas, service code ec2) by instance family class.
QUOTAS = {
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances", ("g*", "vt*")),
    "P": ("L-417A185B", "Running On-Demand P instances", ("p*",)),
}
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6  # templates synthesized by CDK v2 check for at least this


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


class Preflight:
    """The checks, in order; each yields findings and never raises for an expected answer."""

    def __init__(self, aws: Aws, config: AppConfig) -> None:
        self.aws = aws
        self.config = config
        self.vcpus: int | None = None  # from describe_instance_types, used by the quota check

    def run(self) -> Iterator[Finding]:
        checks: list[Callable[[], Iterator[Finding]]] = [
            self.credentials,
            self.gpu_type,
            self.gpu_az,
            self.quota,
            self.bootstrap,
            self.access,
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
        yield Finding(OK, "region", f"{self.aws.region} (from {self.aws.region_source})")
        if self.config.account and self.config.account != account:
            yield Finding(
                FAIL,
                "account",
                f"context account {self.config.account} differs from your credentials' "
                f"account {account}: use that account's --profile or fix -c account=...",
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
                "(--region / -c region=...) or type (-c gpuNodeType=...)",
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
                "(-c gpuNodeType=...)",
            )
        elif gpu_count < 1:
            yield Finding(FAIL, "gpu type", f"{itype} has no GPU: use -c gpuNodeType=g6.8xlarge")
        else:
            yield Finding(OK, "gpu type", f"{itype}: EFA supported (max {efa} interfaces), {facts}")

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
                "use another region or -c gpuNodeType=...",
            )
        elif configured and configured not in zones:
            yield Finding(
                FAIL,
                "gpu AZ",
                f"gpuAz {configured} does not offer {itype} (offered in {listed}): "
                f"use -c gpuAz={zones[0]}",
            )
        elif configured:
            yield Finding(OK, "gpu AZ", f"gpuAz {configured} offers {itype} (also: {listed})")
        else:
            yield Finding(
                OK,
                "gpu AZ",
                f"{itype} is offered in {listed}; the deploy picks one — to pin it "
                f"(EFA needs one AZ), use -c gpuAz={zones[0]}",
            )

    def quota(self) -> Iterator[Finding]:
        itype = self.config.gpu_node_type
        cls = quota_class(itype)
        if cls is None:
            yield Finding(WARN, "vCPU quota", f"no known on-demand quota for {itype}; check it")
            return
        code, title, patterns = QUOTAS[cls]
        vcpus = self.vcpus or self.config.gpu_spec.vcpus
        needed = self.config.gpu_node_count * vcpus

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
        sizing = f"{self.config.gpu_node_count} x {itype} = {needed} vCPUs"
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

    def access(self) -> Iterator[Finding]:
        """Can this principal use status/smoke/efa-check after the deploy? Two things decide:
        an access entry on the cluster, and a network path to its API endpoint."""
        principal = self.aws.principal_arn()
        if principal in self.config.admin_principal_arns:
            yield Finding(OK, "access", f"{principal} is in adminPrincipalArns")
        else:
            yield Finding(
                WARN,
                "access",
                f"{principal} is not in adminPrincipalArns: status/smoke/efa-check will be denied "
                f"by the cluster; add -c adminPrincipalArns={principal} (comma-separate several)",
            )
        cidrs = self.config.endpoint_public_cidrs
        if cidrs:
            yield Finding(OK, "api endpoint", f"public for {', '.join(cidrs)}, and private")
        else:
            yield Finding(
                WARN,
                "api endpoint",
                "private only: status/smoke/efa-check and kubectl work from inside the VPC; to "
                "use them from here, add -c endpointPublicCidrs=<your-ip>/32",
            )


def run(app: App) -> int:
    config = app.config
    app.print(
        f"Preflight for cluster {config.cluster_name}: {config.gpu_node_count} x "
        f"{config.gpu_node_type} (EFA), namespace {config.namespace}"
    )
    findings: list[Finding] = []
    for finding in Preflight(app.aws, config).run():
        findings.append(finding)
        app.print(finding.line())  # as found: a slow AWS call should not hide earlier checks
    verdict = f"ready to deploy: {DEPLOY_COMMAND}"
    app.print(summary(findings, verdict, "not ready to deploy"))
    return EXIT_CHECK_FAILED if any(f.level == FAIL for f in findings) else EXIT_OK
