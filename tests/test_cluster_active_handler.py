"""The control-plane waiter's handler (assets/lambda/cluster_active/), with botocore's Stubber
(no AWS): one test per branch of a poll, driven as the CDK Provider calls ``on_event`` and
``is_complete``, with a fixed clock (the wait started at ``STARTED``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeAlias

import pytest
from botocore.exceptions import BotoCoreError, EndpointConnectionError
from botocore.stub import Stubber

from tests.lambda_handlers import boto3_makes, load, stubbed_client

handler = load("cluster_active", "cluster_active_handler")

STARTED = 1_760_000_000
CLUSTER = "ray-llm-multinode"
STACK = "RayPdEks-Cluster"
SG = "sg-0123456789abcdef0"


def _props(**overrides: str) -> dict[str, str]:
    props = {
        "ClusterName": CLUSTER,
        "KubernetesVersion": "1.36",
        "ClusterStackName": STACK,
        "TimeoutSeconds": "2700",
        "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:framework",
    }
    props.update(overrides)
    return props


def _event(request: str = "Create", physical: str = CLUSTER, **overrides: str) -> dict[str, Any]:
    return {
        "RequestType": request,
        "PhysicalResourceId": physical,
        "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-GpuNodes/1",
        handler.STARTED_AT_KEY: str(STARTED),
        "ResourceProperties": _props(**overrides),
    }


def _cluster(status: str, version: str = "1.36", group: str = SG) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": CLUSTER, "status": status, "version": version}
    if group:
        cluster["resourcesVpcConfig"] = {"clusterSecurityGroupId": group}
    return {"cluster": cluster}


def _stack(
    status: str, *, at: float = STARTED - 60, reason: str = "", updated: bool = True
) -> dict[str, Any]:
    """The Cluster stack, its last operation begun ``at``: an update (``LastUpdatedTime``), or
    with ``updated=False`` its create (only ``CreationTime``, as a stack never updated has)."""
    stack: dict[str, Any] = {
        "StackName": STACK,
        "StackStatus": status,
        "CreationTime": datetime.fromtimestamp(at - 3600 if updated else at, UTC),
    }
    if updated:
        stack["LastUpdatedTime"] = datetime.fromtimestamp(at, UTC)
    if reason:
        stack["StackStatusReason"] = reason
    return {"Stacks": [stack]}


def _poll(
    eks_answer: dict[str, Any] | None,
    stack_answer: dict[str, Any] | tuple[str, str] | None = None,
    *,
    elapsed: float = 60,
    eks_error: str = "",
    eks_message: str = "no",
    event: dict[str, Any] | None = None,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    monkeypatch.setattr(handler, "clock", lambda: STARTED + elapsed)
    eks, eks_stub = stubbed_client("eks")
    cfn, cfn_stub = stubbed_client("cloudformation")
    if eks_error:
        eks_stub.add_client_error("describe_cluster", eks_error, eks_message, expected_params=None)
    else:
        eks_stub.add_response("describe_cluster", eks_answer, {"name": CLUSTER})
    if isinstance(stack_answer, tuple):
        code, message = stack_answer
        cfn_stub.add_client_error("describe_stacks", code, message, expected_params=None)
    elif stack_answer is not None:
        cfn_stub.add_response("describe_stacks", stack_answer, {"StackName": STACK})
    result = handler.is_complete(event or _event(), None, eks=eks, cloudformation=cfn)
    eks_stub.assert_no_pending_responses()
    cfn_stub.assert_no_pending_responses()
    return dict(result)


def test_active_at_the_version_completes_with_the_cluster_security_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = _poll(_cluster("ACTIVE"), monkeypatch=monkeypatch)
    assert result == {
        "IsComplete": True,
        "PhysicalResourceId": f"{CLUSTER}/{SG}",
        "Data": {"ClusterSecurityGroupId": SG},
    }


def test_active_at_a_later_version_completes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _poll(_cluster("ACTIVE", "1.37"), monkeypatch=monkeypatch)["IsComplete"] is True


def test_creating_keeps_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _poll(_cluster("CREATING"), _stack("CREATE_IN_PROGRESS"), monkeypatch=monkeypatch)
    assert result == {"IsComplete": False}


@pytest.mark.parametrize(
    "stack_status",
    [
        # The Cluster stack creates the KMS key and the log group before the cluster.
        pytest.param("CREATE_IN_PROGRESS", id="cluster-not-created-yet"),
        # The CDK CLI deletes a Cluster stack left in ROLLBACK_COMPLETE before creating it again.
        pytest.param("DELETE_IN_PROGRESS", id="stack-being-deleted"),
    ],
)
def test_a_cluster_that_does_not_exist_keeps_waiting(
    stack_status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _poll(
        None,
        _stack(stack_status),
        eks_error="ResourceNotFoundException",
        monkeypatch=monkeypatch,
    )
    assert result == {"IsComplete": False}


def test_a_cluster_stack_that_does_not_exist_yet_keeps_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED + 30)
    eks, eks_stub = stubbed_client("eks")
    cfn, cfn_stub = stubbed_client("cloudformation")
    eks_stub.add_client_error("describe_cluster", "ResourceNotFoundException", "no")
    cfn_stub.add_client_error(
        "describe_stacks", "ValidationError", f"Stack with id {STACK} does not exist"
    )
    assert handler.is_complete(_event(), None, eks=eks, cloudformation=cfn) == {"IsComplete": False}


def test_an_older_version_keeps_waiting_on_an_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """An EKS version upgrade: the Cluster stack updates the control plane beside this stack,
    and the node group must not update before it is at the new version."""
    event = _event("Update", f"{CLUSTER}/{SG}", KubernetesVersion="1.36")
    for status in ("ACTIVE", "UPDATING"):
        result = _poll(
            _cluster(status, "1.35"),
            _stack("UPDATE_IN_PROGRESS"),
            event=event,
            monkeypatch=monkeypatch,
        )
        assert result == {"IsComplete": False}, status


def test_versions_compare_as_numbers_not_text() -> None:
    assert handler.version_tuple("1.100") > handler.version_tuple("1.36")
    assert handler.version_tuple("1.36") == (1, 36)
    assert handler.version_tuple(" 1.36 ") == (1, 36)


@pytest.mark.parametrize("text", ["latest", "1.", ".36", "v1.36", "1.36.2", "1", ""])
def test_only_major_dot_minor_is_a_version(text: str) -> None:
    assert handler.version_tuple(text) is None


@pytest.mark.parametrize(
    ("issues", "said"),
    [
        (
            [
                {"code": "InsufficientFreeAddresses", "message": "subnet is full"},
                {"code": "Ec2SecurityGroupNotFound", "message": "sg-0aa gone"},
            ],
            "InsufficientFreeAddresses: subnet is full; Ec2SecurityGroupNotFound: sg-0aa gone",
        ),
        ([], "EKS reports no health issue"),
    ],
)
def test_a_failed_cluster_fails_at_once_quoting_every_health_issue(
    issues: list[dict[str, str]], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = _cluster("FAILED")
    answer["cluster"]["health"] = {"issues": issues}
    with pytest.raises(handler.WaitError) as failed:
        _poll(answer, monkeypatch=monkeypatch)
    assert str(failed.value) == (
        f"waiting for EKS cluster {CLUSTER}: cluster FAILED at Kubernetes 1.36: {said}"
    )


@pytest.mark.parametrize(
    "status",
    [
        "ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
    ],
)
def test_a_cluster_stack_rolling_back_fails_at_once_with_its_status_and_reason(
    status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "The following resource(s) failed to create: [Cluster9EE0221C]."
    # Even when the operation began long before this wait: it is failing now.
    stack = _stack(status, at=STARTED - 7200, reason=reason)
    with pytest.raises(handler.WaitError) as failed:
        _poll(_cluster("CREATING"), stack, elapsed=30, monkeypatch=monkeypatch)
    message = str(failed.value)
    assert f"the Cluster stack {STACK} is {status}" in message
    assert reason in message and CLUSTER in message


@pytest.mark.parametrize(
    "status", ["CREATE_FAILED", "UPDATE_ROLLBACK_COMPLETE", "ROLLBACK_COMPLETE"]
)
def test_a_failure_of_this_deploys_cluster_stack_operation_fails_at_once(
    status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Cluster stack's operation began at the lead limit before this wait: this deploy's.
    at = STARTED - handler.CLUSTER_STACK_LEAD_SECONDS
    with pytest.raises(handler.WaitError, match=f"is {status}"):
        _poll(_cluster("ACTIVE", "1.35"), _stack(status, at=at), monkeypatch=monkeypatch)


def test_an_earlier_deploys_failure_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """One second past the lead: the last deploy's failure, which the CDK CLI is about to
    update or recreate the stack from; waiting goes on (bounded by the timeout)."""
    at = STARTED - handler.CLUSTER_STACK_LEAD_SECONDS - 1
    result = _poll(
        _cluster("ACTIVE", "1.35"),
        _stack("UPDATE_ROLLBACK_COMPLETE", at=at),
        monkeypatch=monkeypatch,
    )
    assert result == {"IsComplete": False}


def test_the_wait_gives_up_with_what_it_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    props = handler.Props.from_properties(_props())
    limit = handler.give_up_after(props)
    assert limit == 2700 - handler.QUERY_INTERVAL_SECONDS - handler.LAMBDA_TIMEOUT_SECONDS
    before = _poll(
        _cluster("CREATING"),
        _stack("CREATE_IN_PROGRESS"),
        elapsed=limit - 1,
        monkeypatch=monkeypatch,
    )
    assert before == {"IsComplete": False}
    with pytest.raises(handler.WaitError) as failed:
        _poll(
            _cluster("CREATING"),
            _stack("CREATE_IN_PROGRESS"),
            elapsed=limit,
            monkeypatch=monkeypatch,
        )
    message = str(failed.value)
    assert "was not ACTIVE at Kubernetes 1.36 after 44 min" in message
    assert "cluster CREATING at Kubernetes 1.36" in message
    assert f"stack {STACK} is CREATE_IN_PROGRESS" in message


@pytest.mark.parametrize("code", ["AccessDeniedException", "AccessDenied", "UnauthorizedOperation"])
def test_a_denied_describe_cluster_fails_at_once_in_iams_words(
    code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = (
        "User: arn:aws:sts::123456789012:assumed-role/IsComplete/fn is not authorized to "
        f"perform: eks:DescribeCluster on resource: arn:aws:eks:us-west-2:123456789012:"
        f"cluster/{CLUSTER}"
    )
    with pytest.raises(handler.WaitError) as failed:
        _poll(None, eks_error=code, eks_message=words, monkeypatch=monkeypatch)
    assert str(failed.value) == (
        f"waiting for EKS cluster {CLUSTER}: eks:DescribeCluster is denied: {words}"
    )


@pytest.mark.parametrize("code", ["AccessDenied", "AccessDeniedException"])
def test_a_denied_describe_stacks_fails_at_once_naming_the_stack(
    code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CloudFormation (query protocol) says ``AccessDenied``; JSON services ``...Exception``."""
    denied = (code, "User: x is not authorized to perform: cloudformation:DescribeStacks")
    with pytest.raises(handler.WaitError) as failed:
        _poll(_cluster("CREATING"), denied, monkeypatch=monkeypatch)
    assert str(failed.value) == (
        f"waiting for EKS cluster {CLUSTER}: cloudformation:DescribeStacks on {STACK} is denied"
    )


def test_other_api_errors_keep_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _poll(
        None, _stack("CREATE_IN_PROGRESS"), eks_error="ThrottlingException", monkeypatch=monkeypatch
    )
    assert result == {"IsComplete": False}


def test_create_starts_the_wait_with_the_cluster_as_physical_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED)
    event = _event("Create", "")
    assert handler.on_event(event, None) == {
        "PhysicalResourceId": CLUSTER,
        handler.STARTED_AT_KEY: str(STARTED),
    }


@pytest.mark.parametrize(
    ("physical", "cluster", "answered"),
    [
        (f"{CLUSTER}/{SG}", CLUSTER, f"{CLUSTER}/{SG}"),
        (CLUSTER, CLUSTER, CLUSTER),
        # Another cluster: a new physical id, so CloudFormation replaces the resource.
        (f"{CLUSTER}/{SG}", "ray-llm-other", "ray-llm-other"),
    ],
)
def test_an_update_keeps_the_physical_id_of_the_same_cluster_only(
    physical: str, cluster: str, answered: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED)
    cfn, stub = stubbed_client("cloudformation")
    stub.add_response("describe_stacks", {"Stacks": [_stack("UPDATE_IN_PROGRESS")["Stacks"][0]]})
    event = _event("Update", physical, ClusterName=cluster)
    result = handler.on_event(event, None, cloudformation=cfn)
    assert result == {"PhysicalResourceId": answered, handler.STARTED_AT_KEY: str(STARTED)}


def test_a_rollback_update_answers_at_once_with_the_group_of_its_id() -> None:
    cfn, stub = stubbed_client("cloudformation")
    stub.add_response(
        "describe_stacks", {"Stacks": [_stack("UPDATE_ROLLBACK_IN_PROGRESS")["Stacks"][0]]}
    )
    event = _event("Update", f"{CLUSTER}/{SG}", KubernetesVersion="1.35")
    answer = handler.on_event(event, None, cloudformation=cfn)
    assert answer == {
        "PhysicalResourceId": f"{CLUSTER}/{SG}",
        "Data": {"ClusterSecurityGroupId": SG},
        handler.ROLLBACK_KEY: "true",
    }
    # is_complete passes it on without a call (no client given: none may be made).
    merged = {**event, **answer}
    assert handler.is_complete(merged, None) == {
        "IsComplete": True,
        "Data": {"ClusterSecurityGroupId": SG},
    }
    assert set(answer["Data"]) == set(handler.DATA_KEYS)


def test_delete_makes_no_call() -> None:
    event = _event("Delete", f"{CLUSTER}/{SG}")
    assert handler.on_event(event, None) == {"PhysicalResourceId": f"{CLUSTER}/{SG}"}
    assert handler.is_complete(event, None) == {"IsComplete": True}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ClusterStackName": ""}, "missing ClusterStackName"),
        ({"KubernetesVersion": "v1"}, "KubernetesVersion must read"),
        ({"TimeoutSeconds": "0"}, "TimeoutSeconds must be a positive"),
    ],
)
def test_bad_properties_fail_naming_the_property(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(handler.WaitError, match=message):
        handler.Props.from_properties(_props(**overrides))


# --- what the give-up message says it saw --------------------------------------------------

LEAD = handler.CLUSTER_STACK_LEAD_SECONDS
EKS_URL = f"https://eks.us-west-2.amazonaws.com/clusters/{CLUSTER}"
CFN_URL = "https://cloudformation.us-west-2.amazonaws.com/"
# An answer: a response, a client error (code, message), or a failure before AWS answered.
Answer: TypeAlias = dict[str, Any] | tuple[str, str] | BotoCoreError


class _Unreachable:
    """A client whose every call fails before AWS answers (no connection)."""

    def __init__(self, error: BotoCoreError) -> None:
        self.error = error

    def describe_cluster(self, **_: Any) -> Any:
        raise self.error

    def describe_stacks(self, **_: Any) -> Any:
        raise self.error


def _answering(service: str, answer: Answer) -> tuple[Any, Stubber | None]:
    if isinstance(answer, BotoCoreError):
        return _Unreachable(answer), None
    method, params = (
        ("describe_cluster", {"name": CLUSTER})
        if service == "eks"
        else ("describe_stacks", {"StackName": STACK})
    )
    client, stub = stubbed_client(service)
    if isinstance(answer, tuple):
        stub.add_client_error(method, answer[0], answer[1], expected_params=params)
    else:
        stub.add_response(method, answer, params)
    return client, stub


@pytest.mark.parametrize(
    ("eks_answer", "stack_answer", "seen", "stack"),
    [
        pytest.param(
            ("ResourceNotFoundException", f"No cluster found for name: {CLUSTER}."),
            _stack("CREATE_IN_PROGRESS"),
            "the cluster does not exist yet",
            f"stack {STACK} is CREATE_IN_PROGRESS",
            id="no-cluster-yet",
        ),
        pytest.param(
            ("ThrottlingException", "Rate exceeded"),
            ("Throttling", "Rate exceeded"),
            "eks:DescribeCluster failed: ThrottlingException: Rate exceeded",
            f"cloudformation:DescribeStacks {STACK} failed: Throttling: Rate exceeded",
            id="throttled",
        ),
        pytest.param(
            EndpointConnectionError(endpoint_url=EKS_URL),
            EndpointConnectionError(endpoint_url=CFN_URL),
            f'eks:DescribeCluster failed: Could not connect to the endpoint URL: "{EKS_URL}"',
            f"cloudformation:DescribeStacks {STACK} failed: Could not connect to the endpoint "
            f'URL: "{CFN_URL}"',
            id="unreachable",
        ),
        pytest.param(
            _cluster("ACTIVE", group=""),
            _stack("CREATE_IN_PROGRESS"),
            "cluster ACTIVE at Kubernetes 1.36 without a cluster security group yet",
            f"stack {STACK} is CREATE_IN_PROGRESS",
            id="no-group-yet",
        ),
        pytest.param(
            {"cluster": {"name": CLUSTER, "status": "ACTIVE"}},
            _stack("UPDATE_IN_PROGRESS"),
            "cluster ACTIVE at Kubernetes unknown, the GPU nodes need 1.36",
            f"stack {STACK} is UPDATE_IN_PROGRESS",
            id="no-version",
        ),
        pytest.param(
            {"cluster": {"name": CLUSTER}},
            _stack("CREATE_IN_PROGRESS"),
            "cluster UNKNOWN at Kubernetes unknown",
            f"stack {STACK} is CREATE_IN_PROGRESS",
            id="no-status",
        ),
        pytest.param(
            _cluster("ACTIVE", "1.35"),
            _stack("UPDATE_ROLLBACK_COMPLETE", at=STARTED - LEAD - 1),
            "cluster ACTIVE at Kubernetes 1.35, the GPU nodes need 1.36",
            f"stack {STACK} is UPDATE_ROLLBACK_COMPLETE from an earlier deploy",
            id="earlier-failure",
        ),
    ],
)
def test_the_give_up_message_says_what_it_saw_of_the_cluster_and_its_stack(
    eks_answer: Answer,
    stack_answer: Answer,
    seen: str,
    stack: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of these polls is pending (none completes, none fails at once) until the limit."""
    props = handler.Props.from_properties(_props())
    monkeypatch.setattr(handler, "clock", lambda: STARTED + handler.give_up_after(props))
    eks, eks_stub = _answering("eks", eks_answer)
    cfn, cfn_stub = _answering("cloudformation", stack_answer)
    with pytest.raises(handler.WaitError) as failed:
        handler.is_complete(_event(), None, eks=eks, cloudformation=cfn)
    for stub in (eks_stub, cfn_stub):
        if stub is not None:
            stub.assert_no_pending_responses()
    assert f" after 44 min: {seen}; {stack}. Check the cluster" in str(failed.value)


def test_a_failed_cluster_stack_without_a_reason_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(handler.WaitError) as failed:
        _poll(_cluster("CREATING"), _stack("ROLLBACK_COMPLETE"), monkeypatch=monkeypatch)
    assert str(failed.value) == (
        f"waiting for EKS cluster {CLUSTER}: the Cluster stack {STACK} is ROLLBACK_COMPLETE "
        "(no reason given); the GPU node stack stops waiting for its control plane. Fix the "
        "Cluster stack's failure, then redeploy."
    )


@pytest.mark.parametrize(("before", "fails"), [(LEAD, True), (LEAD + 1, False)])
def test_a_cluster_stack_never_updated_is_judged_by_its_creation_time(
    before: int, fails: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``LastUpdatedTime``: its create is its last operation (at the lead: this deploy's;
    one second earlier: an earlier deploy's, which the CDK CLI deletes and creates again)."""
    stack = _stack("ROLLBACK_COMPLETE", at=STARTED - before, updated=False)
    if fails:
        with pytest.raises(handler.WaitError, match=f"{STACK} is ROLLBACK_COMPLETE"):
            _poll(_cluster("CREATING"), stack, monkeypatch=monkeypatch)
    else:
        assert _poll(_cluster("CREATING"), stack, monkeypatch=monkeypatch) == {"IsComplete": False}


@pytest.mark.parametrize(
    ("timeout", "limit"),
    # One interval plus one Lambda run (75 s) before the timeout, or half of it when that is
    # later: 150 s is where the two meet; 90 s is the construct's shortest timeout.
    [(2700, 2625), (151, 76), (150, 75), (149, 74.5), (120, 60), (90, 45)],
)
def test_giving_up_leaves_one_poll_or_half_the_timeout(timeout: int, limit: float) -> None:
    props = handler.Props.from_properties(_props(TimeoutSeconds=str(timeout)))
    assert handler.give_up_after(props) == limit


def test_a_poll_without_its_start_time_counts_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    event = _event()
    del event[handler.STARTED_AT_KEY]
    result = _poll(
        _cluster("CREATING"),
        _stack("CREATE_IN_PROGRESS"),
        elapsed=86_400,
        event=event,
        monkeypatch=monkeypatch,
    )
    assert result == {"IsComplete": False}


# --- the clients it makes itself -----------------------------------------------------------


def test_a_poll_makes_its_eks_and_cloudformation_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED + 60)
    eks, eks_stub = _answering("eks", _cluster("CREATING"))
    cfn, cfn_stub = _answering("cloudformation", _stack("CREATE_IN_PROGRESS"))
    made = boto3_makes(monkeypatch, handler, eks=eks, cloudformation=cfn)
    assert handler.is_complete(_event(), None) == {"IsComplete": False}
    assert made == ["eks", "cloudformation"]
    for stub in (eks_stub, cfn_stub):
        assert stub is not None
        stub.assert_no_pending_responses()


def test_the_rollback_check_makes_its_cloudformation_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    event = _event("Update", f"{CLUSTER}/{SG}")
    cfn, stub = stubbed_client("cloudformation")
    rolling_back = {"Stacks": [_stack("UPDATE_ROLLBACK_IN_PROGRESS")["Stacks"][0]]}
    stub.add_response("describe_stacks", rolling_back, {"StackName": event["StackId"]})
    made = boto3_makes(monkeypatch, handler, cloudformation=cfn)
    answer = handler.on_event(event, None)
    assert answer[handler.ROLLBACK_KEY] == "true"
    assert made == ["cloudformation"]


@pytest.mark.parametrize("answer", ["error", "empty"])
@pytest.mark.parametrize(("after", "fails"), [(LEAD - 1, False), (LEAD, True)])
def test_a_cluster_stack_that_never_appears_fails_after_the_lead(
    answer: str, after: float, fails: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Cluster stack nobody deploys (this stack alone on a new account) is not waited out
    for the whole limit: CLUSTER_STACK_LEAD_SECONDS after the wait began it fails, naming the
    stack and the command; one second before, it is still "does not exist yet"."""
    monkeypatch.setattr(handler, "clock", lambda: STARTED + after)
    eks, _ = _answering(
        "eks", ("ResourceNotFoundException", f"No cluster found for name: {CLUSTER}.")
    )
    stack_answer: Answer = (
        ("ValidationError", f"Stack with id {STACK} does not exist")
        if answer == "error"
        else {"Stacks": []}
    )
    cfn, _ = _answering("cloudformation", stack_answer)
    if not fails:
        assert handler.is_complete(_event(), None, eks=eks, cloudformation=cfn) == {
            "IsComplete": False
        }
        return
    with pytest.raises(handler.WaitError) as failed:
        handler.is_complete(_event(), None, eks=eks, cloudformation=cfn)
    assert str(failed.value) == (
        f"waiting for EKS cluster {CLUSTER}: the Cluster stack {STACK} still does not exist "
        f"after {LEAD / 60:.0f} min, so no control plane is coming; deploy every stack of the "
        "app (npx cdk deploy 'RayPdEks/*' --concurrency 4)"
    )
