"""Shared settings for the app's own Python Lambda functions."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_

ASSETS = Path(__file__).resolve().parent.parent / "assets"
# The newest Python runtime Lambda offers; handlers use only the standard library and boto3.
PYTHON_RUNTIME = lambda_.Runtime.PYTHON_3_14


def lambda_code(folder: str) -> lambda_.Code:
    """A plain-folder asset under ``assets/lambda/`` (no bundling, so no Docker)."""
    return lambda_.Code.from_asset(str(ASSETS / "lambda" / folder), exclude=["__pycache__"])
