#!/usr/bin/env python3
"""The CDK app. By default one RayPdEksStage built from the typed configuration in CDK context.

When cdk.json's context declares a ``pipeline`` (see pipeline.example.json), the app is the
promotion pipeline stack instead, whose stages deploy that same Stage once per environment. The
plain Stage is then left out on purpose: every environment is reached through the pipeline, and
`cdk deploy --all` must not also deploy an unmanaged copy to whatever account the caller's
credentials point at. `-c pipeline=` switches the pipeline off for one command (a sandbox).

cdk-nag's AwsSolutions checks run as a validation plugin, as in the tests: an unacknowledged
finding fails `cdk synth`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray_pd_eks.node_runtime import jsii_node_env

# Importing aws_cdk starts jsii's Node.js: the project's, also outside `npx cdk`.
os.environ.update(jsii_node_env())

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from pd_constructs.inventory.render import write_rendered
from ray_pd_eks.cli.settings import with_sources
from ray_pd_eks.config import STAGE_ID as STAGE
from ray_pd_eks.config import AppConfig, ConfigError
from ray_pd_eks.context import (
    LOCAL_SETTINGS_FILE,
    SettingsFileError,
    file_context,
    local_settings,
    with_local_settings,
)
from ray_pd_eks.pipeline_config import PipelineConfig, pipeline_from_context
from stacks.pipeline_stack import PipelineStack
from stacks.stage import RayPdEksStage

STAGE_ID = STAGE  # the Stage's id with the default (empty) deploymentName
PIPELINE_STACK_ID = "RayPdEksPipeline"
# The CDK CLI tells the app nothing of its command, and a selection that matches no stack
# "does not exist" with exit status 0: a `cdk destroy 'RayPdEks/*'` meant for a sandbox would
# look done while the sandbox bills on. So every run with a declared pipeline says what the app
# is, and how to reach a sandbox (docs/teardown.md, Which command destroys what).
PIPELINE_ONLY_NOTE = (
    f"WARNING: cdk.json declares a pipeline, so this app is the {PIPELINE_STACK_ID} stack and "
    f"its environments' stages only. A sandbox's stacks ('{STAGE_ID}/*') are not in it: `cdk "
    f"deploy|destroy '{STAGE_ID}/*'` selects nothing and says \"does not exist\". For a sandbox, "
    f"add -c pipeline= (e.g. npx cdk destroy '{STAGE_ID}/*' --concurrency 1 -c pipeline=)."
)
PROJECT_DIR = Path(__file__).resolve().parent  # cdk.json, cdk.context.json, settings.local.json
USER_HOME: Path | None = Path.home()  # ~/.cdk.json


def configure(cli_context: Mapping[str, Any]) -> tuple[AppConfig, PipelineConfig | None]:
    """The app's configuration, and its pipeline if one is declared, from the CDK CLI's context.

    The user's ``settings.local.json`` is applied below ``-c`` (``ray_pd_eks/context.py``), as
    the operations CLI does. A declared pipeline is built without it: the pipeline's own synth,
    in CodeBuild, has no such file. Raises ConfigError on an invalid configuration.
    """
    context = with_local_settings(cli_context, PROJECT_DIR, USER_HOME)
    config = AppConfig.from_context(context)
    pipeline = pipeline_from_context(context, config)
    if pipeline is not None:
        print(PIPELINE_ONLY_NOTE, file=sys.stderr)
    if pipeline is not None and context != dict(cli_context):
        print(f"note: {LOCAL_SETTINGS_FILE} is not used for the pipeline", file=sys.stderr)
        config = AppConfig.from_context(cli_context)
        pipeline = pipeline_from_context(cli_context, config)
    return config, pipeline


def with_local_sources(message: str, cli_context: Mapping[str, Any]) -> str:
    """The problem lines, each bad value that comes from settings.local.json saying so (and
    how to remove it): the file is the user's, and the tool repairs it."""
    try:
        local = local_settings(PROJECT_DIR)
        files = file_context(PROJECT_DIR, USER_HOME)
    except SettingsFileError:
        return message
    from_file = {
        key: LOCAL_SETTINGS_FILE
        for key in local
        if key not in cli_context or (key in files and cli_context[key] == files[key])
    }
    return with_sources(message, from_file)


def build(app: cdk.App) -> RayPdEksStage | PipelineStack:
    """Add the app's contents to ``app``; raises ConfigError on an invalid configuration."""
    config, pipeline = configure(app.node.get_all_context())
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    if pipeline is None:
        return RayPdEksStage(app, config.stage_id, config=config)
    env = cdk.Environment(account=pipeline.account, region=pipeline.region)
    return PipelineStack(app, PIPELINE_STACK_ID, pipeline_config=pipeline, env=env)


def builtin_validation(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether aws-cdk-lib's own CloudFormation template validation runs: only with
    ``CDK_VALIDATION=true``. Its findings are warnings (cdk.json does not set
    ``@aws-cdk/core:validateAgainstDefaultRules``) and cfn-lint, stricter, lints every template
    in the tests; it was half of the synth's CPU (8.9 s wall and 12.4 s CPU against 6.1 s and
    6.8 s without it, one run each on the six-stack app, a quiet machine). cdk-nag runs
    either way."""
    return environ.get("CDK_VALIDATION", "").strip().lower() == "true"


def main(app: cdk.App | None = None) -> None:
    app = app or cdk.App(builtin_cloud_formation_validation=builtin_validation())
    try:
        built = build(app)
    except ConfigError as err:
        message = with_local_sources(str(err), app.node.get_all_context())
        sys.exit(f"Invalid configuration, nothing synthesized:\n{message}")
    except SettingsFileError as err:
        sys.exit(f"Invalid configuration, nothing synthesized:\n{err}")
    app.synth()
    if isinstance(built, RayPdEksStage):
        # The Kubernetes YAML it deploys, for review or for an existing cluster (README).
        write_rendered(built.config, Path(app.outdir) / "rendered")


if __name__ == "__main__":
    main()
