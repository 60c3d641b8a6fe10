"""Chooses the one Availability Zone for the EFA GPU node group, at deploy time.

EFA traffic cannot cross AZs, so both GPU nodes share one subnet in one AZ. Which AZs offer an
instance type differs per account and region, and synthesis runs offline, so the choice is made
here: the configured AZ is checked, or the first AZ (by name) that offers the type is picked.
The choice is sticky: on Update the previous AZ is kept while it still offers the type, so a
redeploy never moves (and so replaces) the GPU subnet and node group by accident.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3.
"""

from __future__ import annotations

import logging
from typing import Any

import boto3

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)


def offering_azs(ec2: Any, instance_type: str) -> list[str]:
    """Sorted names of the AZs of this region that offer ``instance_type``."""
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    pages = paginator.paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    return sorted({o["Location"] for page in pages for o in page["InstanceTypeOfferings"]})


def choose_az(offered: list[str], instance_type: str, requested: str, previous: str) -> str:
    """The AZ to use, or raise with the fix a person can apply."""
    if not offered:
        raise RuntimeError(
            f"no Availability Zone of this region offers {instance_type}; "
            "choose another region or gpuNodeType"
        )
    if requested:
        if requested not in offered:
            raise RuntimeError(
                f"gpuAz={requested} does not offer {instance_type}; "
                f"use one of {', '.join(offered)} (-c gpuAz=...) or leave gpuAz empty"
            )
        return requested
    if previous in offered:
        return previous
    return offered[0]


def on_event(event: dict[str, Any], context: Any, ec2: Any = None) -> dict[str, Any]:
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    instance_type = props["InstanceType"]
    ec2 = ec2 or boto3.client("ec2")
    offered = offering_azs(ec2, instance_type)
    previous = event.get("PhysicalResourceId", "") if event["RequestType"] == "Update" else ""
    az = choose_az(offered, instance_type, props.get("RequestedAz", ""), previous)
    LOG.info("instance type %s offered in %s; using %s", instance_type, offered, az)
    return {
        "PhysicalResourceId": az,
        "Data": {"AvailabilityZone": az, "OfferedAzs": ",".join(offered)},
    }
