"""The GPU capacity watch's handler, with botocore's Stubber (no AWS).

Each test drives ``on_event``/``is_complete`` as the CDK Provider calls them, with a fixed clock:
the watch started at ``STARTED`` and the poll runs at ``STARTED + elapsed``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from botocore.stub import Stubber

from tests.lambda_handlers import (
    LambdaContext,
    after,
    boto3_makes,
    clock_fixture,
    load,
    positive_whole_number_check,
    stack_status_client,
    stubbed_client,
    stubbed_stack,
)

handler = load("capacity", "capacity_handler")

STARTED = 1_760_000_000  # the watch's start (epoch seconds)
ASG = "eks-gpu-workers-1234-abcd"
CAPACITY_MESSAGE = (
    "We currently do not have sufficient g6.8xlarge capacity in the Availability Zone you "
    "requested (us-west-2a). Our system will be working on provisioning additional capacity. "
    "Launching EC2 instance failed."
)
QUOTA_MESSAGE = (
    "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the "
    "instance bucket that the specified instance type belongs to. Launching EC2 instance failed."
)
OTHER_MESSAGE = (
    "The specified launch template, with template ID lt-0abc, does not exist. "
    "Launching EC2 instance failed."
)


def _props(**overrides: str) -> dict[str, str]:
    props = {
        "ClusterName": "pd-cluster",
        "NodegroupName": "gpu-workers",
        "InstanceType": "g6.8xlarge",
        "AvailabilityZone": "us-west-2a",
        "DesiredSize": "2",
        "CapacityReservationId": "",
        "CapacityWaitSeconds": "600",
        "TimeoutSeconds": "2700",
        "Fingerprint": "lt-1",
        "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:framework",
    }
    props.update(overrides)
    return props


def _event(request: str = "Create", **overrides: str) -> dict[str, Any]:
    """The event ``is_complete`` receives: on_event's result merged in by the Provider."""
    return {
        "RequestType": request,
        "PhysicalResourceId": "pd-cluster/gpu-workers",
        handler.STARTED_AT_KEY: str(STARTED),
        "ResourceProperties": _props(**overrides),
    }


at = clock_fixture(handler, STARTED)  # at(seconds): the handler's clock, after the start


def _when(seconds_after_start: float) -> datetime:
    return after(STARTED, seconds_after_start)


NODEGROUP_PARAMS = {"clusterName": "pd-cluster", "nodegroupName": "gpu-workers"}


def _eks(status: str = "CREATING", *, asg: bool = True, **extra: Any) -> tuple[Any, Stubber]:
    client, stub = stubbed_client("eks")
    nodegroup: dict[str, Any] = {
        "nodegroupName": "gpu-workers",
        "clusterName": "pd-cluster",
        "status": status,
        **extra,
    }
    if asg:
        nodegroup["resources"] = {"autoScalingGroups": [{"name": ASG}]}
    stub.add_response("describe_nodegroup", {"nodegroup": nodegroup}, NODEGROUP_PARAMS)
    return client, stub


def _eks_error(code: str) -> tuple[Any, Stubber]:
    client, stub = stubbed_client("eks")
    stub.add_client_error(
        "describe_nodegroup", service_error_code=code, expected_params=NODEGROUP_PARAMS
    )
    return client, stub


def _activity(seconds_after_start: float, status: str, message: str = "") -> dict[str, Any]:
    activity = {
        "ActivityId": f"act-{seconds_after_start}",
        "AutoScalingGroupName": ASG,
        "Description": "Launching a new EC2 instance",
        "Cause": "an instance was started in response to a difference between desired and actual",
        "StartTime": _when(seconds_after_start),
        "StatusCode": status,
        "StatusMessage": message,
    }
    return {k: v for k, v in activity.items() if v != ""}  # the API omits an empty message


def _autoscaling(*pages: list[dict[str, Any]]) -> tuple[Any, Stubber]:
    """One stubbed page per argument (newest activity first), chained by NextToken."""
    client, stub = stubbed_client("autoscaling")
    for i, activities in enumerate(pages):
        params: dict[str, Any] = {"AutoScalingGroupName": ASG, "MaxRecords": 20}
        if i:
            params["NextToken"] = f"page-{i}"
        response: dict[str, Any] = {"Activities": activities}
        if i + 1 < len(pages):
            response["NextToken"] = f"page-{i + 1}"
        stub.add_response("describe_scaling_activities", response, params)
    return client, stub


def _poll(event: dict[str, Any], eks: Any, autoscaling: Any) -> dict[str, Any]:
    return handler.is_complete(event, None, eks=eks, autoscaling=autoscaling)


# --- on_event --------------------------------------------------------------------------------


def test_create_names_the_node_group_and_records_the_start(at: Any) -> None:
    at(0)
    out = handler.on_event({"RequestType": "Create", "ResourceProperties": _props()}, None)
    assert out == {
        "PhysicalResourceId": "pd-cluster/gpu-workers",
        "CapacityWatchStartedAt": str(STARTED),
    }


def test_delete_is_a_no_op_that_keeps_the_physical_id() -> None:
    event = {"RequestType": "Delete", "PhysicalResourceId": "pd-cluster/gpu-workers"}
    assert handler.on_event(event, None) == {"PhysicalResourceId": "pd-cluster/gpu-workers"}
    # No client is touched: object() has no AWS methods.
    assert handler.is_complete(event, None, eks=object(), autoscaling=object()) == {
        "IsComplete": True
    }


def test_missing_properties_fail_with_their_names() -> None:
    props = _props(NodegroupName="", DesiredSize="")
    with pytest.raises(RuntimeError, match="ResourceProperties missing NodegroupName, DesiredSize"):
        handler.on_event({"RequestType": "Create", "ResourceProperties": props}, None)


def test_non_numeric_wait_fails() -> None:
    props = _props(CapacityWaitSeconds="ten minutes")
    with pytest.raises(RuntimeError, match="CapacityWaitSeconds must be a positive whole number"):
        handler.on_event({"RequestType": "Create", "ResourceProperties": props}, None)


# --- is_complete: the node group's own status ------------------------------------------------


def test_node_group_not_created_yet_is_pending(at: Any) -> None:
    eks, stub = _eks_error("ResourceNotFoundException")
    assert _poll(_event(), eks, object()) == {"IsComplete": False}
    stub.assert_no_pending_responses()


def test_active_node_group_completes_with_the_node_count(at: Any) -> None:
    eks, stub = _eks("ACTIVE")
    out = _poll(_event(DesiredSize="3"), eks, object())
    assert out == {"IsComplete": True, "Data": {"Nodes": "3"}}
    stub.assert_no_pending_responses()


def test_create_failed_raises_quoting_the_health_issues(at: Any) -> None:
    eks, _ = _eks(
        "CREATE_FAILED",
        health={
            "issues": [
                {
                    "code": "AsgInstanceLaunchFailures",
                    "message": "Could not launch On-Demand Instances.",
                    "resourceIds": [ASG],
                }
            ]
        },
    )
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(), eks, object())
    assert str(raised.value) == (
        "GPU node group pd-cluster/gpu-workers: status CREATE_FAILED: "
        f"AsgInstanceLaunchFailures: Could not launch On-Demand Instances. (resources: {ASG})"
    )


@pytest.mark.parametrize("status", ["DEGRADED", "DELETING", "DELETE_FAILED"])
def test_other_terminal_states_raise(at: Any, status: str) -> None:
    eks, _ = _eks(status)
    with pytest.raises(RuntimeError, match=f"status {status}: EKS reports no health issue"):
        _poll(_event(), eks, object())


def test_throttled_describe_is_pending_not_a_failure(at: Any) -> None:
    eks, _ = _eks_error("ThrottlingException")
    assert _poll(_event(), eks, object()) == {"IsComplete": False}


def test_missing_permission_raises_at_once(at: Any) -> None:
    eks, _ = _eks_error("AccessDeniedException")
    with pytest.raises(RuntimeError, match="may not call eks:DescribeNodegroup"):
        _poll(_event(), eks, object())


def test_update_waits_for_the_update_to_start_before_trusting_active(at: Any) -> None:
    before = _when(-3600)
    at(30)
    eks, _ = _eks("ACTIVE", modifiedAt=before)
    assert _poll(_event("Update"), eks, object()) == {"IsComplete": False}
    at(handler.UPDATE_GRACE_SECONDS + 1)
    eks, _ = _eks("ACTIVE", modifiedAt=before)
    assert _poll(_event("Update"), eks, object())["IsComplete"] is True


def test_update_that_touched_the_node_group_completes_when_active(at: Any) -> None:
    at(30)
    eks, _ = _eks("ACTIVE", modifiedAt=_when(5))
    assert _poll(_event("Update"), eks, object())["IsComplete"] is True


# --- is_complete: the Auto Scaling group's launches -----------------------------------------


def test_creating_without_an_auto_scaling_group_is_pending(at: Any) -> None:
    eks, _ = _eks("CREATING", asg=False)
    assert _poll(_event(), eks, object()) == {"IsComplete": False}


def test_successful_launches_are_pending(at: Any) -> None:
    eks, _ = _eks()
    autoscaling, stub = _autoscaling([_activity(20, "Successful"), _activity(10, "InProgress")])
    assert _poll(_event(), eks, autoscaling) == {"IsComplete": False}
    stub.assert_no_pending_responses()


def test_capacity_failures_younger_than_the_wait_are_pending(at: Any) -> None:
    at(500)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling(
        [_activity(400, "Failed", CAPACITY_MESSAGE), _activity(100, "Failed", CAPACITY_MESSAGE)]
    )
    assert _poll(_event(), eks, autoscaling) == {"IsComplete": False}


def test_capacity_failures_older_than_the_wait_raise_with_the_fixes(at: Any) -> None:
    at(760)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling(
        [
            _activity(700, "Failed", CAPACITY_MESSAGE),
            _activity(400, "Failed", "Insufficient capacity."),
            _activity(100, "Failed", CAPACITY_MESSAGE),
        ]
    )
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(), eks, autoscaling)
    message = str(raised.value)
    assert message.startswith(
        "GPU node group pd-cluster/gpu-workers: No g6.8xlarge capacity in us-west-2a for 11 min "
        "(3 failed launches; last: We currently do not have sufficient g6.8xlarge capacity"
    )
    assert message.endswith(
        "Fixes: `ray-pd-eks settings --set gpuCapacityReservationId=cr-...` (an On-Demand "
        "Capacity Reservation in that AZ), another AZ (`ray-pd-eks settings --set gpuAz=...`) "
        "or another type (`ray-pd-eks settings --set gpuNodeType=...`); then redeploy."
    )
    assert "\n" not in message and len(message) <= 1000


def test_full_reservation_counts_as_lack_of_capacity(at: Any) -> None:
    at(700)
    eks, _ = _eks()
    full = "The requested reservation does not have sufficient compatible and available capacity."
    autoscaling, _ = _autoscaling([_activity(50, "Failed", full)])
    with pytest.raises(RuntimeError, match=r"No g6\.8xlarge capacity in us-west-2a \(reservation "):
        _poll(_event(CapacityReservationId="cr-0123456789abcdef0"), eks, autoscaling)


@pytest.mark.parametrize(("elapsed", "raises"), [(649, False), (650, True)])
def test_full_reservation_fails_after_the_wait_with_reservation_fixes(
    at: Any, elapsed: int, raises: bool
) -> None:
    """The launch template targets the reservation by id, so a launch past its free instances
    (an autoscaler scale-up, another instance holding it) fails: the fix is the reservation's
    size, never another AZ or type. The first failure at 50 s, the wait 600 s: pending at 649 s."""
    at(elapsed)
    eks, _ = _eks("UPDATING")
    # EC2's own words, padded long: the fix after them must survive the cut to 1000 characters.
    full = "The requested reservation does not have sufficient compatible and available capacity."
    autoscaling, _ = _autoscaling([_activity(50, "Failed", full + " " + "x" * 400)])
    event = _event("Update", CapacityReservationId="cr-0123456789abcdef0")
    if not raises:
        assert _poll(event, eks, autoscaling) == {"IsComplete": False}
        return
    with pytest.raises(RuntimeError) as raised:
        _poll(event, eks, autoscaling)
    message = str(raised.value)
    assert message.startswith(
        "GPU node group pd-cluster/gpu-workers: No g6.8xlarge capacity in us-west-2a "
        "(reservation cr-0123456789abcdef0 has no free instance) for 10 min (1 failed launches; "
        "last: The requested reservation does not have sufficient compatible and available "
        "capacity. xxx"
    )
    assert message.endswith(
        "so every launch needs a free instance in it: the 2 nodes and each node the Cluster "
        "Autoscaler adds (up to gpuNodeMaxCount). Fixes: enlarge it (aws ec2 "
        "modify-capacity-reservation --capacity-reservation-id cr-0123456789abcdef0 "
        "--instance-count N) or stop other instances that use it; then redeploy."
    )
    assert "gpuAz" not in message and "\n" not in message and len(message) <= 1000


def test_first_capacity_failure_is_found_on_a_later_page(at: Any) -> None:
    at(700)
    eks, _ = _eks()
    autoscaling, stub = _autoscaling(
        [_activity(650, "Failed", CAPACITY_MESSAGE), _activity(600, "Failed", CAPACITY_MESSAGE)],
        [_activity(50, "Failed", CAPACITY_MESSAGE)],
    )
    with pytest.raises(RuntimeError, match=r"for 11 min \(3 failed launches"):
        _poll(_event(), eks, autoscaling)
    stub.assert_no_pending_responses()


def test_quota_failure_raises_at_once_naming_the_g_quota(at: Any) -> None:
    at(90)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(60, "Failed", QUOTA_MESSAGE)])
    with pytest.raises(
        RuntimeError,
        match=r"failed on the vCPU quota: You have requested more vCPU capacity.*Fix: raise the "
        r"Service Quotas quota 'Running On-Demand G and VT instances' \(L-DB2E81BA\)",
    ):
        _poll(_event(), eks, autoscaling)


def test_quota_failure_names_the_p_quota_for_p_instances(at: Any) -> None:
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(30, "Failed", "VcpuLimitExceeded")])
    with pytest.raises(RuntimeError, match=r"'Running On-Demand P instances' \(L-417A185B\)"):
        _poll(_event(InstanceType="p5.48xlarge"), eks, autoscaling)


def test_quota_for_other_families_points_at_the_family() -> None:
    assert handler.quota_for("trn1.32xlarge") == (
        "'Running On-Demand ... instances' that covers the trn1 family"
    )


def test_other_launch_failure_raises_at_once_quoting_it(at: Any) -> None:
    eks, _ = _eks()
    autoscaling, _ = _autoscaling(
        [_activity(40, "Failed", OTHER_MESSAGE), _activity(30, "Failed", CAPACITY_MESSAGE)]
    )
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(), eks, autoscaling)
    assert str(raised.value) == (
        "GPU node group pd-cluster/gpu-workers: launching g6.8xlarge in us-west-2a failed: "
        f"{OTHER_MESSAGE[:-1]}. Fix the cause, then redeploy."
    )


def test_activities_from_before_the_watch_are_ignored(at: Any) -> None:
    at(700)
    eks, _ = _eks()
    # Only the first page is read: the older activity on it ends the search.
    autoscaling, _ = _autoscaling(
        [_activity(30, "Successful"), _activity(-60, "Failed", OTHER_MESSAGE)],
    )
    assert _poll(_event(), eks, autoscaling) == {"IsComplete": False}
    autoscaling, stub = _autoscaling(
        [_activity(-30, "Failed", CAPACITY_MESSAGE), _activity(-900, "Failed", QUOTA_MESSAGE)],
        [_activity(-1000, "Failed", OTHER_MESSAGE)],
    )
    eks, _ = _eks()
    assert _poll(_event(), eks, autoscaling) == {"IsComplete": False}
    with pytest.raises(AssertionError):  # the page of older activities was never requested
        stub.assert_no_pending_responses()


def test_unexplained_cancellation_is_not_a_failure(at: Any) -> None:
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(30, "Cancelled", "")])
    assert _poll(_event(), eks, autoscaling) == {"IsComplete": False}


def test_failure_messages_stay_one_line_and_bounded(at: Any) -> None:
    eks, _ = _eks()
    long_message = "Invalid parameter:\n" + "x" * 5000
    autoscaling, _ = _autoscaling([_activity(30, "Failed", long_message)])
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(), eks, autoscaling)
    message = str(raised.value)
    assert "\n" not in message and len(message) <= 1000
    assert message.endswith("... Fix the cause, then redeploy.")


# --- is_complete: the overall timeout ----------------------------------------------------------


def test_still_pending_near_the_timeout_raises_its_own_message(at: Any) -> None:
    give_up = 2700 - handler.QUERY_INTERVAL_SECONDS - handler.LAMBDA_TIMEOUT_SECONDS
    at(give_up - 1)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(give_up - 100, "Failed", CAPACITY_MESSAGE)])
    assert _poll(_event(CapacityWaitSeconds="2700"), eks, autoscaling) == {"IsComplete": False}

    at(give_up)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(give_up - 100, "Failed", CAPACITY_MESSAGE)])
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(CapacityWaitSeconds="2700"), eks, autoscaling)
    message = str(raised.value)
    assert message.startswith(
        "GPU capacity watch gave up on node group pd-cluster/gpu-workers after 44 min: "
        "status CREATING; 1 launches failed for lack of capacity since"
    )
    assert "last: We currently do not have sufficient g6.8xlarge capacity" in message


def test_timeout_without_failed_launches_says_so(at: Any) -> None:
    at(2700)
    eks, _ = _eks_error("ResourceNotFoundException")
    with pytest.raises(RuntimeError) as raised:
        _poll(_event(), eks, object())
    # No Cluster stack watched (no ClusterStackName): nothing follows the poll's own note.
    assert str(raised.value) == (
        "GPU capacity watch gave up on node group pd-cluster/gpu-workers after 45 min: status "
        "NOT_FOUND; the node group does not exist yet. Check the node group's health and its "
        "Auto Scaling group's activity in the console, then redeploy."
    )


# --- edges: each decision at its limit and one step past it ---------------------------------

PENDING = {"IsComplete": False}


@pytest.mark.parametrize(
    ("elapsed", "first_failure", "raises"),
    [
        (700, 100, True),  # the first capacity failure is exactly CapacityWaitSeconds (600) old
        (699, 100, False),  # one second younger
    ],
    ids=["wait-reached", "one-second-short"],
)
def test_capacity_wait_edge(at: Any, elapsed: float, first_failure: float, raises: bool) -> None:
    at(elapsed)
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(first_failure, "Failed", CAPACITY_MESSAGE)])
    if raises:
        with pytest.raises(RuntimeError, match=r"No g6\.8xlarge capacity in us-west-2a for 10 min"):
            _poll(_event(), eks, autoscaling)
    else:
        assert _poll(_event(), eks, autoscaling) == PENDING


@pytest.mark.parametrize(
    ("when", "counted"),
    [(0, True), (-1, False)],
    ids=["at-the-start", "one-second-before"],
)
def test_a_failure_at_the_watchs_start_is_ours(at: Any, when: float, counted: bool) -> None:
    eks, _ = _eks()
    autoscaling, _ = _autoscaling([_activity(when, "Failed", QUOTA_MESSAGE)])
    if counted:
        with pytest.raises(RuntimeError, match="failed on the vCPU quota"):
            _poll(_event(), eks, autoscaling)
    else:
        assert _poll(_event(), eks, autoscaling) == PENDING


@pytest.mark.parametrize(
    ("elapsed", "complete"),
    [(90, True), (89, False)],
    ids=["grace-over", "one-second-short"],
)
def test_update_grace_edge(at: Any, elapsed: float, complete: bool) -> None:
    at(elapsed)
    eks, _ = _eks("ACTIVE", modifiedAt=_when(-3600))
    assert _poll(_event("Update"), eks, object())["IsComplete"] is complete


def test_active_modified_exactly_at_the_start_is_the_update(at: Any) -> None:
    at(30)
    eks, _ = _eks("ACTIVE", modifiedAt=_when(0))
    assert _poll(_event("Update"), eks, object())["IsComplete"] is True


@pytest.mark.parametrize(
    ("elapsed", "raises"),
    [(2610, True), (2609, False)],  # 2700 s timeout - (30 s interval + 60 s Lambda)
    ids=["give-up-reached", "one-second-short"],
)
def test_give_up_edge(at: Any, elapsed: float, raises: bool) -> None:
    at(elapsed)
    eks, _ = _eks("CREATING", asg=False)
    if raises:
        with pytest.raises(RuntimeError, match="GPU capacity watch gave up"):
            _poll(_event(), eks, object())
    else:
        assert _poll(_event(), eks, object()) == PENDING


def test_short_timeouts_give_up_at_half_the_timeout(at: Any) -> None:
    # 100 s - 90 s margin would leave 10 s: half the timeout (50 s) is the floor.
    at(50)
    eks, _ = _eks("CREATING", asg=False)
    with pytest.raises(RuntimeError, match="gave up"):
        _poll(_event(TimeoutSeconds="100"), eks, object())
    at(49)
    eks, _ = _eks("CREATING", asg=False)
    assert _poll(_event(TimeoutSeconds="100"), eks, object()) == PENDING


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        ("Failed", CAPACITY_MESSAGE, "capacity"),
        ("Failed", QUOTA_MESSAGE, "quota"),
        ("Failed", OTHER_MESSAGE, "other"),
        ("Failed", "", "other"),
        ("Cancelled", CAPACITY_MESSAGE, "capacity"),
        ("Cancelled", QUOTA_MESSAGE, "quota"),
        ("Cancelled", OTHER_MESSAGE, None),  # the group changed its mind: not a failure
        ("Successful", CAPACITY_MESSAGE, None),
        ("InProgress", "", None),
    ],
)
def test_classify(status: str, message: str, kind: str | None) -> None:
    found = handler.classify(_activity(1, status, message), STARTED + 1.0)
    assert (found.kind if found else None) == kind
    if found:
        assert found.started == STARTED + 1.0
        assert found.message == (message or "Launching a new EC2 instance")  # the Description


@pytest.mark.parametrize(
    ("kinds", "verdict"),
    [
        (("capacity",), None),  # young capacity failures wait
        (("capacity", "quota"), "vCPU quota"),  # quota wins over capacity
        (("capacity", "other"), "us-west-2a failed: other: lt"),  # so does any other launch failure
        (("quota", "other"), "vCPU quota"),
        ((), None),
    ],
)
def test_judge_order(kinds: tuple[str, ...], verdict: str | None) -> None:
    props = handler.Props.from_properties(_props())
    failures = [handler.Failure(kind, STARTED + 10.0, f"{kind}: lt") for kind in kinds]
    if verdict is None:
        handler.judge(props, failures, STARTED + 20.0)
    else:
        with pytest.raises(RuntimeError, match=verdict):
            handler.judge(props, failures, STARTED + 20.0)


@pytest.mark.parametrize(("value", "ok"), [("1", True), ("0", False), ("-5", False)])
def test_positive_int_properties_edge(value: str, ok: bool) -> None:
    positive_whole_number_check(handler, _props(DesiredSize=value), "DesiredSize", ok)


# --- rollbacks -------------------------------------------------------------------------------

STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-Cluster/5b7d1a10"


def _cloudformation(status: str) -> tuple[Any, Stubber]:
    return stubbed_stack(STACK_ID, status, created=_when(-86400))


def _update(old_size: str, new_size: str) -> dict[str, Any]:
    """A rollback-shaped Update: ResourceProperties hold the properties being restored."""
    return {
        "RequestType": "Update",
        "StackId": STACK_ID,
        "PhysicalResourceId": "pd-cluster/gpu-workers",
        "ResourceProperties": _props(DesiredSize=old_size),
        "OldResourceProperties": _props(DesiredSize=new_size, Fingerprint="lt-2"),
    }


def test_rollback_update_completes_at_once_with_all_data_and_no_eks_call(at: Any) -> None:
    cfn, cfn_stub = _cloudformation("UPDATE_ROLLBACK_IN_PROGRESS")
    started = handler.on_event(_update("2", "3"), None, cloudformation=cfn)
    assert started["PhysicalResourceId"] == "pd-cluster/gpu-workers"
    assert started["Data"] == {"Nodes": "2"}
    assert set(started["Data"]) == set(handler.DATA_KEYS)
    cfn_stub.assert_no_pending_responses()
    # The node group is DEGRADED (why the stack rolls back): neither client may be called.
    eks, eks_stub = stubbed_client("eks")
    autoscaling, asg_stub = stubbed_client("autoscaling")
    event = {**_update("2", "3"), **started}
    out = handler.is_complete(event, None, eks=eks, autoscaling=autoscaling)
    assert out == {"IsComplete": True, "Data": {"Nodes": "2"}}
    eks_stub.assert_no_pending_responses()
    asg_stub.assert_no_pending_responses()


def test_a_normal_update_still_watches_the_node_group(at: Any) -> None:
    cfn, _ = _cloudformation("UPDATE_IN_PROGRESS")
    started = handler.on_event(_update("3", "2"), None, cloudformation=cfn)
    assert handler.ROLLBACK_KEY not in started and "Data" not in started
    eks, _ = _eks("DEGRADED", health={"issues": [{"code": "AsgInstanceLaunchFailures"}]})
    autoscaling, _ = stubbed_client("autoscaling")
    with pytest.raises(handler.CapacityError, match="status DEGRADED"):
        handler.is_complete(
            {**_update("3", "2"), **started}, None, eks=eks, autoscaling=autoscaling
        )


def test_describe_stacks_denied_treats_the_update_as_a_deploy(at: Any) -> None:
    cfn, stub = stubbed_client("cloudformation")
    stub.add_client_error("describe_stacks", service_error_code="AccessDenied")
    started = handler.on_event(_update("3", "2"), None, cloudformation=cfn)
    assert handler.ROLLBACK_KEY not in started
    assert handler.STARTED_AT_KEY in started


@pytest.mark.parametrize("kind", ["quota", "other", "capacity"])
def test_judge_quotes_the_newest_failure_of_the_deciding_kind(kind: str) -> None:
    props = handler.Props.from_properties(_props())
    failures = [
        handler.Failure(kind, STARTED + 10.0, "older failure"),
        handler.Failure(kind, STARTED + 30.0, "newest failure"),
        handler.Failure(kind, STARTED + 20.0, "middle failure"),
    ]
    with pytest.raises(RuntimeError) as raised:
        handler.judge(props, failures, STARTED + 10.0 + 600)  # capacity: exactly the wait
    assert "newest failure" in str(raised.value)
    assert "older failure" not in str(raised.value) and "middle" not in str(raised.value)
    if kind == "capacity":
        assert "for 10 min (3 failed launches; last: newest failure)" in str(raised.value)


# --- poll(): the status and the note of every branch ----------------------------------------


def _poll_direct(eks: Any, autoscaling: Any = None, **kwargs: Any) -> tuple[str, str]:
    props = handler.Props.from_properties(_props())
    return handler.poll(
        props, eks, autoscaling or object(), started=STARTED, now=STARTED + 60, **kwargs
    )


def _eks_two_groups() -> tuple[Any, Stubber]:
    client, stub = stubbed_client("eks")
    groups = [{"name": ASG}, {"name": ASG + "-2"}]
    nodegroup = {"status": "CREATING", "resources": {"autoScalingGroups": groups}}
    stub.add_response("describe_nodegroup", {"nodegroup": nodegroup}, NODEGROUP_PARAMS)
    return client, stub


def test_poll_status_and_note_of_each_branch() -> None:
    from botocore.exceptions import EndpointConnectionError

    assert _poll_direct(_eks_error("ResourceNotFoundException")[0]) == (
        "NOT_FOUND",
        "the node group does not exist yet",
    )
    status, note = _poll_direct(_eks_error("ThrottlingException")[0])
    assert status == "UNKNOWN" and note.startswith("eks:DescribeNodegroup failed: Throttling")

    class Unreachable:
        def describe_nodegroup(self, **_: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="https://eks")

    status, note = _poll_direct(Unreachable())
    assert status == "UNKNOWN" and note.startswith("eks:DescribeNodegroup failed: Could not")
    nameless, nameless_stub = stubbed_client("eks")
    nameless_stub.add_response("describe_nodegroup", {"nodegroup": {}}, NODEGROUP_PARAMS)
    assert _poll_direct(nameless)[0] == "UNKNOWN"  # no status reported
    assert _poll_direct(_eks("ACTIVE")[0]) == ("ACTIVE", "")
    # Not updating (the default): ACTIVE from before the start is ACTIVE.
    assert _poll_direct(_eks("ACTIVE", modifiedAt=_when(-600))[0]) == ("ACTIVE", "")
    assert _poll_direct(_eks("ACTIVE", modifiedAt=_when(-600))[0], updating=True) == (
        "ACTIVE_BEFORE_UPDATE",
        "waiting for the node group update to start",
    )
    assert _poll_direct(_eks(asg=False)[0]) == ("CREATING", "no Auto Scaling group yet")
    autoscaling, _ = _autoscaling([_activity(20, "Successful")])
    assert _poll_direct(_eks()[0], autoscaling) == (
        "CREATING",
        "no failed launch since the watch started",
    )


@pytest.mark.parametrize(("left", "read"), [(35.0, True), (34.9, False)])
def test_poll_reads_activities_only_with_time_for_the_slowest_call(left: float, read: bool) -> None:
    autoscaling, stub = _autoscaling([_activity(20, "Successful")])
    _status, note = _poll_direct(_eks()[0], autoscaling, time_left=lambda: left)
    if read:
        assert note == "no failed launch since the watch started"
        stub.assert_no_pending_responses()
    else:
        assert note == (
            "activities not read: this poll ran out of time; "
            "no failed launch since the watch started"
        )


def test_poll_adds_up_the_failures_of_every_group_and_joins_the_notes() -> None:
    autoscaling, stub = stubbed_client("autoscaling")
    for group in (ASG, ASG + "-2"):
        activity = {**_activity(20, "Failed", CAPACITY_MESSAGE), "AutoScalingGroupName": group}
        stub.add_response(
            "describe_scaling_activities",
            {"Activities": [activity]},
            {"AutoScalingGroupName": group, "MaxRecords": 20},
        )
    _status, note = _poll_direct(_eks_two_groups()[0], autoscaling)
    assert note.startswith("2 launches failed for lack of capacity since ")


def test_poll_notes_an_unreadable_group_and_raises_when_denied() -> None:
    autoscaling, stub = stubbed_client("autoscaling")
    stub.add_client_error("describe_scaling_activities", service_error_code="Throttling")
    _status, note = _poll_direct(_eks()[0], autoscaling)
    assert note.startswith(f"autoscaling:DescribeScalingActivities failed for {ASG}: ")
    assert note.endswith("; no failed launch since the watch started")
    denied, stub = stubbed_client("autoscaling")
    stub.add_client_error("describe_scaling_activities", service_error_code="AccessDenied")
    with pytest.raises(
        RuntimeError, match=r"may not call autoscaling:DescribeScalingActivities \("
    ):
        _poll_direct(_eks()[0], denied)


def test_poll_notes_a_group_it_cannot_reach() -> None:
    from botocore.exceptions import EndpointConnectionError

    class Unreachable:
        def describe_scaling_activities(self, **_: Any) -> Any:
            raise EndpointConnectionError(
                endpoint_url="https://autoscaling.us-west-2.amazonaws.com/"
            )

    _status, note = _poll_direct(_eks()[0], Unreachable())
    assert note == (
        f"autoscaling:DescribeScalingActivities failed for {ASG}: Could not connect to the "
        'endpoint URL: "https://autoscaling.us-west-2.amazonaws.com/"; '
        "no failed launch since the watch started"
    )


def test_time_left_reaches_the_paging() -> None:
    autoscaling, _stub = _autoscaling(
        [_activity(50, "Failed", CAPACITY_MESSAGE)], [_activity(40, "Failed", CAPACITY_MESSAGE)]
    )
    calls = iter([100.0, 30.0])  # enough for the group, not for its second page
    _status, note = _poll_direct(_eks()[0], autoscaling, time_left=lambda: next(calls))
    assert note.startswith("1 launches failed")


@pytest.mark.parametrize(("left", "pages"), [(35.0, 2), (34.9, 1)])
def test_failed_launches_pages_only_with_time_for_the_slowest_call(left: float, pages: int) -> None:
    autoscaling, _stub = _autoscaling(
        [_activity(50, "Failed", CAPACITY_MESSAGE)], [_activity(40, "Failed", CAPACITY_MESSAGE)]
    )
    found = handler.failed_launches(autoscaling, ASG, STARTED, lambda: left)
    assert [f.message[:10] for f in found] == ["We current"] * pages  # page 1 kept either way


def test_a_failure_without_any_message_says_so() -> None:
    activity = _activity(1, "Failed")
    del activity["Description"]
    found = handler.classify(activity, STARTED + 1.0)
    assert found is not None and found.message == "(no status message)"


def test_the_rollback_check_asks_cloudformation(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = stack_status_client(monkeypatch, handler, "UPDATE_ROLLBACK_IN_PROGRESS")
    assert handler.stack_rolling_back({"StackId": "arn:stack"}) is True
    assert asked == ["cloudformation"]


# --- the Cluster stack, while the node group is created ---------------------------------------

CLUSTER_STACK = "RayPdEks-Cluster"


def _cluster_stack(
    status: str | None, *, began: float = 0, reason: str = "", **extra: Any
) -> tuple[Any, Stubber]:
    """DescribeStacks on the Cluster stack: ``status`` (None: it does not exist) for an
    operation that began ``began`` seconds after the watch's start."""
    client, stub = stubbed_client("cloudformation")
    params = {"StackName": CLUSTER_STACK}
    if status is None:
        stub.add_client_error(
            "describe_stacks",
            service_error_code="ValidationError",
            service_message=f"Stack with id {CLUSTER_STACK} does not exist",
            expected_params=params,
        )
        return client, stub
    stack: dict[str, Any] = {
        "StackName": CLUSTER_STACK,
        "CreationTime": _when(began),
        "StackStatus": status,
        **extra,
    }
    if reason:
        stack["StackStatusReason"] = reason
    stub.add_response("describe_stacks", {"Stacks": [stack]}, params)
    return client, stub


def _watched(request: str = "Create") -> dict[str, Any]:
    return _event(request, ClusterStackName=CLUSTER_STACK)


def _poll_watched(event: dict[str, Any], eks: Any, cfn: Any, autoscaling: Any = None) -> Any:
    return handler.is_complete(
        event, None, eks=eks, autoscaling=autoscaling or object(), cloudformation=cfn
    )


ADDON_FAILED = "The following resource(s) failed to create: [ClusterAdmin0AccessEntry]."


@pytest.mark.parametrize(
    "status",
    [
        "ROLLBACK_IN_PROGRESS",  # the first create failed after the control plane was ACTIVE
        "DELETE_IN_PROGRESS",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
    ],
)
def test_cluster_stack_rolling_back_fails_the_create_at_once(at: Any, status: str) -> None:
    # Rolling back now counts whenever its operation began (here a day before the watch).
    cfn, cfn_stub = _cluster_stack(status, began=-86400, reason=ADDON_FAILED)
    eks, eks_stub = stubbed_client("eks")  # not called: the stack decides first
    with pytest.raises(handler.CapacityError) as raised:
        _poll_watched(_watched(), eks, cfn)
    assert str(raised.value) == (
        f"GPU node group pd-cluster/gpu-workers: the Cluster stack {CLUSTER_STACK} is "
        f"{status} ({ADDON_FAILED}); its cluster cannot be deleted while this node group "
        "exists, so the GPU node stack stops creating it and rolls it back. Fix the Cluster "
        "stack's failure, then redeploy."
    )
    cfn_stub.assert_no_pending_responses()
    eks_stub.assert_no_pending_responses()


def test_cluster_stack_rolling_back_fails_even_when_the_node_group_is_active(at: Any) -> None:
    """ACTIVE would end the watch, and nothing would then stop the rollback's DeleteCluster."""
    cfn, _ = _cluster_stack("ROLLBACK_IN_PROGRESS")
    with pytest.raises(
        handler.CapacityError, match=r"is ROLLBACK_IN_PROGRESS \(no reason given\);"
    ):
        _poll_watched(_watched(), _eks("ACTIVE")[0], cfn)


@pytest.mark.parametrize(
    "status",
    ["ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED", "UPDATE_ROLLBACK_COMPLETE"],
)
def test_cluster_stack_failed_in_this_deploy_fails_the_create(at: Any, status: str) -> None:
    cfn, _ = _cluster_stack(status, began=-120, reason=ADDON_FAILED)
    with pytest.raises(handler.CapacityError, match=f"is {status} \\(The following resource"):
        _poll_watched(_watched(), _eks()[0], cfn)


@pytest.mark.parametrize(
    ("began", "fails"),
    [(-handler.CLUSTER_STACK_LEAD_SECONDS, True), (-handler.CLUSTER_STACK_LEAD_SECONDS - 1, False)],
    ids=["lead-reached", "one-second-earlier"],
)
def test_cluster_stack_failure_lead_edge(at: Any, began: float, fails: bool) -> None:
    """A failure of an operation that began more than the lead before the watch is a previous
    deploy's, left behind: the node group's create goes on."""
    cfn, _ = _cluster_stack("UPDATE_ROLLBACK_COMPLETE", began=began)
    eks, _ = _eks("CREATING", asg=False)
    if fails:
        with pytest.raises(handler.CapacityError, match="UPDATE_ROLLBACK_COMPLETE"):
            _poll_watched(_watched(), eks, cfn)
    else:
        assert _poll_watched(_watched(), eks, cfn) == PENDING


def test_cluster_stack_last_updated_time_is_its_operations_start(at: Any) -> None:
    # Created long ago, updated (and failed) in this deploy.
    cfn, _ = _cluster_stack("UPDATE_ROLLBACK_COMPLETE", began=-86400, LastUpdatedTime=_when(-60))
    with pytest.raises(handler.CapacityError, match="UPDATE_ROLLBACK_COMPLETE"):
        _poll_watched(_watched(), _eks()[0], cfn)


@pytest.mark.parametrize(
    "status", ["CREATE_IN_PROGRESS", "CREATE_COMPLETE", "UPDATE_IN_PROGRESS", "UPDATE_COMPLETE"]
)
def test_cluster_stack_in_progress_or_complete_lets_the_watch_go_on(at: Any, status: str) -> None:
    cfn, cfn_stub = _cluster_stack(status)
    assert _poll_watched(_watched(), _eks("CREATING", asg=False)[0], cfn) == PENDING
    cfn, _ = _cluster_stack(status)
    assert _poll_watched(_watched(), _eks("ACTIVE")[0], cfn)["IsComplete"] is True
    cfn_stub.assert_no_pending_responses()


def test_cluster_stack_not_found_or_unreadable_lets_the_watch_go_on(at: Any) -> None:
    cfn, _ = _cluster_stack(None)
    assert _poll_watched(_watched(), _eks("CREATING", asg=False)[0], cfn) == PENDING
    throttled, stub = stubbed_client("cloudformation")
    stub.add_client_error("describe_stacks", service_error_code="Throttling")
    assert _poll_watched(_watched(), _eks("CREATING", asg=False)[0], throttled) == PENDING
    empty, stub = stubbed_client("cloudformation")
    stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": CLUSTER_STACK})
    assert _poll_watched(_watched(), _eks("CREATING", asg=False)[0], empty) == PENDING


def test_cluster_stack_describe_denied_fails_at_once(at: Any) -> None:
    denied, stub = stubbed_client("cloudformation")
    stub.add_client_error("describe_stacks", service_error_code="AccessDenied")
    with pytest.raises(
        handler.CapacityError,
        match=f"may not call cloudformation:DescribeStacks on {CLUSTER_STACK}",
    ):
        _poll_watched(_watched(), object(), denied)


def test_cluster_stack_is_watched_on_create_only_and_when_named(at: Any) -> None:
    # Update: the Cluster stack's rollback of an update keeps its cluster. object() has no
    # describe_stacks: calling it would raise AttributeError.
    eks, _ = _eks("ACTIVE", modifiedAt=_when(5))
    assert _poll_watched(_watched("Update"), eks, object())["IsComplete"] is True
    # No ClusterStackName (the previous release's resources): not watched.
    assert _poll_watched(_event(), _eks("ACTIVE")[0], object())["IsComplete"] is True


def test_cluster_stack_notes_reach_the_timeout_message(at: Any) -> None:
    at(2700)
    cfn, _ = _cluster_stack("CREATE_FAILED", began=-86400)  # an earlier deploy's
    eks, _ = _eks("CREATING", asg=False)
    with pytest.raises(
        handler.CapacityError,
        match=f"no Auto Scaling group yet; stack {CLUSTER_STACK} is CREATE_FAILED from an "
        "earlier deploy. Check",
    ):
        _poll_watched(_watched(), eks, cfn)


def test_watch_cluster_stack_notes_each_branch() -> None:
    props = handler.Props.from_properties(_props(ClusterStackName=CLUSTER_STACK))
    look = handler.watch_cluster_stack
    assert look(props, _cluster_stack("CREATE_IN_PROGRESS")[0], started=STARTED) == (
        f"stack {CLUSTER_STACK} is CREATE_IN_PROGRESS"
    )
    assert look(props, _cluster_stack(None)[0], started=STARTED) == (
        f"stack {CLUSTER_STACK} does not exist"
    )

    class Unreachable:
        def describe_stacks(self, **_: Any) -> Any:
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url="https://cloudformation")

    assert look(props, Unreachable(), started=STARTED).startswith(
        f"cloudformation:DescribeStacks {CLUSTER_STACK} failed: Could not connect"
    )
    nameless, stub = stubbed_client("cloudformation")
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": CLUSTER_STACK, "CreationTime": _when(0), "StackStatus": ""}]},
    )
    assert look(props, nameless, started=STARTED) == f"stack {CLUSTER_STACK} is UNKNOWN"


def test_a_watched_create_makes_its_clients(monkeypatch: pytest.MonkeyPatch, at: Any) -> None:
    """Without clients passed in (as in Lambda): the Cluster stack's, then the node group's and
    its Auto Scaling group's, each with the handler's timeouts and retries."""
    cfn, _ = _cluster_stack("CREATE_IN_PROGRESS")
    eks, _ = _eks("CREATING")
    autoscaling, _ = _autoscaling([])
    clients = {"cloudformation": cfn, "eks": eks, "autoscaling": autoscaling}
    made = boto3_makes(monkeypatch, handler, **clients)
    assert handler.is_complete(_watched(), None) == PENDING
    assert made == ["cloudformation", "eks", "autoscaling"]


@pytest.mark.parametrize(("left", "read"), [(35.0, True), (34.9, False)])
def test_the_lambdas_remaining_time_reaches_the_poll(at: Any, left: float, read: bool) -> None:
    """With less than the slowest call left in this Lambda run, the activities are not read,
    and the give-up message says why."""
    at(2700)
    eks, _ = _eks("CREATING")
    autoscaling, stub = stubbed_client("autoscaling")
    if read:
        stub.add_response(
            "describe_scaling_activities",
            {"Activities": []},
            {"AutoScalingGroupName": ASG, "MaxRecords": 20},
        )
    with pytest.raises(handler.CapacityError) as raised:
        handler.is_complete(_event(), LambdaContext(left), eks=eks, autoscaling=autoscaling)
    not_read = "status CREATING; activities not read: this poll ran out of time; "
    assert (not_read in str(raised.value)) is not read
    stub.assert_no_pending_responses()


def test_a_first_poll_without_its_start_time_counts_from_now(at: Any) -> None:
    at(86400)  # a day after STARTED: the start key is missing, so this poll is the start
    event = _event()
    del event[handler.STARTED_AT_KEY]
    assert _poll(event, _eks("CREATING", asg=False)[0], object()) == PENDING
