"""The timeouts and retries of the waiters' AWS clients: every call is bounded, so one poll ends
inside its Lambda's timeout."""

from __future__ import annotations

from botocore.config import Config

CLIENT_CONFIG = Config(
    connect_timeout=5, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}
)
# Worst case of one bounded call: 2 attempts x (5 s connect + 10 s read) + backoff.
SLOWEST_CALL_SECONDS = 35
