"""Chooses the one Availability Zone for the EFA GPU node group, at deploy time.

EFA traffic cannot cross AZs, so both GPU nodes share one subnet in one AZ. Which AZs offer an
instance type differs per account and region, and synthesis runs offline, so the choice is made
here: the configured AZ is checked, or the first AZ (by name) that offers the type is picked.
The choice is sticky: on Update the previous AZ is kept while it still offers the type, so a
redeploy never moves (and so replaces) the GPU subnet and node group by accident.

With an On-Demand Capacity Reservation (``CapacityReservationId``) the AZ is the reservation's,
and the reservation is checked first (state, instance type, platform, tenancy, AZ, free
capacity, placement group), so a reservation the nodes could never use fails the deploy in
seconds with the setting to change, instead of a node group that waits for capacity.

It also gives the GPU subnet its CIDR, one of two blocks (``SubnetCidrs``): a new AZ always
gets the block the current subnet does not use, because CloudFormation creates the replacement
subnet before it deletes the old one, and two subnets of a VPC cannot share a CIDR. The
physical id ``<az>/<cidr>`` remembers both across updates.

On an Update sent while the stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (one ``DescribeStacks`` on
the event's stack tells), it answers at once with the current physical id and the AZ and block
it encodes, without calling EC2.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3.
Resource properties (all strings): ``InstanceType``, ``RequestedAz`` ("" = choose),
``CapacityReservationId`` ("" = none), ``PlacementGroupName`` ("" = the stack creates its own
cluster placement group), ``InstanceCount`` (the node count, e.g. "2"), ``SubnetCidrs`` (two
comma-separated CIDR blocks), ``RouteTableId`` (optional: the GPU route table; on Create
the subnet already associated with it, if any, counts as the previous choice, so a resource
that replaces one of another logical id keeps its AZ and block).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pd_lambda import props as props_helpers
from pd_lambda import rollback
from pd_lambda.rollback import ROLLBACK_STATUS
from pd_lambda.settings_hint import set_hint

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

# The AL2023 EKS AMIs are Linux; a reservation for another platform never matches the nodes.
NODE_PLATFORM = "Linux/UNIX"
NOT_FOUND_CODES = (
    "InvalidCapacityReservationId.NotFound",
    "InvalidCapacityReservationId.Malformed",
)


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
                f"use one of {', '.join(offered)} ({set_hint('gpuAz')}) or leave gpuAz empty"
            )
        return requested
    if previous in offered:
        return previous
    return offered[0]


def describe_reservation(ec2: Any, reservation_id: str) -> dict[str, Any]:
    """The reservation, or raise naming ``gpuCapacityReservationId`` when it does not exist."""
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code not in NOT_FOUND_CODES:
            raise
        found = {"CapacityReservations": []}
        LOG.info("describe_capacity_reservations %s: %s", reservation_id, code)
    reservations = found.get("CapacityReservations") or []
    if not reservations:
        raise RuntimeError(
            f"gpuCapacityReservationId={reservation_id} was not found in this account and region; "
            "check the id (cr-...) and the deploy region, or leave gpuCapacityReservationId empty"
        )
    return dict(reservations[0])


def placement_group_of(reservation: dict[str, Any]) -> str:
    """The name of the cluster placement group the reservation was created in, or ""."""
    arn = reservation.get("PlacementGroupArn") or ""
    return arn.rsplit("placement-group/", 1)[-1] if "placement-group/" in arn else ""


def reservation_problems(
    reservation: dict[str, Any],
    *,
    instance_type: str,
    requested_az: str,
    placement_group: str,
    instance_count: int,
    creating: bool,
) -> list[str]:
    """Every reason the GPU nodes could not use the reservation, each naming the setting to
    fix; empty when they can. Pure, so ``preflight`` runs the same checks before a deploy."""
    rid = reservation.get("CapacityReservationId", "")
    setting = f"gpuCapacityReservationId={rid}"
    out: list[str] = []
    state = reservation.get("State", "")
    if state != "active":
        out.append(
            f"{setting} is in state '{state}', not 'active'; nodes can only launch into an "
            "active reservation: use an active one "
            f"({set_hint('gpuCapacityReservationId', 'cr-...')}) or leave "
            "gpuCapacityReservationId empty"
        )
    reserved_type = reservation.get("InstanceType", "")
    if reserved_type != instance_type:
        out.append(
            f"{setting} reserves {reserved_type}, but gpuNodeType={instance_type}; set "
            f"{set_hint('gpuNodeType', reserved_type)} or use a reservation for {instance_type}"
        )
    platform = reservation.get("InstancePlatform", "")
    if platform != NODE_PLATFORM:
        out.append(
            f"{setting} is for platform '{platform}', but the EKS AL2023 GPU nodes are "
            f"'{NODE_PLATFORM}'; use a {NODE_PLATFORM} reservation"
        )
    tenancy = reservation.get("Tenancy", "default")
    if tenancy != "default":
        out.append(
            f"{setting} has tenancy '{tenancy}', but the GPU nodes launch with 'default' "
            "tenancy and would never use it; use a reservation with default tenancy"
        )
    az = reservation.get("AvailabilityZone", "")
    if requested_az and requested_az != az:
        out.append(
            f"gpuAz={requested_az} but {setting} is in {az}; set {set_hint('gpuAz', az)} or "
            "leave gpuAz empty (the reservation's AZ is then used)"
        )
    available = int(reservation.get("AvailableInstanceCount", 0))
    total = int(reservation.get("TotalInstanceCount", 0))
    # On Update the running GPU nodes are the ones using it, so only a create can tell.
    # gpuNodeCount, not gpuNodeMaxCount: the group starts at gpuNodeCount and that is all the
    # deploy launches. Fewer free than gpuNodeMaxCount only stops later scale-ups (the launch
    # template targets this reservation, and EC2 fails such a launch rather than fall back to
    # On-Demand); `preflight` warns about that, since it is no reason to fail a deploy.
    if available < instance_count and creating:
        out.append(
            f"{setting} has {available} of {total} instances free, but gpuNodeCount="
            f"{instance_count} nodes need {instance_count}; stop the instances that use it "
            f"or enlarge the reservation, or lower gpuNodeCount ({set_hint('gpuNodeCount')})"
        )
    reserved_group = placement_group_of(reservation)
    if reserved_group and reserved_group != placement_group:
        configured = (
            f"gpuPlacementGroupName={placement_group}"
            if placement_group
            else "gpuPlacementGroupName is empty (the stack creates its own placement group)"
        )
        out.append(
            f"{setting} was created in cluster placement group {reserved_group}, but "
            f"{configured}; only instances launched into that group can use it: set "
            f"{set_hint('gpuPlacementGroupName', reserved_group)}"
        )
    if placement_group and not reserved_group:
        out.append(
            f"gpuPlacementGroupName={placement_group} but {setting} is not in a placement group; "
            "instances launched into a cluster placement group can only use a reservation "
            f"created in that group: use a reservation created in {placement_group}, or leave "
            "gpuPlacementGroupName empty"
        )
    return out


def check_reservation(reservation: dict[str, Any], **needs: Any) -> str:
    """The reservation's AZ once every check passes; otherwise raise with the settings to fix.
    ``needs`` are :func:`reservation_problems`' keywords."""
    problems = reservation_problems(reservation, **needs)
    if problems:
        raise RuntimeError("; ".join(problems))
    rid = reservation.get("CapacityReservationId", "")
    if reservation.get("InstanceMatchCriteria") == "targeted":
        LOG.info("%s is targeted: only launches that name it use it", rid)
    return str(reservation.get("AvailabilityZone", ""))


# Data keys a rollback answer reproduces, from the physical id ``<az>/<cidr>`` alone. The
# network resources read AvailabilityZone and SubnetCidr; OfferedAzs (informational, read by
# nothing) cannot be reproduced without EC2 and is left out of a rollback answer.
ROLLBACK_DATA_KEYS = ("AvailabilityZone", "SubnetCidr")


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: boto3.client("cloudformation")
)


def rollback_response(event: dict[str, Any]) -> dict[str, Any]:
    """The current physical id and the Data it encodes: the AZ and GPU subnet block that the
    stack is rolling back to keep. No EC2 call: an expired reservation or an EC2 error is
    often why the stack rolls back."""
    current = str(event.get("PhysicalResourceId") or "")
    az, _, cidr = current.partition("/")
    data = {"AvailabilityZone": az}
    if cidr:
        data["SubnetCidr"] = cidr
    return {"PhysicalResourceId": current, "Data": data}


def on_event(
    event: dict[str, Any], context: Any, ec2: Any = None, cloudformation: Any = None
) -> dict[str, Any]:
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if event["RequestType"] == "Update" and stack_rolling_back(event, cloudformation):
        response = rollback_response(event)
        LOG.info("Update during %s: answering at once with %s", ROLLBACK_STATUS, response)
        return response
    instance_type = props["InstanceType"]
    requested = props.get("RequestedAz", "")
    reservation_id = props.get("CapacityReservationId", "")
    ec2 = ec2 or boto3.client("ec2")
    offered = offering_azs(ec2, instance_type)
    previous_id = event.get("PhysicalResourceId", "") if event["RequestType"] == "Update" else ""
    previous, _, previous_cidr = previous_id.partition("/")
    if event["RequestType"] == "Create" and props.get("RouteTableId"):
        # A new resource may replace an earlier one of another logical id (an upgrade that
        # moved its Provider): the GPU subnet that one chose is still associated with the
        # GPU route table, and keeping its AZ and block keeps the subnet and node group.
        previous, previous_cidr = current_gpu_subnet(ec2, props["RouteTableId"])
    if reservation_id:
        reserved_az = check_reservation(
            describe_reservation(ec2, reservation_id),
            instance_type=instance_type,
            requested_az=requested,
            placement_group=props.get("PlacementGroupName", ""),
            instance_count=props_helpers.positive_int(props, "InstanceCount", error=RuntimeError),
            # Nodes of an existing GPU subnet (found on Create) hold the reservation already.
            creating=event["RequestType"] == "Create" and not previous,
        )
        if reserved_az not in offered:
            raise RuntimeError(
                f"gpuCapacityReservationId={reservation_id} is in {reserved_az}, which does not "
                f"offer {instance_type} (offered: {', '.join(offered) or 'none'}); use a "
                "reservation in one of those AZs or leave gpuCapacityReservationId empty"
            )
        az = reserved_az
        if previous and previous != az:
            LOG.warning("the reservation moves the GPU AZ from %s to %s", previous, az)
    else:
        az = choose_az(offered, instance_type, requested, previous)
    candidates = [c.strip() for c in props.get("SubnetCidrs", "").split(",") if c.strip()]
    cidr = choose_cidr(candidates, az, previous, previous_cidr)
    LOG.info(
        "instance type %s offered in %s; using %s, GPU subnet %s", instance_type, offered, az, cidr
    )
    data = {"AvailabilityZone": az, "OfferedAzs": ",".join(offered)}
    if cidr:
        data["SubnetCidr"] = cidr
    return {"PhysicalResourceId": f"{az}/{cidr}" if cidr else az, "Data": data}


def current_gpu_subnet(ec2: Any, route_table_id: str) -> tuple[str, str]:
    """(AZ, CIDR) of the subnet associated with the GPU route table, or ("", "") for none (a
    first deploy). With several (an AZ move under way), the first by subnet id."""
    tables = ec2.describe_route_tables(RouteTableIds=[route_table_id]).get("RouteTables") or []
    subnet_ids = sorted(
        str(a["SubnetId"])
        for table in tables
        for a in table.get("Associations") or []
        if a.get("SubnetId")
    )
    if not subnet_ids:
        return "", ""
    subnets = ec2.describe_subnets(SubnetIds=subnet_ids[:1]).get("Subnets") or []
    if not subnets:
        return "", ""
    subnet = subnets[0]
    LOG.info(
        "GPU route table %s already serves %s (%s, %s): keeping them",
        route_table_id,
        subnet.get("SubnetId"),
        subnet.get("AvailabilityZone"),
        subnet.get("CidrBlock"),
    )
    return str(subnet.get("AvailabilityZone") or ""), str(subnet.get("CidrBlock") or "")


def choose_cidr(candidates: list[str], az: str, previous_az: str, previous_cidr: str) -> str:
    """The GPU subnet's block: unchanged while the AZ is, the other block when it moves."""
    if not candidates:
        return ""
    current = previous_cidr if previous_cidr in candidates else candidates[0]
    if not previous_az or az == previous_az:
        return current
    return next((c for c in candidates if c != current), current)
