"""Reading a custom resource's event: properties (CloudFormation delivers every one as a
string), the start time a waiter keeps in its event, the time its Lambda run has left, and
reasons that fit on one line."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

E = TypeVar("E", bound=Exception)


def require(
    properties: Mapping[str, Any],
    keys: Sequence[str],
    *,
    construct: str,
    error: type[Exception] = ValueError,
) -> None:
    """Raises ``error`` naming each of ``keys`` that ``properties`` lacks (missing or empty),
    and that the ``construct`` that creates the resource must pass them all."""
    missing = [key for key in keys if properties.get(key) in (None, "")]
    if missing:
        raise error(
            "ResourceProperties missing " + ", ".join(missing) + f"; the {construct} "
            "construct must pass all of " + ", ".join(keys)
        )


def positive_int(
    properties: Mapping[str, Any],
    key: str,
    *,
    error: type[Exception] = ValueError,
    default: int | None = None,
) -> int:
    """``properties[key]`` as a whole number of at least 1 (tests and direct calls may pass
    ints); ``default`` when it is missing or empty and a default is given; else raises
    ``error`` naming the key and the value."""
    raw = properties.get(key)
    if raw in (None, "") and default is not None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise error(f"{key} must be a positive whole number, got {raw!r}")
    return value


def started_at(event: Mapping[str, Any], key: str, now: float) -> float:
    """When the wait began: the epoch seconds the on-event handler stored under ``key``, or
    ``now`` when it is missing or unreadable (the first poll)."""
    try:
        return float(event.get(key) or now)
    except (TypeError, ValueError):
        return now


def time_left(context: Any) -> Callable[[], float] | None:
    """Seconds this Lambda run has left, as a function of the ``context`` Lambda passes (None
    when it cannot tell: a test, or a direct call without a context)."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining_ms):
        return None
    return lambda: float(remaining_ms()) / 1000.0


def one_line(text: Any, limit: int) -> str:
    """``text`` with every run of whitespace made one space, cut to ``limit`` characters
    (ending in ``...`` when cut): CloudFormation shows a failure's reason on one line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def poll_failed(error: type[E], text: Any, limit: int) -> E:
    """``error`` whose message is ``text`` on one line (:func:`one_line`), logged as the poll's
    terminal failure: a waiter's ``is_complete`` raises what this returns."""
    message = one_line(text, limit)
    logging.getLogger().error("poll: FAILED: %s", message)
    return error(message)
