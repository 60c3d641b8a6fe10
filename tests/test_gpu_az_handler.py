"""The GPU AZ chooser's handler, with botocore's Stubber (no AWS)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

HANDLER = Path(__file__).resolve().parent.parent / "assets" / "lambda" / "gpu_az" / "handler.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_az_handler", HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


handler = _load()


def _ec2(azs: list[str]) -> tuple[Any, Stubber]:
    client = boto3.client(
        "ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"
    )
    stub = Stubber(client)
    stub.add_response(
        "describe_instance_type_offerings",
        {
            "InstanceTypeOfferings": [
                {"InstanceType": "g6.8xlarge", "LocationType": "availability-zone", "Location": a}
                for a in azs
            ]
        },
        {
            "LocationType": "availability-zone",
            "Filters": [{"Name": "instance-type", "Values": ["g6.8xlarge"]}],
        },
    )
    stub.activate()
    return client, stub


def _event(request: str, requested: str = "", physical: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "RequestType": request,
        "ResourceProperties": {"InstanceType": "g6.8xlarge", "RequestedAz": requested},
    }
    if physical:
        event["PhysicalResourceId"] = physical
    return event


def test_create_picks_the_first_offering_az_by_name() -> None:
    ec2, stub = _ec2(["us-west-2c", "us-west-2a"])
    out = handler.on_event(_event("Create"), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2a"
    assert out["Data"] == {"AvailabilityZone": "us-west-2a", "OfferedAzs": "us-west-2a,us-west-2c"}
    stub.assert_no_pending_responses()


def test_requested_az_that_offers_the_type_is_used() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2c"])
    out = handler.on_event(_event("Create", "us-west-2c"), None, ec2=ec2)
    assert out["Data"]["AvailabilityZone"] == "us-west-2c"


def test_requested_az_without_the_type_fails_with_the_alternatives() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2c"])
    with pytest.raises(
        RuntimeError,
        match=r"gpuAz=us-west-2b does not offer g6\.8xlarge; use one of us-west-2a, us-west-2c",
    ):
        handler.on_event(_event("Create", "us-west-2b"), None, ec2=ec2)


def test_region_without_the_type_fails() -> None:
    ec2, _ = _ec2([])
    with pytest.raises(
        RuntimeError, match=r"no Availability Zone of this region offers g6\.8xlarge"
    ):
        handler.on_event(_event("Create"), None, ec2=ec2)


def test_update_keeps_the_previous_az_so_nodes_are_not_replaced() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2d"])
    out = handler.on_event(_event("Update", physical="us-west-2d"), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2d"


def test_delete_makes_no_call() -> None:
    out = handler.on_event(_event("Delete", physical="us-west-2a"), None, ec2=object())
    assert out == {"PhysicalResourceId": "us-west-2a"}
