"""Removes the default rules of a VPC's default security group, so the group allows nothing.

EC2 gives every VPC a default security group with two rules: all traffic in from the group's
own members, all traffic out to 0.0.0.0/0. Nothing of ray-pd-eks uses the group; stripping
the rules keeps anything put into it by mistake from talking at all. This handler revokes
exactly those two rules, as aws-cdk-lib's ``restrictDefaultSecurityGroup`` handler does
(aws-cdk-lib 2.275, ``custom-resource-handlers/dist/aws-ec2/restrict-default-security-group-
handler``: the same two ``IpPermissions``, ``InvalidPermission.NotFound`` tolerated). It runs
in the cluster's stack, beside the control plane, instead of in the network stack, which
would otherwise wait for this function before the cluster's stack could start
(docs/deploy-timeline.md).

* Create: revokes both rules; a rule already gone is fine, any other EC2 error fails the
  deploy with EC2's message.
* Update: the same, but an error is logged, never raised. An Update comes only from a changed
  property, and the two (the VPC's group and account) never change for a VPC; should one come
  anyway, or CloudFormation's rollback Update of it (which must succeed at once:
  docs/lifecycle.md), revoking again is what both states want.
* Delete: does nothing. aws-cdk-lib's handler puts the two rules back, which matters only
  when the restriction is switched off; here it is not a setting. On ``cdk destroy`` the
  network stack deletes the VPC, and its default group with it, after this stack. On the
  rollback of a deploy that created this resource, the group stays restricted.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3
and the shared layer (``pd_lambda``). Properties (strings): ``DefaultSecurityGroupId``,
``Account`` (the VPC's account: the ingress rule names its group as ``<account>/<group>``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import props as props_helpers

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

NOT_FOUND = "InvalidPermission.NotFound"
MAX_REASON_CHARS = 900


class RestrictError(RuntimeError):
    """A failure CloudFormation shows as the reason (one line)."""


def ingress_rule(group_id: str, account: str) -> dict[str, Any]:
    """The default group's ingress rule: all traffic from its own members."""
    return {
        "GroupId": group_id,
        "IpPermissions": [
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "UserId": account}]}
        ],
    }


def egress_rule(group_id: str) -> dict[str, Any]:
    """The default group's egress rule: all traffic to anywhere (IPv4)."""
    return {
        "GroupId": group_id,
        "IpPermissions": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    }


def _revoke(call: Any, request: Mapping[str, Any]) -> bool:
    """One revoke; False when the rule was not there (EC2's ``InvalidPermission.NotFound``)."""
    try:
        call(**request)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == NOT_FOUND:
            return False
        raise
    return True


def restrict(ec2: Any, group_id: str, account: str) -> list[str]:
    """Revoke both default rules of ``group_id``; the names of the rules that were there."""
    revoked = []
    if _revoke(ec2.revoke_security_group_egress, egress_rule(group_id)):
        revoked.append("egress to 0.0.0.0/0")
    if _revoke(ec2.revoke_security_group_ingress, ingress_rule(group_id, account)):
        revoked.append("ingress from the group")
    LOG.info("default security group %s: revoked %s", group_id, revoked or "nothing")
    return revoked


def on_event(event: Mapping[str, Any], context: Any = None, ec2: Any = None) -> dict[str, Any]:
    request = str(event.get("RequestType"))
    properties = event.get("ResourceProperties") or {}
    group_id = str(properties.get("DefaultSecurityGroupId") or "")
    account = str(properties.get("Account") or "")
    physical_id = str(event.get("PhysicalResourceId") or group_id)
    if request == "Delete":
        LOG.info("Delete: default security group %s left as it is", physical_id)
        return {"PhysicalResourceId": physical_id}
    if not group_id.startswith("sg-") or not account:
        raise RestrictError(
            f"DefaultSecurityGroupId {group_id!r} and Account {account!r}: expected a "
            "security group id (sg-...) and an account id"
        )
    ec2 = ec2 or boto3.client("ec2")
    try:
        restrict(ec2, group_id, account)
    except (ClientError, BotoCoreError) as exc:
        if request == "Update":
            LOG.warning("Update of %s: rules not revoked again: %s", group_id, exc)
            return {"PhysicalResourceId": physical_id}
        raise RestrictError(
            props_helpers.one_line(
                f"revoking the default rules of {group_id} failed: {exc}", MAX_REASON_CHARS
            )
        ) from exc
    return {"PhysicalResourceId": group_id}
