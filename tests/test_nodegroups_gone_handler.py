"""The Cluster stack's delete guard (``Custom::NodegroupsGone``), with botocore's Stubber (no
AWS). Each test drives ``on_event``/``is_complete`` as the CDK Provider calls them, with a fixed
clock: the Delete started at ``STARTED`` and the poll runs at ``STARTED + elapsed``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
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
)

handler = load("nodegroups_gone", "nodegroups_gone_handler")

STARTED = 1_760_000_000
CLUSTER = "pd-cluster"
STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-Cluster/5b7d1a10"
WAIT = 2400
GRACE = 300
FIX = "Destroy RayPdEks/GpuNodes first (npx cdk destroy 'RayPdEks/GpuNodes'"


def _props(**overrides: str) -> dict[str, str]:
    props = {
        "ClusterName": CLUSTER,
        "WaitSeconds": str(WAIT),
        "GraceSeconds": str(GRACE),
        "GpuNodesStack": "RayPdEks/GpuNodes",
        "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:framework",
    }
    props.update(overrides)
    return props


def _delete(**overrides: str) -> dict[str, Any]:
    """A guarded Delete as ``is_complete`` receives it (on_event's answer merged in)."""
    return {
        "RequestType": "Delete",
        "StackId": STACK_ID,
        "PhysicalResourceId": CLUSTER,
        handler.GUARD_KEY: "true",
        handler.STARTED_AT_KEY: str(STARTED),
        "ResourceProperties": _props(**overrides),
    }


at = clock_fixture(handler, STARTED)  # at(seconds): the handler's clock, after the start


def _when(seconds_after_start: float) -> datetime:
    return after(STARTED, seconds_after_start)


LIST_PARAMS = {"clusterName": CLUSTER, "maxResults": 100}


def _eks(*groups: tuple[str, str, float]) -> tuple[Any, Stubber]:
    """The cluster's node groups as (name, status, modifiedAt seconds after the start)."""
    client, stub = stubbed_client("eks")
    stub.add_response("list_nodegroups", {"nodegroups": [g[0] for g in groups]}, LIST_PARAMS)
    for name, status, modified in groups:
        nodegroup = {
            "nodegroupName": name,
            "clusterName": CLUSTER,
            "status": status,
            "modifiedAt": _when(modified),
        }
        stub.add_response(
            "describe_nodegroup",
            {"nodegroup": nodegroup},
            {"clusterName": CLUSTER, "nodegroupName": name},
        )
    return client, stub


def _poll(eks: Any, event: dict[str, Any] | None = None, context: Any = None) -> dict[str, Any]:
    return handler.is_complete(event or _delete(), context, eks=eks)


def _cloudformation(status: str | None) -> tuple[Any, Stubber]:
    client, stub = stubbed_client("cloudformation")
    if status is None:
        stub.add_client_error(
            "describe_stacks",
            service_error_code="ValidationError",
            service_message=f"Stack with id {STACK_ID} does not exist",
        )
        return client, stub
    stack = {
        "StackId": STACK_ID,
        "StackName": "RayPdEks-Cluster",
        "CreationTime": _when(-3600),
        "StackStatus": status,
    }
    stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": STACK_ID})
    return client, stub


PENDING = {"IsComplete": False}
DONE = {"IsComplete": True}


# --- on_event --------------------------------------------------------------------------------


def test_create_names_the_cluster_and_touches_nothing() -> None:
    event = {"RequestType": "Create", "StackId": STACK_ID, "ResourceProperties": _props()}
    # object(): no AWS method to call.
    assert handler.on_event(event, None, cloudformation=object()) == {"PhysicalResourceId": CLUSTER}
    assert handler.is_complete(event, None, eks=object()) == DONE


def test_update_keeps_the_physical_id_and_touches_nothing() -> None:
    event = {
        "RequestType": "Update",
        "StackId": STACK_ID,
        "PhysicalResourceId": "old-name",
        "ResourceProperties": _props(ClusterName="new-name"),
    }
    assert handler.on_event(event, None, cloudformation=object()) == {
        "PhysicalResourceId": "old-name"
    }
    assert handler.is_complete(event, None, eks=object()) == DONE


def test_create_with_missing_properties_fails_naming_them() -> None:
    event = {"RequestType": "Create", "ResourceProperties": _props(GraceSeconds="")}
    with pytest.raises(RuntimeError, match="ResourceProperties missing GraceSeconds"):
        handler.on_event(event, None)


@pytest.mark.parametrize(
    ("status", "guards"),
    [
        ("DELETE_IN_PROGRESS", True),  # cdk destroy
        ("ROLLBACK_IN_PROGRESS", True),  # a failed first create
        ("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", False),  # replaced or removed: the cluster stays
        ("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", False),
        ("UPDATE_ROLLBACK_IN_PROGRESS", False),
        (None, True),  # CloudFormation cannot say: guard
    ],
)
def test_delete_guards_only_a_delete_of_the_cluster(
    at: Any, status: str | None, guards: bool
) -> None:
    at(0)
    cfn, stub = _cloudformation(status)
    event = {
        "RequestType": "Delete",
        "StackId": STACK_ID,
        "PhysicalResourceId": CLUSTER,
        "ResourceProperties": _props(),
    }
    answer = handler.on_event(event, None, cloudformation=cfn)
    stub.assert_no_pending_responses()
    if guards:
        assert answer == {
            "PhysicalResourceId": CLUSTER,
            handler.GUARD_KEY: "true",
            handler.STARTED_AT_KEY: str(STARTED),
        }
    else:
        assert answer == {"PhysicalResourceId": CLUSTER}
        # Unguarded: is_complete answers at once, calling nothing.
        assert handler.is_complete({**event, **answer}, None, eks=object()) == DONE


def test_delete_without_a_stack_id_guards(at: Any) -> None:
    event = {"RequestType": "Delete", "PhysicalResourceId": CLUSTER, "ResourceProperties": {}}
    assert handler.on_event(event, None, cloudformation=object())[handler.GUARD_KEY] == "true"


def test_the_delete_check_asks_cloudformation(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = stack_status_client(monkeypatch, handler, "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS")
    assert handler.guards_this_delete({"StackId": STACK_ID}) is False
    assert asked == ["cloudformation"]


# --- is_complete: what is left -------------------------------------------------------------


def test_no_node_group_left_completes(at: Any) -> None:
    eks, stub = _eks()
    assert _poll(eks) == DONE
    stub.assert_no_pending_responses()


def test_a_cluster_that_does_not_exist_has_no_node_group(at: Any) -> None:
    eks, stub = stubbed_client("eks")
    stub.add_client_error(
        "list_nodegroups", service_error_code="ResourceNotFoundException", expected_params=None
    )
    assert _poll(eks) == DONE


@pytest.mark.parametrize("status", ["CREATING", "DELETING"])
def test_a_node_group_being_created_or_deleted_is_waited_for(at: Any, status: str) -> None:
    at(GRACE * 3)  # far past the grace: moving groups are not held to it
    eks, stub = _eks(("gpu-workers-us-west-2a-1a2b", status, -600))
    assert _poll(eks) == PENDING
    stub.assert_no_pending_responses()


def test_a_node_group_gone_between_list_and_describe_is_gone(at: Any) -> None:
    eks, stub = stubbed_client("eks")
    stub.add_response("list_nodegroups", {"nodegroups": ["gpu"]}, LIST_PARAMS)
    stub.add_client_error(
        "describe_nodegroup",
        service_error_code="ResourceNotFoundException",
        expected_params={"clusterName": CLUSTER, "nodegroupName": "gpu"},
    )
    assert _poll(eks) == DONE


@pytest.mark.parametrize("status", ["ACTIVE", "DEGRADED", "UPDATING", "DELETE_FAILED"])
def test_a_node_group_nobody_deletes_fails_after_the_grace_with_the_fix(
    at: Any, status: str
) -> None:
    at(GRACE)
    eks, _ = _eks(("gpu-workers-us-west-2a-1a2b", status, -3600))
    with pytest.raises(RuntimeError) as raised:
        _poll(eks)
    message = str(raised.value)
    assert message.startswith(
        f"EKS cluster {CLUSTER} cannot be deleted yet: node group gpu-workers-us-west-2a-1a2b "
        f"({status}) is not being deleted (EKS refuses to delete a cluster with node groups). "
    )
    assert FIX in message and message.endswith("then delete this stack again.")


def test_every_stuck_group_is_named_whichever_stack_made_it(at: Any) -> None:
    at(GRACE)
    eks, _ = _eks(("system", "ACTIVE", -3600), ("gpu", "DELETING", 0), ("by-hand", "ACTIVE", -3600))
    with pytest.raises(RuntimeError, match=r"node group system \(ACTIVE\), by-hand \(ACTIVE\) are"):
        _poll(eks)


@pytest.mark.parametrize(("elapsed", "fails"), [(GRACE, True), (GRACE - 1, False)])
def test_grace_edge_from_the_start(at: Any, elapsed: int, fails: bool) -> None:
    at(elapsed)
    eks, _ = _eks(("gpu", "ACTIVE", -3600))  # ACTIVE since long before the Delete
    if fails:
        with pytest.raises(RuntimeError, match="is not being deleted"):
            _poll(eks)
    else:
        assert _poll(eks) == PENDING


@pytest.mark.parametrize(("elapsed", "fails"), [(600 + GRACE, True), (600 + GRACE - 1, False)])
def test_grace_counts_from_the_groups_last_change(at: Any, elapsed: int, fails: bool) -> None:
    """A group that finished creating 10 minutes into the Delete (a GpuNodes rollback that let
    its create end) gets the whole grace from then before its delete must have begun."""
    at(elapsed)
    eks, _ = _eks(("gpu", "ACTIVE", 600))
    if fails:
        with pytest.raises(RuntimeError, match="is not being deleted"):
            _poll(eks)
    else:
        assert _poll(eks) == PENDING


@pytest.mark.parametrize(("elapsed", "fails"), [(WAIT, True), (WAIT - 1, False)])
def test_wait_edge(at: Any, elapsed: int, fails: bool) -> None:
    at(elapsed)
    eks, _ = _eks(("gpu", "DELETING", elapsed - 10))
    if fails:
        with pytest.raises(RuntimeError) as raised:
            _poll(eks)
        assert str(raised.value) == (
            f"EKS cluster {CLUSTER} cannot be deleted yet: gave up after 40 min waiting for "
            "node group gpu (DELETING). Check the node groups in the EKS console; once they "
            "are gone, delete this stack again."
        )
    else:
        assert _poll(eks) == PENDING


# --- is_complete: API errors -----------------------------------------------------------------


@pytest.mark.parametrize("code", ["AccessDeniedException", "AccessDenied", "UnauthorizedOperation"])
@pytest.mark.parametrize("operation", ["list_nodegroups", "describe_nodegroup"])
def test_a_missing_permission_fails_at_once(at: Any, operation: str, code: str) -> None:
    eks, stub = stubbed_client("eks")
    if operation == "describe_nodegroup":
        stub.add_response("list_nodegroups", {"nodegroups": ["gpu"]}, LIST_PARAMS)
    action = "eks:ListNodegroups" if operation == "list_nodegroups" else "eks:DescribeNodegroup"
    denial = f"User: arn:aws:sts::123456789012:assumed-role/guard is not authorized: {action}"
    stub.add_client_error(operation, service_error_code=code, service_message=denial)
    with pytest.raises(RuntimeError) as raised:
        _poll(eks)
    # The action, EKS's own words, and where the role's policy comes from.
    assert str(raised.value) == (
        f"EKS cluster {CLUSTER} cannot be deleted yet: the guard may not call {action} "
        f"({code}: {denial}); its role's policy comes from the NodegroupsGone construct"
    )


def test_a_throttled_list_is_pending_until_the_wait_then_fails(at: Any) -> None:
    at(GRACE * 2)  # an unknown state is never "stuck"
    eks, stub = stubbed_client("eks")
    stub.add_client_error("list_nodegroups", service_error_code="ThrottlingException")
    assert _poll(eks) == PENDING
    at(WAIT)
    eks, stub = stubbed_client("eks")
    stub.add_client_error("list_nodegroups", service_error_code="ThrottlingException")
    with pytest.raises(RuntimeError, match=r"waiting for node group \(list failed\) \(UNKNOWN\)"):
        _poll(eks)


class FakeEks:
    """EKS without botocore: lists ``names`` (one page each entry of ``pages``), describes each
    as ``DELETING`` or raises ``describe_error``; records every call. (A Stubber with no
    response left raises a BotoCoreError, which the guard takes for a failed call: a call
    that should not happen would pass unseen.)"""

    def __init__(
        self,
        *pages: list[str],
        list_error: Exception | None = None,
        describe_error: Exception | None = None,
    ) -> None:
        self.pages = list(pages)
        self.list_error = list_error
        self.describe_error = describe_error
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def list_nodegroups(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("list_nodegroups", params))
        if self.list_error is not None:
            raise self.list_error
        page = len([c for c in self.calls if c[0] == "list_nodegroups"]) - 1
        more = page + 1 < len(self.pages)
        return {"nodegroups": self.pages[page], **({"nextToken": f"t{page + 1}"} if more else {})}

    def describe_nodegroup(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("describe_nodegroup", params))
        if self.describe_error is not None:
            raise self.describe_error
        name = params["nodegroupName"]
        return {"nodegroup": {"nodegroupName": name, "status": "DELETING"}}

    def described(self) -> list[str]:
        return [c[1]["nodegroupName"] for c in self.calls if c[0] == "describe_nodegroup"]


UNREACHABLE = EndpointConnectionError(endpoint_url="https://eks.us-west-2.amazonaws.com")
SERVER_ERROR = ClientError(
    {"Error": {"Code": "ServerException", "Message": "internal"}}, "DescribeNodegroup"
)


@pytest.mark.parametrize("error", [UNREACHABLE, SERVER_ERROR], ids=["unreachable", "server-error"])
@pytest.mark.parametrize("call", ["list", "describe"])
def test_a_failed_call_is_an_unknown_group_until_the_wait_then_named(
    at: Any, call: str, error: Exception
) -> None:
    """Past the grace it is still pending (an unknown state is never "stuck"); at the wait's
    end the message names what could not be read: the list, or the group by its name."""
    at(GRACE * 2)
    make = (
        (lambda: FakeEks(["gpu"], list_error=error))
        if call == "list"
        else (lambda: FakeEks(["gpu"], describe_error=error))
    )
    assert _poll(make()) == PENDING
    at(WAIT)
    named = "(list failed) (UNKNOWN)" if call == "list" else "gpu (UNKNOWN)"
    with pytest.raises(RuntimeError) as raised:
        _poll(make())
    assert f"gave up after 40 min waiting for node group {named}. Check" in str(raised.value)


def test_a_failed_describe_is_an_unknown_group_not_a_stuck_one(at: Any) -> None:
    at(GRACE * 2)
    eks, stub = stubbed_client("eks")
    stub.add_response("list_nodegroups", {"nodegroups": ["gpu"]}, LIST_PARAMS)
    stub.add_client_error("describe_nodegroup", service_error_code="ServerException")
    assert _poll(eks) == PENDING


def test_every_page_of_names_is_read() -> None:
    props = handler.Props.from_properties(_props())
    eks = FakeEks(["a"], ["b", "c"], ["d"])
    seen, note = handler.look(props, eks)
    assert [n.name for n in seen] == ["a", "b", "c", "d"]
    assert note == ""
    assert [c[1].get("nextToken") for c in eks.calls if c[0] == "list_nodegroups"] == [
        None,
        "t1",
        "t2",
    ]


@pytest.mark.parametrize(("left", "read"), [(35.0, True), (34.9, False)])
def test_a_poll_without_time_for_the_slowest_call_describes_nothing(
    at: Any, left: float, read: bool
) -> None:
    """The Lambda context's remaining time reaches the reads: with less than the slowest call
    left, no group is described, and each (both) counts as unknown."""
    eks = FakeEks(["gpu", "system"])
    assert _poll(eks, context=LambdaContext(left)) == PENDING
    assert eks.described() == (["gpu", "system"] if read else [])
    props = handler.Props.from_properties(_props())
    seen, _note = handler.look(props, FakeEks(["gpu", "system"]), time_left=lambda: left)
    status = "DELETING" if read else "UNKNOWN"
    assert seen == [handler.Nodegroup("gpu", status), handler.Nodegroup("system", status)]


def test_a_first_poll_without_its_start_time_counts_from_now(at: Any) -> None:
    """Without the start on_event stored, the grace counts from this poll: an ACTIVE group is
    not yet stuck."""
    at(GRACE * 10)
    event = _delete()
    del event[handler.STARTED_AT_KEY]
    eks, _ = _eks(("gpu", "ACTIVE", -3600))
    assert _poll(eks, event) == PENDING


def test_a_poll_makes_its_eks_client(monkeypatch: pytest.MonkeyPatch, at: Any) -> None:
    eks = FakeEks(["gpu"])
    made = boto3_makes(monkeypatch, handler, eks=eks)
    assert handler.is_complete(_delete(), None) == PENDING
    assert made == ["eks"] and eks.described() == ["gpu"]


def test_the_list_follows_its_pages_up_to_the_cap(at: Any) -> None:
    eks, stub = stubbed_client("eks")
    for page in range(handler.MAX_LIST_PAGES):
        params = dict(LIST_PARAMS, **({"nextToken": f"t{page}"} if page else {}))
        stub.add_response(
            "list_nodegroups", {"nodegroups": [], "nextToken": f"t{page + 1}"}, params
        )
    # A fourth page is never asked for (the Stubber would fail on an unexpected call).
    assert _poll(eks) == DONE
    stub.assert_no_pending_responses()


# --- decide(): the verdict on what a poll saw --------------------------------------------------


def _decide(*seen: Any, elapsed: float = 60) -> str | None:
    props = handler.Props.from_properties(_props())
    return handler.decide(props, list(seen), started=STARTED, now=STARTED + elapsed)


def test_decide_names_what_it_waits_for() -> None:
    assert _decide() is None
    assert _decide(handler.Nodegroup("a", "CREATING"), handler.Nodegroup("b", "DELETING")) == (
        "waiting for node group a (CREATING), b (DELETING)"
    )
    # No modifiedAt: the grace counts from the start.
    with pytest.raises(RuntimeError, match="node group a"):
        _decide(handler.Nodegroup("a", "ACTIVE"), elapsed=GRACE)
    assert _decide(handler.Nodegroup("a", "ACTIVE"), elapsed=GRACE - 1) is not None


@pytest.mark.parametrize(("value", "ok"), [("1", True), ("0", False)])
def test_positive_int_properties_edge(value: str, ok: bool) -> None:
    positive_whole_number_check(handler, _props(WaitSeconds=value), "WaitSeconds", ok)
