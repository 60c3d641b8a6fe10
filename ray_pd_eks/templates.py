"""YAML under ``assets/``: loading Helm values and filling manifest templates.

Templates mark a placeholder as ``${NAME}``. A scalar that is exactly one placeholder takes the
value's own type (number, boolean, list, mapping); inside a longer string the value is
formatted as text. The set of names is closed both ways: a placeholder without a value, or a
value without a placeholder, fails synthesis, so template and code cannot drift apart.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ASSETS = Path(__file__).resolve().parent.parent / "assets"
_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


class TemplateError(ValueError):
    """A template and the values given for it do not match."""


def load_yaml(relative: str) -> Any:
    """Parse one YAML document under ``assets/`` (a copy of its own for each caller)."""
    return copy.deepcopy(_parsed(relative))


@functools.cache
def _parsed(relative: str) -> Any:
    # Once per file and process: a synth renders the same few files many times over, and
    # PyYAML's parser takes ~50 ms for the RayService template.
    return yaml.safe_load((ASSETS / relative).read_text(encoding="utf-8"))


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings recursively, anything else replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def placeholders(node: Any) -> set[str]:
    """Every placeholder name used anywhere in a parsed template."""
    if isinstance(node, str):
        return set(_PLACEHOLDER.findall(node))
    if isinstance(node, Mapping):
        return {n for k, v in node.items() for n in placeholders(k) | placeholders(v)}
    if isinstance(node, list):
        return {n for item in node for n in placeholders(item)}
    return set()


def _fill(node: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(node, str):
        whole = _PLACEHOLDER.fullmatch(node)
        if whole:
            return copy.deepcopy(values[whole.group(1)])
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), node)
    if isinstance(node, Mapping):
        return {_fill(k, values): _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(item, values) for item in node]
    return node


def render(relative: str, values: Mapping[str, Any]) -> Any:
    """Load the template ``assets/<relative>`` and fill it; fail on any name mismatch."""
    template = load_yaml(relative)
    used = placeholders(template)
    missing = sorted(used - set(values))
    unused = sorted(set(values) - used)
    if missing or unused:
        raise TemplateError(
            f"template assets/{relative}: placeholders without a value: {missing or 'none'}; "
            f"values without a placeholder: {unused or 'none'}"
        )
    return _fill(template, values)


def render_from(relative: str, available: Mapping[str, Any]) -> Any:
    """Fill a template that belongs to a family of files sharing one closed set of names
    (``available``): each file uses the names it needs; a name outside the set fails."""
    template = load_yaml(relative)
    unknown = sorted(placeholders(template) - set(available))
    if unknown:
        raise TemplateError(
            f"template assets/{relative}: placeholders outside the set its code fills: "
            f"{unknown}; known: {sorted(available)}"
        )
    return _fill(template, available)
