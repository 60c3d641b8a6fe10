"""How a bad setting is reported: :class:`ConfigError`, the one-line problem every rule writes,
the command each line offers as the fix, and the rows of the rule tables (:class:`Bounds`,
:class:`OneOf`, :class:`Form`) for the settings whose rule is a plain range, choice or form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

CLI_NAME = "ray-pd-eks"  # the operations CLI's console script (ray_pd_eks/console.py)
# How a user changes a setting for good: the settings command writes settings.local.json, which
# every later command reads (docs/settings.md). `-c key=value` lasts one command only, so no
# hint offers it as the fix. The handlers' copy is pd_lambda/settings_hint.py (a test pins it).
SETTINGS_SET = f"{CLI_NAME} settings --set"


class ConfigError(ValueError):
    """One or more context values are invalid; each line names the key, the value and the fix."""


def set_hint(key: str, value: str = "...") -> str:
    """The command that sets ``key`` to ``value``, as every warning and error shows it, in
    backticks: ``ray-pd-eks settings --set key=value``."""
    return f"`{SETTINGS_SET} {key}={value}`"


def problem(key: str, value: Any, why: str, *, fix_key: str | None = None) -> str:
    """One line: the key and value as given, why they are wrong, and where to set the fix
    (``fix_key``: the setting to set instead, for an unknown key)."""
    shown = json.dumps(value)
    fix = fix_key or key
    return (
        f"context key '{key}' = {shown}: {why} "
        f"(fix it with {set_hint(fix)}, or -c {fix}=... for one command)"
    )


# -- rule tables: a row names a setting by its context key and says what it must be ----------

# A rule: the problem lines of one configuration (none when it is valid). Rows of the tables
# below are rules too.
Rule = Callable[[Any], list[str]]


def check(rules: Iterable[Rule], config: Any) -> list[str]:
    """The problem lines of every rule, in order."""
    return [line for rule in rules for line in rule(config)]


def setting(config: Any, key: str) -> Any:
    """The value of context key ``key`` (``fooBar`` is field ``foo_bar``)."""
    return getattr(config, re.sub(r"([A-Z])", r"_\1", key).lower())


@dataclass(frozen=True)
class Bounds:
    """A number that must lie in ``low``..``high``, both included, or be 0 when ``zero_ok``
    (where 0 means off, or automatic). ``why`` is the reason its line gives."""

    key: str
    low: float
    high: float
    why: str
    zero_ok: bool = False

    def __call__(self, config: Any) -> list[str]:
        value = setting(config, self.key)
        if (self.zero_ok and value == 0) or self.low <= value <= self.high:
            return []
        return [problem(self.key, value, self.why)]


@dataclass(frozen=True)
class OneOf:
    """A setting that must be one of ``allowed``."""

    key: str
    allowed: Collection[Any]
    why: str

    def __call__(self, config: Any) -> list[str]:
        value = setting(config, self.key)
        return [] if value in self.allowed else [problem(self.key, value, self.why)]


@dataclass(frozen=True)
class Form:
    """An optional text setting: empty, or matching ``pattern``."""

    key: str
    pattern: re.Pattern[str]
    why: str

    def __call__(self, config: Any) -> list[str]:
        value = setting(config, self.key)
        if not value or self.pattern.match(value):
            return []
        return [problem(self.key, value, self.why)]
