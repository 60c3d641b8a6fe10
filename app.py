#!/usr/bin/env python3
"""The CDK app: one RayPdEksStage built from the typed configuration in CDK context."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from ray_pd_eks.config import AppConfig, ConfigError
from ray_pd_eks.stage import RayPdEksStage

STAGE_ID = "RayPdEks"


def main() -> None:
    app = cdk.App()
    try:
        config = AppConfig.from_context(app.node.get_all_context())
    except ConfigError as err:
        sys.exit(f"Invalid configuration, nothing synthesized:\n{err}")
    RayPdEksStage(app, STAGE_ID, config=config)
    app.synth()


if __name__ == "__main__":
    main()
