"""The Cluster stack as the GPU node stack's waiters read it (the control-plane waiter,
assets/lambda/cluster_active/, and the GPU capacity watch, assets/lambda/capacity/).

The GpuNodes stack deploys beside the Cluster stack, not after it (docs/deploy-timeline.md,
change 14), so both of its waiters stop when the Cluster stack fails in this deploy: one rule
for what "fails in this deploy" means, here. Each caller words its own messages and decides
what an API error means to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# The Cluster stack's operation of this deploy starts beside the GpuNodes stack, at most a few
# minutes before its waiters do (that stack first creates their functions): a failure of an
# operation that began earlier than this is a previous deploy's.
LEAD_SECONDS = 600
# The Cluster stack is failing now, whenever its operation began.
ROLLING_BACK = (
    "ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
)
# The Cluster stack's last operation failed (this deploy's when it began recently).
FAILED = (
    "CREATE_FAILED",
    "ROLLBACK_COMPLETE",
    "ROLLBACK_FAILED",
    "UPDATE_FAILED",
    "UPDATE_ROLLBACK_FAILED",
    "UPDATE_ROLLBACK_COMPLETE",
    "DELETE_FAILED",
)


@dataclass(frozen=True)
class Reading:
    """One ``DescribeStacks`` of the Cluster stack: its status, CloudFormation's reason, and
    when its last operation began (``LastUpdatedTime``, else ``CreationTime``)."""

    status: str
    reason: str
    began: float | None

    def failing(self, *, started: float, also: Iterable[str] = ()) -> bool:
        """Whether the stack is rolling back (or in one of ``also``) now, or its operation of
        this deploy (begun at most ``LEAD_SECONDS`` before ``started``) failed."""
        if self.status in ROLLING_BACK or self.status in tuple(also):
            return True
        this_deploy = self.began is None or self.began >= started - LEAD_SECONDS
        return self.status in FAILED and this_deploy

    @property
    def failed_earlier(self) -> bool:
        """Failed, but (when :meth:`failing` said no) in an earlier deploy."""
        return self.status in FAILED


def read(cloudformation: Any, name: str) -> Reading | None:
    """The stack ``name``, or None when there is no such stack (CloudFormation's
    ``ValidationError`` "does not exist", or no stack in the answer). Every other
    ``ClientError`` and ``BotoCoreError`` is the caller's to judge."""
    try:
        stacks = cloudformation.describe_stacks(StackName=name).get("Stacks") or []
    except Exception as exc:  # botocore's ClientError, without importing botocore here
        error = getattr(exc, "response", {}).get("Error", {})
        if "does not exist" in str(error.get("Message", "")):
            return None
        raise
    if not stacks:
        return None
    stack = stacks[0]
    return Reading(
        status=str(stack.get("StackStatus") or "UNKNOWN"),
        reason=str(stack.get("StackStatusReason") or "no reason given"),
        began=_epoch(stack.get("LastUpdatedTime")) or _epoch(stack.get("CreationTime")),
    )


def _epoch(value: Any) -> float | None:
    # botocore parses every timestamp member into a datetime (parsers.DEFAULT_TIMESTAMP_PARSER,
    # utils.parse_timestamp, botocore 1.44); a missing one is None.
    return value.timestamp() if isinstance(value, datetime) else None
