"""Where settings come from: the CDK CLI's context sources, plus the user's own settings file.

The CDK CLI hands the app one merged context. Its precedence, highest first (aws-cdk 2.1148,
``Configuration.loadConfigFiles``: a ``Context`` whose ``get`` returns the first bag holding
the key):

1. ``-c key=value`` on the command line (always a string);
2. the ``context`` block of ``cdk.json`` (the project's defaults of every setting);
3. ``cdk.context.json`` (the CDK's cache of lookups, flat);
4. the ``context`` block of ``~/.cdk.json`` (the user's defaults for every CDK app).

Because ``cdk.json`` states a default for every setting, levels 3 and 4 can never change one.
So this app adds one level of its own between 1 and 2: ``settings.local.json`` beside
``cdk.json``, git-ignored, a flat JSON object of settings (the user's account, admins, IP,
GPU type...). Every command reads it: ``app.py`` applies it to the context the CDK CLI hands
over, and the operations CLI builds the same context and applies it through the same function.

The app cannot see which values came from ``-c``; a context value that differs from what the
files alone give must have come from ``-c``, so it wins. The one ambiguous case, ``-c`` naming
exactly the value the files already give, is treated as "no ``-c``": the local file wins there,
in ``cdk synth`` and in the CLI alike (docs/settings.md says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOCAL_SETTINGS_FILE = "settings.local.json"
PROJECT_CONFIG_FILE = "cdk.json"
PROJECT_CONTEXT_FILE = "cdk.context.json"
USER_CONFIG_FILE = ".cdk.json"  # in the home directory
# Declared where the pipeline's own synth (CodeBuild, from the repository) can read them.
NOT_LOCAL = ("pipeline", "environments")


class SettingsFileError(ValueError):
    """A settings or context file cannot be used; the message names the file and the fix."""


def likely_json_mistake(text: str, err: json.JSONDecodeError) -> str:
    """What a hand-edited JSON file most likely got wrong where ``err`` says it stopped."""
    ahead = text[err.pos : err.pos + 2]
    behind = text[: err.pos].rstrip()
    if ahead in ("//", "/*") or ahead[:1] == "#":
        return "a comment (JSON has none): remove it"
    if behind.endswith(",") and ahead[:1] in ("}", "]"):
        return f"a trailing comma before '{ahead[:1]}' (JSON allows none): remove it"
    if ahead[:1] == "'":
        return "single quotes: JSON strings and keys take double quotes"
    if err.msg.startswith("Expecting ',' delimiter"):
        return "a missing comma between two entries, or an unquoted value"
    if err.msg.startswith("Expecting value") and not text[err.pos :].strip():
        return "the file ends early: an unclosed '{', '[' or string"
    return err.msg


def read_json_object(path: Path, *, required: bool = False, repair: str = "") -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when it does not exist and is not required.

    UTF-8, with or without a byte-order mark (as some Windows editors save). An invalid file is
    a :class:`SettingsFileError` naming the line and column, the likely mistake and ``repair``
    (how to get a working file back)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
        document = json.loads(text)
    except FileNotFoundError:
        if required:
            raise SettingsFileError(f"{path} not found") from None
        return {}
    except json.JSONDecodeError as err:
        where = f"{path}, line {err.lineno}, column {err.colno}"
        fix = f"; {repair}" if repair else ""
        raise SettingsFileError(
            f"{where}: not valid JSON: {likely_json_mistake(text, err)}{fix}"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SettingsFileError(f"{path}: cannot read it as UTF-8 JSON ({err})") from None
    if not isinstance(document, dict):
        raise SettingsFileError(f"{path}: expected a JSON object")
    return document


def _context_block(path: Path, *, required: bool = False) -> dict[str, Any]:
    block = read_json_object(path, required=required).get("context", {})
    if not isinstance(block, dict):
        raise SettingsFileError(f"{path}: its 'context' must be a JSON object")
    return block


def file_context(project_dir: Path, home: Path | None) -> dict[str, Any]:
    """What the CDK CLI's context files give, without ``-c``: cdk.json over cdk.context.json
    over ~/.cdk.json (``home`` None: no user file)."""
    layers = [
        _context_block(home / USER_CONFIG_FILE) if home else {},
        read_json_object(project_dir / PROJECT_CONTEXT_FILE),
        _context_block(project_dir / PROJECT_CONFIG_FILE, required=True),
    ]
    merged: dict[str, Any] = {}
    for layer in layers:  # lowest first
        merged.update(layer)
    return merged


def cdk_cli_context(
    project_dir: Path, command_line: Mapping[str, str], home: Path | None
) -> dict[str, Any]:
    """The context the CDK CLI would hand the app for these ``-c`` pairs."""
    return {**file_context(project_dir, home), **command_line}


def local_settings(project_dir: Path) -> dict[str, Any]:
    """``settings.local.json`` (``{}`` when absent), checked for keys it must not hold."""
    path = project_dir / LOCAL_SETTINGS_FILE
    repair = (
        f"fix it in an editor, or move it aside (mv {LOCAL_SETTINGS_FILE} "
        f"{LOCAL_SETTINGS_FILE}.broken) and set your values again with `ray-pd-eks settings "
        "--set`"
    )
    settings = read_json_object(path, repair=repair)
    for key in NOT_LOCAL:
        if key in settings:
            raise SettingsFileError(
                f"{path}: '{key}' belongs in cdk.json, where the pipeline's own synth reads "
                f"it; {LOCAL_SETTINGS_FILE} is not in the repository"
            )
    return settings


def with_local_settings(
    context: Mapping[str, Any], project_dir: Path, home: Path | None
) -> dict[str, Any]:
    """``context`` (as the CDK CLI merged it) with ``settings.local.json`` applied below ``-c``."""
    local = local_settings(project_dir)
    if not local:
        return dict(context)
    return apply_local(context, local, file_context(project_dir, home))


def apply_local(
    context: Mapping[str, Any], local: Mapping[str, Any], files: Mapping[str, Any]
) -> dict[str, Any]:
    """A local setting replaces the context's value unless that value came from ``-c``, i.e.
    unless it differs from what the context files alone give (``files``)."""
    out = dict(context)
    for key, value in local.items():
        if _local_wins(key, context, files):
            out[key] = value
    return out


def _local_wins(key: str, context: Mapping[str, Any], files: Mapping[str, Any]) -> bool:
    return key not in context or (key in files and context[key] == files[key])


def setting_sources(
    project_dir: Path, command_line: Mapping[str, str], home: Path | None
) -> dict[str, str]:
    """Key -> where its value comes from, as :func:`with_local_settings` decides it."""
    files = file_context(project_dir, home)
    local = local_settings(project_dir)
    layers = (
        (PROJECT_CONFIG_FILE, _context_block(project_dir / PROJECT_CONFIG_FILE, required=True)),
        (PROJECT_CONTEXT_FILE, read_json_object(project_dir / PROJECT_CONTEXT_FILE)),
        (f"~/{USER_CONFIG_FILE}", _context_block(home / USER_CONFIG_FILE) if home else {}),
    )
    context = cdk_cli_context(project_dir, command_line, home)
    sources: dict[str, str] = {}
    for key in apply_local(context, local, files):
        if key in local and _local_wins(key, context, files):
            sources[key] = LOCAL_SETTINGS_FILE
        elif key in command_line:
            sources[key] = "-c"
        else:
            sources[key] = next(name for name, layer in layers if key in layer)
    return sources
