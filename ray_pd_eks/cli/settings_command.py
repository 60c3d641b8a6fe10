"""``settings``: every setting with its value and where it comes from; ``--set``/``--unset``
write the user's own ``settings.local.json``, which every later command reads.

Writing through the tool rather than by hand validates first: the file is written only if the
configuration every later command will read (without ``-c``) still passes synth's checks.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import EXIT_OK, UsageError
from ray_pd_eks.cli.settings import home_dir, parse_overrides
from ray_pd_eks.config import AppConfig, ConfigError, memory_estimate
from ray_pd_eks.context import (
    LOCAL_SETTINGS_FILE,
    SettingsFileError,
    apply_local,
    cdk_cli_context,
    file_context,
    local_settings,
    setting_sources,
    with_local_settings,
)

NAME = "settings"
HELP = f"show each setting's value and source, or --set/--unset yours in {LOCAL_SETTINGS_FILE}"
DESCRIPTION = f"""\
Without options: every setting, its value as `cdk synth` sees it, and where that value comes
from. The CDK CLI's order, highest first: -c on the command line, {LOCAL_SETTINGS_FILE} (this
app's, git-ignored), cdk.json, cdk.context.json, ~/.cdk.json.

--set KEY=VALUE and --unset KEY change {LOCAL_SETTINGS_FILE} beside cdk.json, so that every
later `npx cdk` command and every command of this tool reads the same value. The result is
validated first, as synth would, and nothing is written if it fails. Lists take JSON or
comma-separated values, as with -c."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="set_pairs",
        metavar="KEY=VALUE",
        help=f"write a setting to {LOCAL_SETTINGS_FILE} (repeatable)",
    )
    parser.add_argument(
        "--unset",
        action="append",
        default=[],
        dest="unset_keys",
        metavar="KEY",
        help=f"remove a setting from {LOCAL_SETTINGS_FILE} (repeatable)",
    )


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def run(app: App) -> int:
    if app.args.set_pairs or app.args.unset_keys:
        return _write(app)
    project = app.args.cdk_json.parent
    home = home_dir(app.runtime.getenv)
    command_line = parse_overrides(app.args.context)
    try:
        sources = setting_sources(project, command_line, home)
        raw = with_local_settings(cdk_cli_context(project, command_line, home), project, home)
    except SettingsFileError as err:
        raise UsageError(str(err)) from None
    keys = AppConfig.context_keys()
    width = max(len(k) for k in keys)
    app.print(
        f"Settings of {project} (highest first: -c, {LOCAL_SETTINGS_FILE}, cdk.json, "
        "cdk.context.json, ~/.cdk.json)"
    )
    for key, name in keys.items():
        value = json.dumps(_json_value(getattr(app.config, name)))
        source = sources.get(key, "default")
        if key == "modelId" and not raw.get(key):
            source += ", empty: derived from modelSource"
        app.print(f"  {key:<{width}}  {value}  [{source}]")
    if estimate := memory_estimate(app.config):
        app.print(f"Engine memory, per replica: {estimate.summary()}")
    return EXIT_OK


def _write(app: App) -> int:
    project = app.args.cdk_json.parent
    path = project / LOCAL_SETTINGS_FILE
    home = home_dir(app.runtime.getenv)
    try:
        local = local_settings(project)
        files = file_context(project, home)
        context = cdk_cli_context(project, {}, home)
    except SettingsFileError as err:
        raise UsageError(str(err)) from None
    changes = []
    for key, raw in parse_overrides(app.args.set_pairs).items():
        try:
            local[key] = _json_value(AppConfig.parse_value(key, raw))
        except ConfigError as err:
            raise UsageError(str(err)) from None
        changes.append(f"set {key} = {json.dumps(local[key])}")
    for key in app.args.unset_keys:
        if key not in local:
            raise UsageError(f"--unset {key}: {path} does not set it")
        del local[key]
        changes.append(f"unset {key} (back to {json.dumps(files.get(key, ''))})")
    try:
        AppConfig.from_context(apply_local(context, local, files))
    except ConfigError as err:
        raise UsageError(f"{path} not changed:\n{err}") from None
    path.write_text(json.dumps(local, indent=2) + "\n", encoding="utf-8")
    app.print(*(f"{LOCAL_SETTINGS_FILE}: {line}" for line in changes))
    app.print("Every later command reads it; apply it with `npx cdk deploy 'RayPdEks/*'`.")
    return EXIT_OK
