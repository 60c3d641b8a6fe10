"""A retained deployment can be deployed again: the leftover-log-group check
(assets/lambda/log_groups_free/) stops the deploy first, in the network stack, before anything
that bills, naming each leftover and its delete command; the pipeline's stages deploy the same
Stage and so stop the same way."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from ray_pd_eks import lambda_code
from ray_pd_eks.monitoring import fixed_log_group_names
from tests.synth import Synthesized

handler = lambda_code._load(
    "handler", "ray_pd_eks_log_groups_free_handler", lambda_code.LAMBDA_DIR / "log_groups_free"
)
CONTROL_PLANE = "/aws/eks/ray-llm-multinode/cluster"
APPLICATION = "/aws/containerinsights/ray-llm-multinode/application"


def _logs() -> tuple[Any, Stubber]:
    client = boto3.client(
        "logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"
    )
    return client, Stubber(client)


def _answer(stub: Stubber, name: str, present: list[str]) -> None:
    stub.add_response(
        "describe_log_groups",
        {"logGroups": [{"logGroupName": n} for n in present]},
        {"logGroupNamePrefix": name},
    )


def _event(request: str) -> dict[str, Any]:
    names = f"{CONTROL_PLANE},{APPLICATION}"
    return {
        "RequestType": request,
        "ResourceProperties": {"LogGroupNames": names, "Region": "us-west-2"},
        **({"PhysicalResourceId": "log-groups-free"} if request != "Create" else {}),
    }


def test_create_fails_on_a_leftover_naming_it_and_its_delete_command() -> None:
    client, stub = _logs()
    # A longer name with the same prefix is not the group itself.
    _answer(stub, CONTROL_PLANE, [CONTROL_PLANE])
    _answer(stub, APPLICATION, [APPLICATION + "-old"])
    with stub, pytest.raises(handler.LeftoverLogGroups) as info:
        handler.on_event(_event("Create"), logs=client)
    message = str(info.value)
    assert message.startswith(f"log group(s) {CONTROL_PLANE} already exist, kept by retainLogs")
    assert "Nothing that bills was created" in message
    assert (
        f"aws logs delete-log-group --log-group-name {CONTROL_PLANE} --region us-west-2" in message
    )
    assert APPLICATION not in message
    assert len(message) <= handler.MAX_REASON_CHARS


def test_create_passes_when_no_leftover_exists() -> None:
    client, stub = _logs()
    _answer(stub, CONTROL_PLANE, [])
    _answer(stub, APPLICATION, [])
    with stub:
        assert handler.on_event(_event("Create"), logs=client) == {
            "PhysicalResourceId": "log-groups-free"
        }


def test_an_update_never_fails_even_when_the_groups_exist() -> None:
    """A running deployment's groups are its own; a rollback Update must succeed at once."""
    client, stub = _logs()
    _answer(stub, CONTROL_PLANE, [CONTROL_PLANE])
    _answer(stub, APPLICATION, [APPLICATION])
    with stub:
        assert handler.on_event(_event("Update"), logs=client)["PhysicalResourceId"]
    assert handler.on_event(_event("Delete"), logs=object())["PhysicalResourceId"]


def test_with_retain_logs_the_network_stack_waits_for_the_check(
    variant_app: Synthesized, default_app: Synthesized
) -> None:
    resources = variant_app.templates["Network"]["Resources"]
    (check_id,) = [k for k, r in resources.items() if r["Type"] == "Custom::LeftoverLogGroupsCheck"]
    names = resources[check_id]["Properties"]["LogGroupNames"]
    assert names.split(",") == list(fixed_log_group_names(variant_app.config))
    # Everything of the network (the VPC first) waits for it: nothing else is created first.
    vpc_ids = [k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPC"]
    assert vpc_ids
    for logical_id in vpc_ids:
        assert check_id in resources[logical_id].get("DependsOn", [])
    # Without retainLogs a destroy leaves nothing behind: no check, no extra function.
    default = default_app.templates["Network"]["Resources"].values()
    assert not [r for r in default if r["Type"] == "Custom::LeftoverLogGroupsCheck"]
