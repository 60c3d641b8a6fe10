"""``settings``: every setting with its value and where it comes from; ``--set``/``--unset``
write the user's own ``settings.local.json``, which every later command reads.

Writing through the tool rather than by hand validates first: the file is written only if the
configuration every later command will read (without ``-c``) still passes synth's checks.
"""

from __future__ import annotations

import argparse
import difflib
import json
from dataclasses import replace
from typing import Any

from ray_pd_eks import cross_stack
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.aws import same_name_other_path, same_principal
from ray_pd_eks.cli.errors import EXIT_OK, UsageError, deploy_command
from ray_pd_eks.cli.settings import home_dir, load_config, parse_overrides
from ray_pd_eks.config import CLI_NAME, AppConfig, ConfigError, config_warnings, memory_estimate
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
NEEDS_CONFIG = False  # it must read, and repair, a file whose values do not validate
HELP = f"show each setting's value and source, or --set/--unset yours in {LOCAL_SETTINGS_FILE}"
DESCRIPTION = f"""\
Without options: every setting, its value as `cdk synth` sees it, and where that value comes
from. The CDK CLI's order, highest first: -c on the command line, {LOCAL_SETTINGS_FILE} (this
app's, git-ignored), cdk.json, cdk.context.json, ~/.cdk.json.

--set KEY=VALUE, --unset KEY, --add/--remove KEY=ITEM (list settings) and --add-admin-me change
{LOCAL_SETTINGS_FILE} beside cdk.json, so that every later `npx cdk` command and every command
of this tool reads the same value. They work on a file that holds an invalid value (that is how
to repair it); the result is validated as synth would, and nothing is written if it fails.
Lists take JSON or comma-separated values, as with -c. An empty list is refused from --set
(and an empty adminPrincipalArns from --remove) unless --allow-empty says it is meant:
an empty adminPrincipalArns means nobody can administer the cluster."""

ADMINS = "adminPrincipalArns"


# The repeatable edits of the local settings file: option, destination, argument, help.
EDITS = (
    (
        "--set",
        "set_pairs",
        "KEY=VALUE",
        f"write a setting to {LOCAL_SETTINGS_FILE} (repeatable); a list's whole value",
    ),
    ("--unset", "unset_keys", "KEY", f"remove a setting from {LOCAL_SETTINGS_FILE} (repeatable)"),
    (
        "--add",
        "add_pairs",
        "KEY=ITEM",
        "append items to a list setting, keeping its current ones (repeatable)",
    ),
    ("--remove", "remove_pairs", "KEY=ITEM", "remove items from a list setting (repeatable)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for option, dest, metavar, text in EDITS:
        parser.add_argument(
            option, action="append", default=[], dest=dest, metavar=metavar, help=text
        )
    parser.add_argument(
        "--add-admin-me",
        action="store_true",
        help=f"add your own IAM role or user to {ADMINS}, with the role's path "
        "(sts:GetCallerIdentity, then iam:GetRole)",
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help=f"allow --set/--remove to leave a list empty (an empty {ADMINS}: no admin at all)",
    )


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _writes(app: App) -> bool:
    a = app.args
    return bool(a.set_pairs or a.unset_keys or a.add_pairs or a.remove_pairs or a.add_admin_me)


def run(app: App) -> int:
    if _writes(app):
        return _write(app)
    project = app.args.cdk_json.parent
    home = home_dir(app.runtime.getenv)
    command_line = parse_overrides(app.args.context)
    config = load_config(app.args.cdk_json, app.args.context, app.runtime.getenv)
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
        value = json.dumps(_json_value(getattr(config, name)))
        source = sources.get(key, "default")
        if key == "modelId" and not raw.get(key):
            source += ", empty: derived from modelSource"
        if key == "clusterName" and config.deployment_name:
            source += ", prefixed by deploymentName"
        app.print(f"  {key:<{width}}  {value}  [{source}]")
    if estimate := memory_estimate(config):
        app.print(f"Engine memory, per replica: {estimate.summary()}")
    for _, text in config_warnings(config):
        app.warn(f"WARNING {text}")
    return EXIT_OK


def _parse(key: str, raw: Any) -> Any:
    try:
        return AppConfig.parse_value(key, raw)
    except ConfigError as err:
        raise UsageError(str(err)) from None


def _list_key(flag: str, key: str) -> None:
    if key not in AppConfig.context_keys():
        _parse(key, "")  # an unknown key fails here, with its did-you-mean
    if not isinstance(AppConfig.field_defaults()[key], list):
        lists = ", ".join(k for k, v in AppConfig.field_defaults().items() if isinstance(v, list))
        raise UsageError(f"{flag} {key}: not a list setting (those are {lists}); use --set")


def _unknown_unset(key: str, local: dict[str, Any], path: Any) -> UsageError:
    others = [k for k in dict.fromkeys([*local, *AppConfig.context_keys()]) if k != key]
    close = difflib.get_close_matches(key, others, n=1)
    if close and close[0] in local:
        return UsageError(
            f"--unset {key}: {path} does not set it; did you mean --unset {close[0]}?"
        )
    held = ", ".join(sorted(local)) or "nothing"
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return UsageError(f"--unset {key}: {path} does not set it (it sets {held}){hint}")


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
    allow_empty = app.args.allow_empty
    before = _config_or_none(apply_local(context, json.loads(json.dumps(local)), files))
    changes = []
    for key, raw in parse_overrides(app.args.set_pairs, "--set").items():
        value = _json_value(_parse(key, raw))
        if value == [] and not allow_empty:
            raise UsageError(_empty_set_message(key, raw))
        local[key] = value
        changes.append(f"set {key} = {json.dumps(local[key])}")
    for key in app.args.unset_keys:
        if key not in local:
            raise _unknown_unset(key, local, path)
        del local[key]
        changes.append(f"unset {key} (back to {json.dumps(files.get(key, ''))})")

    def current(key: str) -> list[str]:
        value = apply_local(context, local, files).get(key, [])
        try:
            return list(AppConfig.parse_value(key, value))
        except ConfigError:
            return []  # a broken value: the items given replace it

    for flag, pairs in (("--add", app.args.add_pairs), ("--remove", app.args.remove_pairs)):
        for pair in pairs:
            ((key, raw),) = parse_overrides([pair], flag).items()
            _list_key(flag, key)
            items = list(_parse(key, raw))
            values = current(key)
            if flag == "--add":
                values += [i for i in items if i not in values]
                changes.append(f"added to {key}: {', '.join(items)}")
            else:
                missing = [i for i in items if i not in values]
                if missing:
                    raise UsageError(
                        f"--remove {key}={','.join(missing)}: not in {key} ({json.dumps(values)})"
                    )
                values = [v for v in values if v not in items]
                if not values and key == ADMINS and not allow_empty:
                    raise UsageError(_empty_admins_message(f"--remove {pair}"))
                changes.append(f"removed from {key}: {', '.join(items)}")
            local[key] = values
    if app.args.add_admin_me:
        changes.append(_add_me(app, local, current(ADMINS), context))
    try:
        after = AppConfig.from_context(apply_local(context, local, files))
    except ConfigError as err:
        raise UsageError(f"{path} not changed:\n{err}") from None
    path.write_text(json.dumps(local, indent=2) + "\n", encoding="utf-8")
    app.print(*(f"{LOCAL_SETTINGS_FILE}: {line}" for line in changes))
    for _, text in config_warnings(after):
        app.warn(f"WARNING {text}")
    removed = cross_stack.removed_references(before, after) if before else []
    if not removed:
        app.print(
            f"Every later command reads it; apply it with `{deploy_command(after.stage_id)}`."
        )
        return EXIT_OK
    app.print(
        "Every later command reads it. It removes what one stack passes to another ("
        + "; ".join(f"{r.exporter} to {r.importer}: {r.what}" for r in removed)
        + "): on stacks deployed with the old value, deploy the importing stacks first "
        "(docs/lifecycle.md, Turning a feature off on a deployed stack):",
        *(f"  {command}" for command in cross_stack.ordered_deploy(removed, after.stage_id)),
    )
    return EXIT_OK


def _config_or_none(context: dict[str, Any]) -> AppConfig | None:
    """The configuration before the change, or None when it was invalid."""
    try:
        return AppConfig.from_context(context)
    except ConfigError:
        return None


def _empty_set_message(key: str, raw: str) -> str:
    why = (
        "nobody could administer the cluster (an empty $(aws sts ...) substitution, i.e. "
        f"expired credentials, gives this too); `{CLI_NAME} settings --add-admin-me`"
        if key == ADMINS
        else f"`--unset {key}` goes back to the default"
    )
    return f"--set {key}={raw}: an empty list is refused: {why}. If you mean it, add --allow-empty"


def _empty_admins_message(what: str) -> str:
    return (
        f"{what}: leaves {ADMINS} empty, and nobody could administer the cluster; add "
        "another admin first, or add --allow-empty if you mean it"
    )


def _add_me(app: App, local: dict[str, Any], admins: list[str], context: dict[str, Any]) -> str:
    """Put the caller's IAM ARN (its role's path included) into adminPrincipalArns,
    replacing an entry that names the same role with another path."""
    region = context.get("region")
    defaults = AppConfig()
    config = replace(defaults, region=region) if isinstance(region, str) else defaults
    try:
        aws = app.use_aws(config)
    except UsageError as err:
        if "no AWS region" not in err.message:
            raise
        # STS and IAM answer in any region; the tool needs one only to build the clients.
        app.args.region = "us-east-1"
        aws = app.use_aws(config)
    me = aws.principal()
    if not me.arn.startswith("arn:") or ":iam::" not in me.arn or ":root" in me.arn:
        raise UsageError(
            f"--add-admin-me: you are {me.arn}, which cannot be an EKS access entry here; "
            "sign in with an IAM role or user (e.g. your IAM Identity Center role)"
        )
    if not me.path_known:
        raise UsageError(
            f"--add-admin-me: cannot read the path of your role {me.arn} "
            f"({me.unknown_path_reason}); EKS needs the role's full ARN: ask for iam:GetRole, "
            f"or `{CLI_NAME} settings --add {ADMINS}=$(aws iam get-role --role-name "
            "<name> --query Role.Arn --output text)` with someone who may read it"
        )
    wrong = [a for a in admins if same_name_other_path(me.arn, a)]
    kept = [a for a in admins if a not in wrong]
    if any(same_principal(me.arn, a) for a in kept):
        local[ADMINS] = kept
        note = f" (replaced {', '.join(wrong)}: wrong path)" if wrong else ""
        return f"{ADMINS} already has {me.arn}{note}"
    local[ADMINS] = [*kept, me.arn]
    note = f", replacing {', '.join(wrong)} (wrong path)" if wrong else ""
    return f"added to {ADMINS}: {me.arn}{note}"
