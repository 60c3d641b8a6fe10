"""Reading the CDK app's configuration exactly as ``cdk synth`` does.

The tool must check and talk to the deployment the app would create, so it reads the same
``cdk.json`` context block and the same ``-c key=value`` overrides, and validates them with the
same :meth:`AppConfig.from_context`. A value that would fail synth fails here with the same line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray_pd_eks.cli.errors import UsageError
from ray_pd_eks.config import AppConfig, ConfigError

# The repository root: this file is <root>/ray_pd_eks/cli/settings.py.
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CDK_JSON = REPO_ROOT / "cdk.json"


def parse_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``-c key=value`` pairs into a dict; values stay strings, as the CDK CLI passes them."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-c {pair!r}: expected key=value, e.g. -c gpuAz=us-west-2a")
        out[key.strip()] = value
    return out


def _read_object(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} not found: run from the repository or pass --cdk-json") from None
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"{path}: cannot read it as JSON ({err})") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return document


def load_config(cdk_json: Path, overrides: Sequence[str]) -> AppConfig:
    """``cdk.json`` context, then ``cdk.context.json`` beside it, then ``-c`` overrides.

    That is the CDK CLI's precedence. ``cdk.context.json`` holds cached lookups whose keys
    contain ``:`` and are ignored by the config; reading it keeps any user setting there honoured.
    """
    context = _read_object(cdk_json).get("context", {})
    if not isinstance(context, dict):
        raise UsageError(f"{cdk_json}: its 'context' must be a JSON object")
    cached = cdk_json.with_name("cdk.context.json")  # flat: no 'context' wrapper
    if cached.exists():
        context.update(_read_object(cached))
    context.update(parse_overrides(overrides))
    try:
        return AppConfig.from_context(context)
    except ConfigError as err:
        # One line per invalid key is the config's own format; keep it, it names every fix.
        raise UsageError(str(err)) from None
