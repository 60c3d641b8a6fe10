"""Preflight's account checks: who you are and in which region, whether the environment is
CDK-bootstrapped, whether you will be able to administer the cluster, and whether a leftover
log group would make the deploy fail with "already exists"."""

from __future__ import annotations

from collections.abc import Iterator

from botocore import exceptions as bce

from ray_pd_eks.cli.aws import error_code, same_name_other_path, same_principal
from ray_pd_eks.cli.errors import ADD_ADMIN_ME_COMMAND, CLI, SET_COMMAND, AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks
from ray_pd_eks.config import set_hint
from ray_pd_eks.dlc_images import DLC_DOC, dlc_registry
from ray_pd_eks.eks_images import ADD_ONS_IMAGES_DOC, EKS_IMAGE_REGISTRIES
from ray_pd_eks.monitoring import fixed_log_group_names

BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6  # templates synthesized by CDK v2 check for at least this


class AccountChecks(Checks):
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
