"""Stops a deploy whose fixed-name log groups are left over from an earlier deployment.

EKS and the CloudWatch add-on write to log groups whose names the deployment cannot choose
(``/aws/eks/<cluster>/cluster``, ``/aws/containerinsights/<cluster>/...``); the stacks create
them first, with retention. ``retainLogs=true`` keeps them on destroy, so the next create of
the same cluster name fails on "already exists", deep in the deploy, after the NAT gateway and
the control plane have started billing. This check runs first in the network stack, before
the VPC, and fails the deploy at once with the command that deletes each leftover.

* Create: every name in ``LogGroupNames`` (comma-separated) that exists fails the deploy,
  naming it and its delete command (export first with ``aws logs create-export-task``).
* Update: logs what it finds, never fails. An Update comes from changed names (observability
  switched on) or from CloudFormation's rollback, which must succeed at once
  (docs/lifecycle.md); the names of a running deployment exist and are its own.
* Delete: nothing.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3
and the shared layer (``pd_lambda``). Properties (strings): ``LogGroupNames``, ``Region``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pd_lambda import props as props_helpers

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

MAX_REASON_CHARS = 900
PHYSICAL_ID = "log-groups-free"


class LeftoverLogGroups(RuntimeError):
    """Log groups of an earlier deployment block this one; the message is the reason."""


def existing(logs: Any, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that exist as log groups (exact match)."""
    found = []
    for name in names:
        groups = logs.describe_log_groups(logGroupNamePrefix=name).get("logGroups", [])
        if any(g.get("logGroupName") == name for g in groups):
            found.append(name)
    return found


def reason(found: list[str], region: str) -> str:
    deletes = "; ".join(
        f"aws logs delete-log-group --log-group-name {name} --region {region}" for name in found
    )
    return props_helpers.one_line(
        f"log group(s) {', '.join(found)} already exist, kept by retainLogs from an earlier "
        "deployment of this cluster name: creating them again would fail later, after the NAT "
        "gateway and the cluster had started. Nothing that bills was created. Export what you "
        f"need (aws logs create-export-task), then delete them and deploy again: {deletes}",
        MAX_REASON_CHARS,
    )


def on_event(event: Mapping[str, Any], context: Any = None, logs: Any = None) -> dict[str, Any]:
    request = str(event.get("RequestType"))
    properties = event.get("ResourceProperties") or {}
    names = [n for n in str(properties.get("LogGroupNames") or "").split(",") if n]
    region = str(properties.get("Region") or "")
    physical_id = str(event.get("PhysicalResourceId") or PHYSICAL_ID)
    if request == "Delete":
        return {"PhysicalResourceId": physical_id}
    logs = logs or boto3.client("logs")
    try:
        found = existing(logs, names)
    except (ClientError, BotoCoreError) as exc:
        if request == "Update":
            LOG.warning("Update: log groups not checked: %s", exc)
            return {"PhysicalResourceId": physical_id}
        raise LeftoverLogGroups(
            props_helpers.one_line(f"checking for leftover log groups failed: {exc}", 300)
        ) from exc
    if found and request == "Create":
        raise LeftoverLogGroups(reason(found, region))
    LOG.info("%s: existing log groups %s", request, found or "none")
    return {"PhysicalResourceId": physical_id}
