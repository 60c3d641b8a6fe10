"""What every preflight check has: the AWS session, the settings and the clock, and a call that
turns an access error into a finding's reason (:mod:`ray_pd_eks.cli.aws`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ray_pd_eks.cli.aws import Aws
from ray_pd_eks.config import AppConfig


class Checks:
    """The state the check groups share; each group yields findings and never raises for an
    expected answer."""

    def __init__(
        self, aws: Aws, config: AppConfig, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.aws = aws
        self.config = config
        self.now = now
        self.vcpus: int | None = None  # from describe_instance_types, used by the quota check

    def _call(self, action: str, fn: Callable[[], Any]) -> Any:
        with self.aws.errors(action):
            return fn()
