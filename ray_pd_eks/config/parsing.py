"""Context values as their settings' types: ``cdk.json`` gives typed JSON, ``-c`` gives strings,
and both must read the same. Also the CIDR reading the network rules share.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value.strip()


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("expected a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    raise TypeError("expected a whole number")


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("expected a number")
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise TypeError("expected a number") from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise TypeError("expected true or false")


def _as_str_list(value: Any) -> tuple[str, ...]:
    """A JSON list, or from ``-c`` a JSON list or a comma-separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise TypeError(
                    'not a JSON list: quote each item, \'["a", "b"]\' (single quotes around '
                    "it in the shell), or give them comma-separated, a,b"
                ) from None
        else:
            items = tuple(v.strip() for v in text.split(",") if v.strip())
            if any(len(item.split()) > 1 for item in items):
                raise TypeError("separate the items with commas, not spaces: a,b")
            return items
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value)
    raise TypeError("expected a list of strings (JSON list or comma-separated)")


PARSERS: dict[type | str, Callable[[Any], Any]] = {
    "str": _as_str,
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "tuple[str, ...]": _as_str_list,
}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


HOST_BITS = "host bits are set"


def read_cidr(text: str, example: str) -> tuple[ipaddress.IPv4Network | None, str]:
    """The network, or None and why not: host bits set is its own reason (the fix is the
    network address), everything else reads "not a CIDR"."""
    not_a_cidr = f"each entry must be an IPv4 CIDR such as {example}"
    if "/" not in text:
        return None, not_a_cidr
    try:
        return ipaddress.IPv4Network(text, strict=True), ""
    except ValueError:
        pass
    try:
        network = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        return None, not_a_cidr
    return None, f"{HOST_BITS}: the network of this CIDR is {network}"
