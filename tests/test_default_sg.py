"""The default security group's restriction (assets/lambda/default_sg/): its handler against
botocore's Stubber (the requests are checked against EC2's API model), and where it sits in
the deploy (docs/deploy-timeline.md)."""

from __future__ import annotations

import logging
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from ray_pd_eks import lambda_code
from ray_pd_eks.timeline import Deploy, Timeline, refs, schedule
from tests.synth import Synthesized

handler = lambda_code._load(
    "handler", "ray_pd_eks_default_sg_handler", lambda_code.LAMBDA_DIR / "default_sg"
)
GROUP = "sg-0123456789abcdef0"
ACCOUNT = "123456789012"
EGRESS = {
    "GroupId": GROUP,
    "IpPermissions": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
}
INGRESS = {
    "GroupId": GROUP,
    "IpPermissions": [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": GROUP, "UserId": ACCOUNT}]}
    ],
}


def _ec2() -> tuple[Any, Stubber]:
    client = boto3.client(
        "ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"
    )
    return client, Stubber(client)


def _event(request: str, **properties: str) -> dict[str, Any]:
    props = {"DefaultSecurityGroupId": GROUP, "Account": ACCOUNT, **properties}
    event: dict[str, Any] = {"RequestType": request, "ResourceProperties": props}
    if request != "Create":
        event["PhysicalResourceId"] = GROUP
    return event


def _expect(stub: Stubber, egress: str | None, ingress: str | None) -> None:
    """Both revokes, in order; each answered OK (None) or with an EC2 error code."""
    for operation, params, error in (
        ("revoke_security_group_egress", EGRESS, egress),
        ("revoke_security_group_ingress", INGRESS, ingress),
    ):
        if error is None:
            stub.add_response(operation, {"Return": True}, params)
        else:
            stub.add_client_error(operation, error, f"{error} on {GROUP}", 400, params)


@pytest.mark.parametrize(
    ("egress", "ingress", "revoked"),
    [
        (None, None, ["egress to 0.0.0.0/0", "ingress from the group"]),
        ("InvalidPermission.NotFound", None, ["ingress from the group"]),
        ("InvalidPermission.NotFound", "InvalidPermission.NotFound", []),
    ],
)
def test_create_revokes_both_default_rules_and_a_rule_already_gone_is_fine(
    egress: str | None, ingress: str | None, revoked: list[str]
) -> None:
    client, stub = _ec2()
    _expect(stub, egress, ingress)
    with stub:
        assert handler.restrict(client, GROUP, ACCOUNT) == revoked
        _expect(stub, egress, ingress)
        assert handler.on_event(_event("Create"), ec2=client) == {"PhysicalResourceId": GROUP}
    stub.assert_no_pending_responses()


def test_any_other_ec2_error_fails_the_create_with_ec2s_reason() -> None:
    client, stub = _ec2()
    _expect(stub, None, "UnauthorizedOperation")
    with stub, pytest.raises(handler.RestrictError) as failed:
        handler.on_event(_event("Create"), ec2=client)
    assert str(failed.value).startswith(f"revoking the default rules of {GROUP} failed: ")
    assert "UnauthorizedOperation" in str(failed.value) and "\n" not in str(failed.value)


def test_an_update_revokes_again_and_never_fails(caplog: pytest.LogCaptureFixture) -> None:
    client, stub = _ec2()
    _expect(stub, None, None)
    stub.add_client_error("revoke_security_group_egress", "UnauthorizedOperation", "denied")
    with stub, caplog.at_level(logging.WARNING):
        assert handler.on_event(_event("Update"), ec2=client) == {"PhysicalResourceId": GROUP}
        assert handler.on_event(_event("Update"), ec2=client) == {"PhysicalResourceId": GROUP}
    stub.assert_no_pending_responses()
    assert "rules not revoked again" in caplog.text and "UnauthorizedOperation" in caplog.text


def test_delete_leaves_the_group_alone() -> None:
    client, stub = _ec2()
    with stub:  # any EC2 call would fail: nothing is stubbed
        assert handler.on_event(_event("Delete"), ec2=client) == {"PhysicalResourceId": GROUP}
        # The physical id CloudFormation holds is the answer, whatever the properties say.
        event = {**_event("Delete"), "PhysicalResourceId": "sg-0aaaaaaaaaaaaaaaa"}
        assert handler.on_event(event, ec2=client) == {"PhysicalResourceId": "sg-0aaaaaaaaaaaaaaaa"}


def test_an_update_that_cannot_revoke_keeps_its_physical_id() -> None:
    client, stub = _ec2()
    stub.add_client_error("revoke_security_group_egress", "UnauthorizedOperation", "denied")
    event = {**_event("Update"), "PhysicalResourceId": "sg-0aaaaaaaaaaaaaaaa"}
    with stub:
        assert handler.on_event(event, ec2=client) == {"PhysicalResourceId": "sg-0aaaaaaaaaaaaaaaa"}


def test_without_a_client_given_the_handler_makes_an_ec2_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, stub = _ec2()
    _expect(stub, None, None)
    made: list[str] = []

    def make(name: str) -> Any:
        made.append(name)
        return client

    monkeypatch.setattr(handler.boto3, "client", make)
    with stub:
        handler.on_event(_event("Create"))
    assert made == ["ec2"]


@pytest.mark.parametrize(
    ("properties", "accepted"),
    [
        ({}, True),
        ({"DefaultSecurityGroupId": "vpc-0123"}, False),
        ({"DefaultSecurityGroupId": ""}, False),
        ({"Account": ""}, False),
    ],
)
def test_the_properties_must_name_a_group_and_an_account(
    properties: dict[str, str], accepted: bool
) -> None:
    client, stub = _ec2()
    if accepted:
        _expect(stub, None, None)
        with stub:
            handler.on_event(_event("Create", **properties), ec2=client)
        return
    with stub, pytest.raises(handler.RestrictError, match="DefaultSecurityGroupId"):
        handler.on_event(_event("Create", **properties), ec2=client)


# -- where it sits in the deploy ----------------------------------------------------------------


@pytest.fixture(scope="module")
def model(default_app: Synthesized) -> Timeline:
    return schedule(Deploy.from_assembly(default_app.outdir))


def test_the_network_stack_waits_for_no_function(default_app: Synthesized, model: Timeline) -> None:
    """Nothing of the network stack invokes a function (aws-cdk-lib's default-group restriction
    did: role, function, custom resource, 0.7 modelled minutes before the cluster's stack could
    start). It ends with its own network resources."""
    types = {r["Type"] for r in default_app.templates["Network"]["Resources"].values()}
    assert not {t for t in types if t.startswith("Custom::") or t.startswith("AWS::Lambda::")}
    network = model.stacks["stack Network"]
    assert network.end == pytest.approx(1.2)
    assert model.steps[network.after].name.startswith("Network/NetworkVpc")


def test_the_control_plane_does_not_wait_for_the_restriction(
    default_app: Synthesized, model: Timeline
) -> None:
    """The restriction runs beside the control plane and nothing depends on it."""
    resources = default_app.templates["Cluster"]["Resources"]
    (restriction,) = default_app.resources("Cluster", "Custom::DefaultSecurityGroupRestriction")
    for logical_id, resource in resources.items():
        needs = refs(resource.get("Properties", {}))
        depends = resource.get("DependsOn", [])
        assert restriction not in needs and restriction not in depends, logical_id
    done = model.steps[f"Cluster/{restriction}"]
    (cluster,) = default_app.resources("Cluster", "AWS::EKS::Cluster")
    assert done.end < model.steps[f"Cluster/{cluster}"].end
