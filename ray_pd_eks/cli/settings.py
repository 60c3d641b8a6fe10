"""Reading the CDK app's configuration exactly as ``cdk synth`` does.

The tool must check and talk to the deployment the app would create, so it builds the context
the CDK CLI would hand the app (``-c`` over ``cdk.json`` over ``cdk.context.json`` over
``~/.cdk.json``), applies ``settings.local.json`` through the same function as ``app.py``
(:mod:`ray_pd_eks.context`), and validates the result with the same
:meth:`AppConfig.from_context`. A value that would fail synth fails here with the same line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ray_pd_eks.cli.errors import UsageError
from ray_pd_eks.config import CLI_NAME, AppConfig, ConfigError
from ray_pd_eks.context import (
    LOCAL_SETTINGS_FILE,
    SettingsFileError,
    cdk_cli_context,
    setting_sources,
    with_local_settings,
)
from ray_pd_eks.pipeline_config import pipeline_from_context

# The repository root: this file is <root>/ray_pd_eks/cli/settings.py.
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CDK_JSON = REPO_ROOT / "cdk.json"


def parse_overrides(pairs: Sequence[str], flag: str = "-c") -> dict[str, str]:
    """``-c key=value`` pairs into a dict; values stay strings, as the CDK CLI passes them.
    ``flag`` names the option in the error (``--set``, ``--add``...). A key given twice is
    refused: which of the two was meant is not for the tool to guess."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key.strip():
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} gpuAz=us-west-2a")
        if not sep:
            also = (
                f" (to remove it from {LOCAL_SETTINGS_FILE}: --unset {key})"
                if flag == "--set"
                else ""
            )
            raise UsageError(
                f"{flag} {pair}: no '=': expected {flag} {pair}=VALUE, e.g. "
                f"{flag} gpuAz=us-west-2a{also}"
            )
        key = key.strip()
        if key in out:
            raise UsageError(
                f"{flag} {key}={out[key]} and {flag} {pair}: {key} given twice; give it once, "
                "with the value you mean"
            )
        out[key] = value
    return out


_KEY_OF_PROBLEM = re.compile(r"^context key '([^']+)'")


def with_sources(message: str, sources: Mapping[str, str]) -> str:
    """Each ``context key 'K' = ...`` line of a ConfigError, followed by where K's value comes
    from, so a bad value in a file is found in that file (and repaired with the tool)."""
    lines = []
    for line in message.splitlines():
        match = _KEY_OF_PROBLEM.match(line)
        source = sources.get(match.group(1)) if match else None
        if source == LOCAL_SETTINGS_FILE:
            key = match.group(1) if match else ""
            line += (
                f" [this value is in {LOCAL_SETTINGS_FILE}; `{CLI_NAME} settings --unset {key}` "
                "removes it]"
            )
        elif source:
            line += f" [this value is from {source}]"
        lines.append(line)
    return "\n".join(lines)


def home_dir(getenv: Callable[[str], str | None]) -> Path | None:
    """Where the CDK CLI looks for ``~/.cdk.json`` (Node's ``os.homedir()``: ``$HOME``)."""
    home = getenv("HOME") or getenv("USERPROFILE")
    return Path(home) if home else None


def load_context(
    cdk_json: Path, overrides: Sequence[str], getenv: Callable[[str], str | None]
) -> dict[str, object]:
    """The context ``cdk synth`` would build the app from, in the directory of ``cdk_json``."""
    if not cdk_json.is_file():
        raise UsageError(f"{cdk_json} not found: run from the repository or pass --cdk-json")
    project_dir = cdk_json.parent
    home = home_dir(getenv)
    try:
        context = cdk_cli_context(project_dir, parse_overrides(overrides), home)
        return with_local_settings(context, project_dir, home)
    except SettingsFileError as err:
        raise UsageError(str(err)) from None


def load_environment_config(
    cdk_json: Path, overrides: Sequence[str], name: str, getenv: Callable[[str], str | None]
) -> AppConfig:
    """The configuration the pipeline deploys to its environment ``name``: cdk.json's context
    (and ``-c``) with that environment's overrides, account and region, as the pipeline's own
    synth builds it, so without settings.local.json."""
    if not cdk_json.is_file():
        raise UsageError(f"{cdk_json} not found: run from the repository or pass --cdk-json")
    try:
        context = cdk_cli_context(cdk_json.parent, parse_overrides(overrides), home_dir(getenv))
        pipeline = pipeline_from_context(context, AppConfig.from_context(context))
    except (SettingsFileError, ConfigError) as err:
        raise UsageError(f"--env {name}: {err}") from None
    if pipeline is None:
        raise UsageError(
            f"--env {name}: cdk.json declares no pipeline ('pipeline' and 'environments', "
            "docs/pipeline.md); without --env the commands use your own settings"
        )
    names = [env.name for env in pipeline.environments]
    if name not in names:
        raise UsageError(
            f"--env {name}: no such pipeline environment; cdk.json declares {', '.join(names)}"
        )
    return pipeline.environments[names.index(name)].config


def load_config(
    cdk_json: Path, overrides: Sequence[str], getenv: Callable[[str], str | None]
) -> AppConfig:
    """The validated configuration ``cdk synth`` would build from the same files and ``-c``."""
    context = load_context(cdk_json, overrides, getenv)
    try:
        return AppConfig.from_context(context)
    except ConfigError as err:
        # One line per invalid key is the config's own format; keep it, it names every fix,
        # and say where each bad value comes from.
        try:
            sources = setting_sources(cdk_json.parent, parse_overrides(overrides), home_dir(getenv))
        except SettingsFileError:
            sources = {}
        raise UsageError(with_sources(str(err), sources)) from None
