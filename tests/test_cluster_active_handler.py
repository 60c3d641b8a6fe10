"""The control-plane waiter's handler (assets/lambda/cluster_active/), with botocore's Stubber
(no AWS): one test per branch of a poll, driven as the CDK Provider calls ``on_event`` and
``is_complete``, with a fixed clock (the wait started at ``STARTED``)."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

HANDLER = (
    Path(__file__).resolve().parent.parent / "assets" / "lambda" / "cluster_active" / "handler.py"
)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cluster_active_handler", HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_active_handler"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


handler = _load()

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


def _client(name: str) -> tuple[Any, Stubber]:
    client = boto3.client(
        name, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"
    )
    stub = Stubber(client)
    stub.activate()
    return client, stub


def _cluster(status: str, version: str = "1.36", group: str = SG) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": CLUSTER, "status": status, "version": version}
    if group:
        cluster["resourcesVpcConfig"] = {"clusterSecurityGroupId": group}
    return {"cluster": cluster}


def _stack(status: str, *, at: float = STARTED - 60, reason: str = "") -> dict[str, Any]:
    stack: dict[str, Any] = {
        "StackName": STACK,
        "StackStatus": status,
        "CreationTime": datetime.fromtimestamp(at - 3600, UTC),
        "LastUpdatedTime": datetime.fromtimestamp(at, UTC),
    }
    if reason:
        stack["StackStatusReason"] = reason
    return {"Stacks": [stack]}


def _poll(
    eks_answer: dict[str, Any] | None,
    stack_answer: dict[str, Any] | None = None,
    *,
    elapsed: float = 60,
    eks_error: str = "",
    event: dict[str, Any] | None = None,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    monkeypatch.setattr(handler, "clock", lambda: STARTED + elapsed)
    eks, eks_stub = _client("eks")
    cfn, cfn_stub = _client("cloudformation")
    if eks_error:
        eks_stub.add_client_error("describe_cluster", eks_error, "no", expected_params=None)
    else:
        eks_stub.add_response("describe_cluster", eks_answer, {"name": CLUSTER})
    if stack_answer is not None:
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


def test_a_cluster_that_does_not_exist_yet_keeps_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Cluster stack creates the KMS key and the log group before the cluster."""
    result = _poll(
        None,
        _stack("CREATE_IN_PROGRESS"),
        eks_error="ResourceNotFoundException",
        monkeypatch=monkeypatch,
    )
    assert result == {"IsComplete": False}


def test_a_cluster_stack_that_does_not_exist_yet_keeps_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED + 30)
    eks, eks_stub = _client("eks")
    cfn, cfn_stub = _client("cloudformation")
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
    assert handler.version_tuple("latest") is None


def test_a_failed_cluster_fails_at_once_quoting_eks(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = _cluster("FAILED")
    answer["cluster"]["health"] = {
        "issues": [{"code": "Ec2SubnetInvalidConfiguration", "message": "subnet is full"}]
    }
    with pytest.raises(handler.WaitError, match=r"cluster FAILED.*Ec2SubnetInvalidConfiguration"):
        _poll(answer, monkeypatch=monkeypatch)


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


def test_a_stack_being_deleted_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CDK CLI deletes a Cluster stack left in ROLLBACK_COMPLETE before creating it again."""
    result = _poll(
        None,
        _stack("DELETE_IN_PROGRESS"),
        eks_error="ResourceNotFoundException",
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


def test_a_denied_describe_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(handler.WaitError, match="eks:DescribeCluster is denied"):
        _poll(None, eks_error="AccessDeniedException", monkeypatch=monkeypatch)


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


def test_an_update_keeps_the_physical_id_that_holds_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handler, "clock", lambda: STARTED)
    cfn, stub = _client("cloudformation")
    stub.add_response("describe_stacks", {"Stacks": [_stack("UPDATE_IN_PROGRESS")["Stacks"][0]]})
    result = handler.on_event(_event("Update", f"{CLUSTER}/{SG}"), None, cloudformation=cfn)
    assert result["PhysicalResourceId"] == f"{CLUSTER}/{SG}"
    assert handler.ROLLBACK_KEY not in result


def test_a_rollback_update_answers_at_once_with_the_group_of_its_id() -> None:
    cfn, stub = _client("cloudformation")
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
