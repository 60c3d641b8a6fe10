"""The GPU AZ chooser's handler, with botocore's Stubber (no AWS)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.lambda_handlers import (
    RESERVATION_ID,
    capacity_reservation,
    load,
    stubbed_client,
    stubbed_stack,
)

handler = load("gpu_az", "gpu_az_handler")


def _ec2(azs: list[str]) -> tuple[Any, Stubber]:
    client, stub = stubbed_client("ec2")
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


# --- On-Demand Capacity Reservation ---------------------------------------------------------


def _ec2_reserved(
    azs: list[str],
    reservation: dict[str, Any] | None = None,
    error: str = "",
) -> tuple[Any, Stubber]:
    client, stub = _ec2(azs)
    expected = {"CapacityReservationIds": [RESERVATION_ID]}
    if error:
        stub.add_client_error(
            "describe_capacity_reservations",
            service_error_code=error,
            service_message=f"The capacity reservation ID '{RESERVATION_ID}' does not exist",
            expected_params=expected,
        )
    else:
        found = [reservation] if reservation is not None else []
        stub.add_response(
            "describe_capacity_reservations", {"CapacityReservations": found}, expected
        )
    return client, stub


def _reserved_event(
    request: str = "Create",
    *,
    requested: str = "",
    placement_group: str = "",
    count: str = "2",
    physical: str | None = None,
) -> dict[str, Any]:
    event = _event(request, requested, physical)
    event["ResourceProperties"].update(
        {
            "CapacityReservationId": RESERVATION_ID,
            "PlacementGroupName": placement_group,
            "InstanceCount": count,
        }
    )
    return event


PG_ARN = "arn:aws:ec2:us-west-2:123456789012:placement-group/gpu-pg"


def test_reservation_decides_the_az_over_the_first_offering_one() -> None:
    ec2, stub = _ec2_reserved(["us-west-2a", "us-west-2c"], capacity_reservation())
    out = handler.on_event(_reserved_event(), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2c"
    assert out["Data"] == {"AvailabilityZone": "us-west-2c", "OfferedAzs": "us-west-2a,us-west-2c"}
    stub.assert_no_pending_responses()


def test_reservation_moves_a_previous_az_on_update() -> None:
    ec2, _ = _ec2_reserved(["us-west-2a", "us-west-2c"], capacity_reservation())
    out = handler.on_event(_reserved_event("Update", physical="us-west-2a"), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2c"


def test_reservation_in_the_configured_placement_group_is_accepted() -> None:
    ec2, _ = _ec2_reserved(["us-west-2c"], capacity_reservation(PlacementGroupArn=PG_ARN))
    out = handler.on_event(_reserved_event(placement_group="gpu-pg"), None, ec2=ec2)
    assert out["Data"]["AvailabilityZone"] == "us-west-2c"


@pytest.mark.parametrize(
    "code", ["InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"]
)
def test_unknown_reservation_fails_naming_the_setting(code: str) -> None:
    ec2, _ = _ec2_reserved(["us-west-2c"], error=code)
    with pytest.raises(
        RuntimeError,
        match=rf"gpuCapacityReservationId={RESERVATION_ID} was not found in this account and "
        "region; check the id",
    ):
        handler.on_event(_reserved_event(), None, ec2=ec2)


def test_empty_reservation_answer_counts_as_not_found() -> None:
    ec2, _ = _ec2_reserved(["us-west-2c"], None)
    with pytest.raises(RuntimeError, match="was not found"):
        handler.on_event(_reserved_event(), None, ec2=ec2)


def test_other_api_errors_are_not_reported_as_not_found() -> None:
    ec2, _ = _ec2_reserved(["us-west-2c"], error="UnauthorizedOperation")
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        handler.on_event(_reserved_event(), None, ec2=ec2)


# Each reservation that the GPU nodes could not use: (the AZs offering the type, the
# reservation's changed fields, the event's settings, what the failure says).
RESERVATION_FAILURES = {
    "not-active-quotes-its-state": (
        ["us-west-2c"],
        {"State": "expired"},
        {},
        rf"gpuCapacityReservationId={RESERVATION_ID} is in state 'expired'",
    ),
    "another-instance-type-names-both-types": (
        ["us-west-2c"],
        {"InstanceType": "p5.48xlarge"},
        {},
        r"reserves p5\.48xlarge, but gpuNodeType=g6\.8xlarge; set "
        r"`ray-pd-eks settings --set gpuNodeType=p5\.48xlarge`",
    ),
    "another-platform": (
        ["us-west-2c"],
        {"InstancePlatform": "Windows"},
        {},
        r"platform 'Windows'.*'Linux/UNIX'",
    ),
    "dedicated-tenancy": (["us-west-2c"], {"Tenancy": "dedicated"}, {}, "tenancy 'dedicated'"),
    "another-az-than-gpu-az": (
        ["us-west-2a", "us-west-2c"],
        {},
        {"requested": "us-west-2a"},
        rf"gpuAz=us-west-2a but gpuCapacityReservationId={RESERVATION_ID} is in "
        "us-west-2c; set `ray-pd-eks settings --set gpuAz=us-west-2c`",
    ),
    "an-az-without-the-type": (
        ["us-west-2a"],
        {},
        {},
        r"is in us-west-2c, which does not offer g6\.8xlarge",
    ),
    "not-enough-free-instances-on-create": (
        ["us-west-2c"],
        {"AvailableInstanceCount": 1},
        {},
        r"has 1 of 2 instances free, but gpuNodeCount=2",
    ),
    "a-placement-group-needs-its-name": (
        ["us-west-2c"],
        {"PlacementGroupArn": PG_ARN},
        {},
        r"created in cluster placement group gpu-pg, but gpuPlacementGroupName is empty.*"
        "set `ray-pd-eks settings --set gpuPlacementGroupName=gpu-pg`",
    ),
    "another-placement-group": (
        ["us-west-2c"],
        {"PlacementGroupArn": PG_ARN},
        {"placement_group": "other-pg"},
        r"but gpuPlacementGroupName=other-pg;.*set `ray-pd-eks settings --set "
        r"gpuPlacementGroupName=gpu-pg`",
    ),
    "a-placement-group-with-a-reservation-outside-any-group": (
        ["us-west-2c"],
        {},
        {"placement_group": "my-pg"},
        rf"gpuPlacementGroupName=my-pg but gpuCapacityReservationId={RESERVATION_ID} is "
        "not in a placement group",
    ),
    "invalid-instance-count": (
        ["us-west-2c"],
        {},
        {"count": "0"},
        "InstanceCount must be a positive whole number",
    ),
}


@pytest.mark.parametrize(
    ("azs", "changes", "settings", "match"),
    RESERVATION_FAILURES.values(),
    ids=RESERVATION_FAILURES.keys(),
)
def test_a_reservation_the_nodes_cannot_use_fails(
    azs: list[str], changes: dict[str, Any], settings: dict[str, str], match: str
) -> None:
    ec2, _ = _ec2_reserved(azs, capacity_reservation(**changes))
    with pytest.raises(RuntimeError, match=match):
        handler.on_event(_reserved_event(**settings), None, ec2=ec2)


def test_full_reservation_on_update_is_our_own_nodes_and_passes() -> None:
    ec2, _ = _ec2_reserved(["us-west-2c"], capacity_reservation(AvailableInstanceCount=0))
    out = handler.on_event(_reserved_event("Update", physical="us-west-2c"), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2c"


def test_without_a_reservation_no_reservation_is_described() -> None:
    ec2, stub = _ec2(["us-west-2a"])
    event = _event("Create")
    event["ResourceProperties"].update(
        {"CapacityReservationId": "", "PlacementGroupName": "", "InstanceCount": "2"}
    )
    out = handler.on_event(event, None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2a"
    stub.assert_no_pending_responses()  # and an unexpected call would have raised


CIDRS = "10.0.192.0/19,10.0.224.0/19"


def _cidr_event(request: str, physical: str | None = None, requested: str = "") -> dict[str, Any]:
    event = _event(request, requested=requested, physical=physical)
    event["ResourceProperties"]["SubnetCidrs"] = CIDRS
    return event


def test_create_takes_the_first_block_and_remembers_it_in_the_physical_id() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2b"])
    out = handler.on_event(_cidr_event("Create"), None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2a/10.0.192.0/19"
    assert out["Data"]["SubnetCidr"] == "10.0.192.0/19"


def test_update_in_the_same_az_keeps_the_block() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2b"])
    event = _cidr_event("Update", physical="us-west-2b/10.0.224.0/19")
    out = handler.on_event(event, None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2b/10.0.224.0/19"


def test_moving_to_another_az_takes_the_other_block() -> None:
    """CloudFormation creates the new subnet before deleting the old: the blocks must differ."""
    for old, new in (("10.0.192.0/19", "10.0.224.0/19"), ("10.0.224.0/19", "10.0.192.0/19")):
        ec2, _ = _ec2(["us-west-2a", "us-west-2b"])
        event = _cidr_event("Update", physical=f"us-west-2a/{old}", requested="us-west-2b")
        out = handler.on_event(event, None, ec2=ec2)
        assert out["Data"] == {
            "AvailabilityZone": "us-west-2b",
            "OfferedAzs": "us-west-2a,us-west-2b",
            "SubnetCidr": new,
        }


def test_an_az_only_physical_id_counts_as_the_first_block() -> None:
    ec2, _ = _ec2(["us-west-2a", "us-west-2b"])
    event = _cidr_event("Update", physical="us-west-2a", requested="us-west-2b")
    assert handler.on_event(event, None, ec2=ec2)["Data"]["SubnetCidr"] == "10.0.224.0/19"


def test_every_reservation_problem_is_reported_at_once() -> None:
    """``preflight`` shows them one per line; the deploy joins them into one failure."""
    bad = {
        "CapacityReservationId": "cr-0123456789abcdef0",
        "State": "expired",
        "InstanceType": "g6.12xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2c",
        "AvailableInstanceCount": 0,
        "TotalInstanceCount": 2,
    }
    kwargs: dict[str, Any] = dict(
        instance_type="g6.8xlarge", requested_az="", placement_group="", instance_count=2
    )
    problems = handler.reservation_problems(bad, creating=True, **kwargs)
    assert [p.split(" ", 2)[1] for p in problems] == ["is", "reserves", "has"]
    assert len(handler.reservation_problems(bad, creating=False, **kwargs)) == 2
    with pytest.raises(RuntimeError, match=r"state 'expired'.*; .*reserves g6\.12xlarge"):
        handler.check_reservation(bad, creating=True, **kwargs)


# --- rollbacks -------------------------------------------------------------------------------

STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-Network/0a1b2c3d"


def _cloudformation(status: str) -> tuple[Any, Stubber]:
    return stubbed_stack(STACK_ID, status, created="2026-11-30T10:00:00Z")


def _rollback_event(physical: str) -> dict[str, Any]:
    """CloudFormation rolling back an update that moved to a reservation which then expired:
    ResourceProperties are the ones being restored, OldResourceProperties the failed ones."""
    event = _event("Update", physical=physical)
    event["StackId"] = STACK_ID
    event["ResourceProperties"]["SubnetCidrs"] = "10.0.192.0/19,10.0.224.0/19"
    event["OldResourceProperties"] = {
        **event["ResourceProperties"],
        "CapacityReservationId": "cr-0123456789abcdef0",
    }
    return event


def test_rollback_update_answers_at_once_with_the_physical_ids_az_and_block() -> None:
    cfn, cfn_stub = _cloudformation("UPDATE_ROLLBACK_IN_PROGRESS")
    ec2, ec2_stub = stubbed_client("ec2")  # no response queued: any EC2 call would raise
    out = handler.on_event(
        _rollback_event("us-west-2c/10.0.224.0/19"), None, ec2=ec2, cloudformation=cfn
    )
    assert out == {
        "PhysicalResourceId": "us-west-2c/10.0.224.0/19",
        "Data": {"AvailabilityZone": "us-west-2c", "SubnetCidr": "10.0.224.0/19"},
    }
    assert set(out["Data"]) == set(handler.ROLLBACK_DATA_KEYS)
    cfn_stub.assert_no_pending_responses()
    ec2_stub.assert_no_pending_responses()


def test_rollback_of_an_id_without_a_block_answers_the_az_only() -> None:
    cfn, _ = _cloudformation("UPDATE_ROLLBACK_IN_PROGRESS")
    out = handler.on_event(_rollback_event("us-west-2a"), None, cloudformation=cfn)
    assert out == {"PhysicalResourceId": "us-west-2a", "Data": {"AvailabilityZone": "us-west-2a"}}


def test_a_normal_update_still_asks_ec2() -> None:
    cfn, cfn_stub = _cloudformation("UPDATE_IN_PROGRESS")
    ec2, ec2_stub = _ec2(["us-west-2a", "us-west-2c"])
    out = handler.on_event(
        _rollback_event("us-west-2c/10.0.224.0/19"), None, ec2=ec2, cloudformation=cfn
    )
    assert out["Data"]["OfferedAzs"] == "us-west-2a,us-west-2c"
    assert out["PhysicalResourceId"] == "us-west-2c/10.0.224.0/19"
    ec2_stub.assert_no_pending_responses()
    cfn_stub.assert_no_pending_responses()


def _route_table(stub: Stubber, subnets: dict[str, tuple[str, str]]) -> None:
    """The GPU route table's associations and the subnets they name: id -> (AZ, CIDR)."""
    stub.add_response(
        "describe_route_tables",
        {
            "RouteTables": [
                {
                    "RouteTableId": "rtb-gpu",
                    "Associations": [{"SubnetId": s, "RouteTableId": "rtb-gpu"} for s in subnets]
                    + [{"Main": False, "RouteTableId": "rtb-gpu"}],
                }
            ]
        },
        {"RouteTableIds": ["rtb-gpu"]},
    )
    if subnets:
        first = sorted(subnets)[0]
        az, cidr = subnets[first]
        stub.add_response(
            "describe_subnets",
            {"Subnets": [{"SubnetId": first, "AvailabilityZone": az, "CidrBlock": cidr}]},
            {"SubnetIds": [first]},
        )


def test_a_create_keeps_the_az_and_block_of_the_subnet_the_gpu_route_table_serves() -> None:
    """The upgrade that moved the chooser's Provider into the GPU stack gives its resource a
    new logical id, so CloudFormation sends a Create; the subnet of the earlier choice (the
    second block, in the second AZ, after an earlier move) must be kept, or the GPU subnet and
    node group would be replaced."""
    ec2, stub = _ec2(["us-west-2a", "us-west-2b"])
    _route_table(stub, {"subnet-0gpu": ("us-west-2b", "10.0.224.0/19")})
    event = _cidr_event("Create")
    event["ResourceProperties"]["RouteTableId"] = "rtb-gpu"
    out = handler.on_event(event, None, ec2=ec2)
    assert out["PhysicalResourceId"] == "us-west-2b/10.0.224.0/19"
    stub.assert_no_pending_responses()


def test_a_first_create_with_an_empty_gpu_route_table_chooses_afresh() -> None:
    ec2, stub = _ec2(["us-west-2a", "us-west-2b"])
    _route_table(stub, {})
    event = _cidr_event("Create")
    event["ResourceProperties"]["RouteTableId"] = "rtb-gpu"
    assert handler.on_event(event, None, ec2=ec2)["PhysicalResourceId"] == (
        "us-west-2a/10.0.192.0/19"
    )
    stub.assert_no_pending_responses()


def test_a_kept_subnet_whose_az_no_longer_fits_moves_to_the_other_block() -> None:
    """A requested AZ other than the existing subnet's: a move, as on an Update."""
    ec2, stub = _ec2(["us-west-2a", "us-west-2b"])
    _route_table(stub, {"subnet-0gpu": ("us-west-2a", "10.0.192.0/19")})
    event = _cidr_event("Create", requested="us-west-2b")
    event["ResourceProperties"]["RouteTableId"] = "rtb-gpu"
    assert handler.on_event(event, None, ec2=ec2)["Data"]["SubnetCidr"] == "10.0.224.0/19"


def test_a_full_reservation_on_a_create_that_keeps_a_subnet_is_our_own_nodes() -> None:
    """The kept subnet's nodes hold the reservation already: that Create is checked like an
    Update (a fresh Create needs the free instances: the test above)."""
    ec2, stub = _ec2(["us-west-2c"])
    _route_table(stub, {"subnet-0gpu": ("us-west-2c", "10.0.192.0/19")})
    stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [capacity_reservation(AvailableInstanceCount=0)]},
        {"CapacityReservationIds": [RESERVATION_ID]},
    )
    event = _reserved_event("Create")
    event["ResourceProperties"]["RouteTableId"] = "rtb-gpu"
    assert handler.on_event(event, None, ec2=ec2)["PhysicalResourceId"].startswith("us-west-2c")
    stub.assert_no_pending_responses()
