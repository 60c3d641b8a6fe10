"""How a handler's message tells a person to change a setting: the project's ``settings``
command, which writes settings.local.json so every later command (the next deploy too) sees
the value (docs/settings.md). CloudFormation shows the message as the failure's reason.

The same text as ``ray_pd_eks.config.set_hint``; the handlers cannot import the project, so
this is a copy, and tests/test_setting_hints.py fails when the two differ.
"""

from __future__ import annotations

SET_COMMAND = "ray-pd-eks settings --set"


def set_hint(key: str, value: str = "...") -> str:
    """``\\`ray-pd-eks settings --set key=value\\```."""
    return f"`{SET_COMMAND} {key}={value}`"
