"""Telling CloudFormation's rollback Update from a deploy (docs/lifecycle.md).

CloudFormation rolls an updated custom resource back by sending it another Update with the
previous properties; nothing in the event says "rollback". The stack's status does: while it is
``UPDATE_ROLLBACK_IN_PROGRESS`` the Update is the rollback, which must succeed at once or the
stack ends in ``UPDATE_ROLLBACK_FAILED``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

LOG = logging.getLogger(__name__)

ROLLBACK_STATUS = "UPDATE_ROLLBACK_IN_PROGRESS"


def stack_rolling_back(
    event: Mapping[str, Any],
    cloudformation: Any = None,
    *,
    make_client: Callable[[], Any] | None = None,
) -> bool:
    """Whether the event's stack is ``UPDATE_ROLLBACK_IN_PROGRESS``: one ``DescribeStacks`` on
    the event's ``StackId`` (the only stack a handler's role may describe), with
    ``cloudformation``, else a client from ``make_client`` (created only when there is a stack
    to ask about). On an API error the Update is treated as a deploy and the error logged, so a
    CloudFormation blip never fails a deploy; a rollback then behaves as a deploy would."""
    return stack_status(event, cloudformation, make_client=make_client) == ROLLBACK_STATUS


def settled(event: Mapping[str, Any], rollback_key: str) -> dict[str, Any] | None:
    """A waiter's ``is_complete`` answer when there is nothing to poll, else None: a Delete
    completes at once, and so does the rollback Update that ``on_event`` answered at once
    (marked ``rollback_key: "true"`` in its answer), with the Data ``on_event`` gave it."""
    if event.get("RequestType") == "Delete":
        return {"IsComplete": True}
    if event.get(rollback_key) == "true":
        return {"IsComplete": True, "Data": dict(event.get("Data") or {})}
    return None


def stack_status(
    event: Mapping[str, Any],
    cloudformation: Any = None,
    *,
    make_client: Callable[[], Any] | None = None,
) -> str:
    """The status of the event's stack (``StackId``), as :func:`stack_rolling_back` asks for
    it; "" when the event names no stack, the stack is not found, or the call failed (logged):
    the caller decides what not knowing means."""
    stack_id = str(event.get("StackId") or "")
    if not stack_id:
        return ""
    try:
        cfn = cloudformation if cloudformation is not None else _client(make_client)
        stacks = cfn.describe_stacks(StackName=stack_id).get("Stacks") or []
    except Exception as exc:  # botocore's ClientError/BotoCoreError, without importing them
        LOG.warning("DescribeStacks %s failed: %s", stack_id, exc)
        return ""
    status = str(stacks[0].get("StackStatus", "")) if stacks else ""
    LOG.info("stack %s is %s", stack_id, status or "not found")
    return status


def _client(make_client: Callable[[], Any] | None) -> Any:
    if make_client is not None:
        return make_client()
    import boto3  # the Lambda runtime's; imported late so pure callers need no boto3

    return boto3.client("cloudformation")
