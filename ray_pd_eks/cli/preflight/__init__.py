"""``preflight``: will a deploy with these settings work in this account and region?

Each check asks AWS one question a failed deploy would otherwise answer an hour in: does the
GPU type have EFA (and the NVMe the nodes' storage expects) here, which AZ offers it, does the
capacity reservation fit, is the vCPU quota enough for the GPU nodes, is the environment
bootstrapped, are the staged model and the token secret usable. Every finding is one line: OK,
WARN or FAIL, and what to do. Only metadata is read: never an object's or a secret's content.

The checks come in groups, one module each: ``account`` (credentials, region, bootstrap,
access, leftover log groups), ``gpu`` (type, storage, AZ), ``capacity`` (reservation, vCPU
quota), ``model`` (staged model, token secret), ``endpoint`` (certificate, CIDRs) and
``observability`` (the CloudWatch add-on); :class:`Preflight` runs them in order.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, deploy_command
from ray_pd_eks.cli.output import FAIL, Finding, summary
from ray_pd_eks.cli.preflight.account import AccountChecks
from ray_pd_eks.cli.preflight.capacity import CapacityChecks
from ray_pd_eks.cli.preflight.endpoint import EndpointChecks
from ray_pd_eks.cli.preflight.gpu import GpuChecks
from ray_pd_eks.cli.preflight.model import ModelChecks
from ray_pd_eks.cli.preflight.observability import ObservabilityChecks

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # only the global flags


class Preflight(
    AccountChecks, GpuChecks, CapacityChecks, ModelChecks, EndpointChecks, ObservabilityChecks
):
    """The checks, in order; each yields findings and never raises for an expected answer."""

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
