"""The promotion pipeline: CDK Pipelines deploying the same ``RayPdEksStage`` as ``app.py`` to
each configured environment in order, with a manual approval before production."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aws_cdk import CfnElement, CfnOutput, RemovalPolicy, Stack, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from pd_constructs.common.nag import (
    acknowledge,
    acknowledge_basic_execution_role,
    function_versions_finding,
)
from ray_pd_eks.pipeline_config import DeploymentEnvironment, PipelineConfig
from stacks.stage import RayPdEksStage

ROOT = Path(__file__).resolve().parent.parent
STAGE_PREFIX = "RayPdEks"
# The quality gate of the README, run before anything is synthesized for promotion.
TEST_COMMAND = "./scripts/test.sh"
# Same installs as ./scripts/setup.sh: every Python package (pip itself too) from the hashed
# lock, refused if a file's hash is not listed, and the locked npm tree (which brings the pinned
# CDK CLI and Node.js, checked against package-lock.json's integrity hashes). `cdk.json` runs
# the app with `.venv/bin/python`. Nothing is installed at "latest".
INSTALL_COMMANDS = (
    "python -m venv .venv",
    ".venv/bin/python -m pip install --require-hashes -r requirements-lock.txt",
    "npm ci",
)
# The asset publishing CLI that CDK Pipelines installs in its asset jobs (`npm install -g
# cdk-assets@<this>`; without it, `@latest`). 4.7.3: the npm registry's latest 4.x, 2026-12.
CDK_ASSETS_VERSION = "4.7.3"
SYNTH_COMMANDS = (TEST_COMMAND, "npx cdk synth")
# CodeBuild's Ubuntu 24.04 image; runtimes pinned so an image update cannot change them.
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_8_0
RUNTIMES = {"python": "3.12", "nodejs": "22"}
# The S3 and KMS actions of aws-cdk-lib's read/write grants on the artifact bucket and its key.
_ARTIFACT_ACTIONS = (
    "s3:Abort*",
    "s3:DeleteObject*",
    "s3:GetBucket*",
    "s3:GetObject*",
    "s3:List*",
    "kms:GenerateDataKey*",
    "kms:ReEncrypt*",
)


def stage_id(env: DeploymentEnvironment) -> str:
    """``RayPdEks-<name>``: the pipeline stage's name and its stacks' prefix, so they read
    ``RayPdEks-prod-Cluster`` beside the plain app's ``RayPdEks-Cluster``."""
    return f"{STAGE_PREFIX}-{env.name}"


def cdk_cli_version() -> str:
    """The CDK CLI pinned in package.json, so self-mutation and asset publishing in the pipeline
    use the same CLI as `npx cdk` locally instead of whatever is newest on npm."""
    package = json.loads((ROOT / "package.json").read_text())
    return str(package["devDependencies"]["aws-cdk"])


def _env_var(output_id: str) -> str:
    """``PortForwardCommand`` -> ``PORT_FORWARD_COMMAND``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", output_id).upper()


def stage_outputs(stage: RayPdEksStage) -> dict[str, CfnOutput]:
    """Every output of the stage's stacks, keyed by environment variable.

    Collected from the stacks rather than named one by one, so outputs added later (e.g. the
    readiness check's) are printed without touching the pipeline."""
    outputs: dict[str, CfnOutput] = {}
    for stack in stage.stacks:  # every stack's outputs, in deploy order
        for child in stack.node.children:
            if isinstance(child, CfnOutput):
                outputs[_env_var(child.node.id)] = child
    return outputs


def endpoint_report(env: DeploymentEnvironment, stage: RayPdEksStage) -> pipelines.ShellStep:
    """A post-deploy step printing the endpoint facts. It proves nothing new on purpose: the
    readiness custom resource already failed the deploy unless the Serve app reached RUNNING,
    and the endpoint is a ClusterIP service that CodeBuild cannot reach anyway."""
    outputs = stage_outputs(stage)
    commands = [f'echo "ray-pd-eks {env.name} ({env.account}/{env.region}) is deployed."']
    commands += [f'echo "{name}: ${name}"' for name in outputs]
    commands.append(
        'echo "Try it: run UPDATE_KUBECONFIG_COMMAND, then PORT_FORWARD_COMMAND, then '
        'curl http://localhost:8000/v1/models"'
    )
    return pipelines.ShellStep("Endpoint", env_from_cfn_outputs=outputs, commands=commands)


class PipelineStack(Stack):
    """A self-mutating CodePipeline whose source is a CodeConnections repository.

    The synth step installs from the pinned files, runs the README's test command (lint,
    format, types, tests with cdk-nag) and only then `npx cdk synth`, so nothing untested is
    promoted. Then, per environment in order: an optional manual approval, the Stage, and a
    step printing the endpoint facts. Artifacts are encrypted with a rotating KMS key when an
    environment lives in another account (the other accounts must be able to read them).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_config: PipelineConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.pipeline_config = cfg = pipeline_config
        source = pipelines.CodePipelineSource.connection(
            cfg.repository, cfg.branch, connection_arn=cfg.connection_arn
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=construct_id,
            pipeline_type=codepipeline.PipelineType.V2,
            synth=pipelines.ShellStep(
                "Synth",
                input=source,
                install_commands=list(INSTALL_COMMANDS),
                commands=list(SYNTH_COMMANDS),
                primary_output_directory="cdk.out",
            ),
            # Off with a production environment (pipeline_config decides): the pipeline that
            # gates production is then the one an administrator deployed, which the gated
            # change cannot rewrite on its way through.
            self_mutation=cfg.self_mutation,
            cross_account_keys=cfg.cross_account,
            enable_key_rotation=cfg.cross_account or None,
            cli_version=cdk_cli_version(),
            cdk_assets_cli_version=CDK_ASSETS_VERSION,
            # The test suite synthesizes the app several times: 7 GB rather than the default 3 GB.
            synth_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    compute_type=codebuild.ComputeType.MEDIUM
                ),
            ),
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=BUILD_IMAGE),
                partial_build_spec=codebuild.BuildSpec.from_object(
                    {"phases": {"install": {"runtime-versions": RUNTIMES}}}
                ),
            ),
        )
        self.stages: dict[str, RayPdEksStage] = {}
        for env in cfg.environments:
            stage = RayPdEksStage(self, stage_id(env), config=env.config)
            self.stages[env.name] = stage
            pre: list[pipelines.Step] = []
            check: pipelines.Step | None = None
            if env.production:
                # `cdk diff --security-only --fail` against the deployed stacks: a change that
                # broadens IAM or security-group rights stops here for a person to review.
                check = pipelines.ConfirmPermissionsBroadening("CheckPermissions", stage=stage)
                pre.append(check)
            # Production is gated here, in code, whatever the environment's data says.
            if env.approval or env.production:
                approve = pipelines.ManualApprovalStep(
                    "Approve",
                    comment=(
                        f"Deploy ray-pd-eks to {env.name} ({env.account}/{env.region})? "
                        "Earlier stages, if any, deployed and passed their readiness checks"
                        + (
                            "; the permission check (new IAM statements and security-group "
                            "rules only, not every change) ran first: read its build log."
                            if check
                            else "."
                        )
                    ),
                )
                if check is not None:
                    approve.add_step_dependency(check)  # the approver sees the check's verdict
                pre.append(approve)
            self.pipeline.add_stage(stage, pre=pre, post=[endpoint_report(env, stage)])
        # Acknowledgments need the generated constructs, which exist only after this call.
        self.pipeline.build_pipeline()
        self._acknowledge_nag_findings()

    def _acknowledge_nag_findings(self) -> None:
        """cdk-nag findings on what aws-cdk-lib's pipelines module generates. Each is limited to
        the construct it is about and, for IAM5, to the exact wildcard findings, so a wildcard
        that a future change adds elsewhere still fails synth."""
        code_pipeline = self.pipeline.pipeline
        buckets = [code_pipeline.artifact_bucket] + [
            support.replication_bucket for support in code_pipeline.cross_region_support.values()
        ]
        for bucket in buckets:
            acknowledge(
                bucket,
                "AwsSolutions-S1",
                "Pipeline artifact bucket: only the pipeline's own roles use it (KMS-encrypted, "
                "TLS-only, public access blocked); CloudTrail records its API calls.",
            )
        bucket_objects = [f"Resource::<{self._logical_id(code_pipeline.artifact_bucket)}.Arn>/*"]
        bucket_objects += [
            f"Resource::arn:{self.partition}:s3:::{self.resolve(bucket.bucket_name)}/*"
            for bucket in buckets[1:]
        ]
        artifact_access = [f"Action::{a}" for a in _ARTIFACT_ACTIONS] + bucket_objects
        for role in self._generated_roles():
            acknowledge(
                role,
                "AwsSolutions-IAM5",
                "aws-cdk-lib's grants on the pipeline's artifacts: read/write of the objects in "
                "the artifact bucket(s) and encrypt/decrypt with their KMS keys (the action "
                "wildcards are the S3/KMS grant sets).",
                findings=artifact_access,
            )
        for project in self._projects():
            acknowledge(
                project,
                "AwsSolutions-IAM5",
                "CodeBuild writes its own log streams and test reports; the wildcards are the "
                "streams of the project's log group and its report groups.",
                findings=self._codebuild_findings(f"<{self._logical_id(project)}>"),
            )
        if buckets[1:]:
            acknowledge(
                code_pipeline.role,
                "AwsSolutions-IAM5",
                "The pipeline role uses the cross-region replication keys through their alias, "
                "whose key ARN is unknown at synth time (kms actions on *).",
                findings=["Resource::*"],
            )
        if not self.pipeline_config.cross_account:
            acknowledge(
                self.pipeline,
                "AwsSolutions-CB4",
                "Single-account pipeline: no customer-managed key (cross-account keys are off "
                "to avoid its cost); build artifacts are encrypted with S3- and AWS-managed "
                "keys. Any environment in another account turns the KMS key on.",
            )
        if self.pipeline_config.self_mutation:
            acknowledge(
                self.pipeline.self_mutation_project,
                "AwsSolutions-IAM5",
                "Self-mutation runs `cdk deploy` of this stack: it assumes the CDK bootstrap "
                "roles (role/*, limited by the aws-cdk:bootstrap-role tag condition) and reads "
                "stack status (cloudformation:DescribeStacks and s3:ListBucket on *).",
                findings=["Resource::*", f"Resource::arn:*:iam::{self.account}:role/*"],
            )
        acknowledge(
            self.pipeline.node.find_child("Assets"),
            "AwsSolutions-IAM5",
            "Asset publishing (cdk-assets) runs CodeBuild builds of its own projects, whose "
            "names aws-cdk-lib generates per asset (codebuild actions on *, log groups and "
            "report groups under /aws/codebuild/*).",
            findings=["Resource::*", *self._codebuild_findings("*")],
        )

        check = self.pipeline.node.try_find_child("PipelinesSecurityCheck")
        if check is not None:
            self._acknowledge_security_check(check)
            self._pin_security_check_cli(check)
            # The auto-approve function's log group: removed with the pipeline like the rest
            # (aws-cdk-lib leaves it to the default, retained).
            for child in check.node.find_all():
                if isinstance(child, logs.CfnLogGroup):
                    child.apply_removal_policy(RemovalPolicy.DESTROY)

    def _pin_security_check_cli(self, check: IConstruct) -> None:
        """aws-cdk-lib 2.275's permission check installs the CDK CLI unpinned (`npm install
        -g aws-cdk`, pipelines/lib/private/application-security-check.ts); pin it to the
        CLI of package.json like the other build steps."""
        project = check.node.find_child("CDKSecurityCheck")
        cfn = project.node.default_child
        assert isinstance(cfn, codebuild.CfnProject)
        build_spec = self.resolve(cfn.source)["buildSpec"]
        delimiter, parts = build_spec["Fn::Join"]
        unpinned = '"npm install -g aws-cdk",'
        pinned = f'"npm install -g aws-cdk@{cdk_cli_version()}",'
        if not any(isinstance(p, str) and unpinned in p for p in parts):
            raise RuntimeError(
                "the permission check's buildspec no longer installs `aws-cdk` unpinned: "
                "re-read application-security-check.ts and update _pin_security_check_cli"
            )
        parts = [p.replace(unpinned, pinned) if isinstance(p, str) else p for p in parts]
        cfn.add_property_override("Source.BuildSpec", {"Fn::Join": [delimiter, parts]})
        # aws-cdk-lib builds the check on its own default image (standard:7.0); the same
        # image and runtimes as every other step of the pipeline.
        cfn.add_property_override("Environment.Image", BUILD_IMAGE.image_id)

    def _acknowledge_security_check(self, check: IConstruct) -> None:
        """The permission-broadening check that CDK Pipelines adds once for production stages:
        a CodeBuild project running `cdk diff --security-only` and a Lambda function that
        approves the stage's approval action when nothing broadens."""
        approver = check.node.find_child("CDKPipelinesAutoApprove")
        acknowledge_basic_execution_role(approver)
        acknowledge(
            approver,
            "AwsSolutions-IAM5",
            "codepipeline:GetPipelineState/PutApprovalResult on *, limited by aws-cdk-lib to "
            "pipelines tagged SECURITY_CHECK=ALLOW_APPROVE (this pipeline): it approves the "
            "check's own approval action when the diff broadens nothing.",
            findings=["Resource::*"],
        )
        project = check.node.find_child("CDKSecurityCheck")
        acknowledge(
            project,
            "AwsSolutions-IAM5",
            "`cdk diff --security-only` assumes the target accounts' CDK deploy roles (role "
            "ARNs unknown here: * limited by the aws-cdk:bootstrap-role=deploy tag condition) "
            "and invokes every version of the auto-approve function.",
            findings=["Resource::*", function_versions_finding(approver)],
        )

    def _logical_id(self, construct: IConstruct) -> str:
        cfn = construct.node.default_child
        assert isinstance(cfn, CfnElement)
        return self.get_logical_id(cfn)

    def _generated_roles(self) -> list[iam.Role]:
        return [c for c in self.pipeline.node.find_all() if isinstance(c, iam.Role)]

    def _projects(self) -> list[codebuild.Project]:
        return [c for c in self.pipeline.node.find_all() if isinstance(c, codebuild.Project)]

    def _codebuild_findings(self, project: str) -> list[str]:
        """How cdk-nag names the wildcards of CodeBuild's log and report permissions."""
        where = f"{self.partition}:{{}}:{self.region}:{self.account}"
        log_group = f"{project}:*" if project != "*" else "*"
        report_group = f"{project}-*" if project != "*" else "*"
        return [
            f"Resource::arn:{where.format('logs')}:log-group:/aws/codebuild/{log_group}",
            f"Resource::arn:{where.format('codebuild')}:report-group/{report_group}",
        ]
