"""The README is the manual: its commands and settings must match the code.

The README is the newcomer's path and docs/ holds the depth; both are checked, because a
command copied from either must work.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from ray_pd_eks import instance_types
from ray_pd_eks.cli.main import COMMANDS, build_parser
from ray_pd_eks.config import DEFAULTS, AppConfig
from ray_pd_eks.config.limits import OTHER_CONTEXT_KEYS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
MANUAL = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
# About 300 lines: the newcomer's path plus one row per setting; the depth goes to docs/.
README_MAX_LINES = 400
README_MAX_BYTES = 18 * 1024


def test_two_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/setup.sh" in README and "./scripts/setup.sh" in ci
    assert "./scripts/test.sh" in README and "./scripts/test.sh" in ci
    assert "pytest" in (ROOT / "scripts" / "test.sh").read_text()


def test_every_setting_is_documented_with_its_default() -> None:
    table = DOCS["settings.md"].split("## Every setting", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| `?([^|`]*)`? \|", table, flags=re.M))
    for key, default in AppConfig.field_defaults().items():
        assert key in rows, f"docs/settings.md (Every setting) lacks setting {key}"
        shown = rows[key].strip()
        if isinstance(default, bool):
            assert shown == str(default).lower(), key
        elif isinstance(default, (int, float)):
            assert float(shown) == float(default), key
        elif isinstance(default, list):
            assert shown == "[]", key
        else:
            assert shown in (default, f'"{default}"'), key


def test_every_context_override_shown_is_a_real_setting() -> None:
    keys = set(AppConfig.context_keys()) | OTHER_CONTEXT_KEYS
    for where, text in MANUAL.items():
        used = set(re.findall(r"-c (\w+)=", text)) - {"key"}  # "-c key=value" in prose
        assert used <= keys, (where, used - keys)
    assert re.search(r"-c (\w+)=", README), "README shows no -c override"


def _subcommand_options() -> dict[str, set[str]]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: set(sub._option_string_actions) for name, sub in subparsers.choices.items()}


def test_every_cli_command_and_option_shown_exists() -> None:
    """`ray-pd-eks <command> --option` anywhere in the manual is accepted."""
    options = _subcommand_options()
    shown = 0
    for where, text in MANUAL.items():
        # `ray-pd-eks <command>`; "ray-pd-eks prod (account/region)" is the pipeline's report.
        pattern = r"ray(?:_pd_eks|-pd-eks) ([a-z][\w-]*)(?![\w-]| \(\d)([^`|\n]*)"
        for command, rest in re.findall(pattern, text):
            assert command in options, f"{where}: unknown command {command!r}"
            rest = rest.split("$(", 1)[0]  # a shell substitution's own flags (curl -s)
            for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest):
                assert option in options[command], f"{where}: {command} has no {option}"
            shown += 1
    assert shown >= len(COMMANDS)


def test_operations_guide_covers_every_cli_command() -> None:
    for module in COMMANDS:
        assert f"ray-pd-eks {module.NAME}" in README + DOCS["operations.md"], module.NAME


def test_deploy_commands_select_the_stage_stacks() -> None:
    assert "npx cdk deploy 'RayPdEks/*'" in README
    assert "npx cdk destroy 'RayPdEks/*'" in README
    for where, text in MANUAL.items():
        for stacks in re.findall(r"npx cdk (?:deploy|destroy) ([^\s\\]*)", text):
            named = re.sub(r"^'[a-z][-a-z0-9]*-RayPdEks", "'RayPdEks", stacks)  # deploymentName
            assert named.startswith("'RayPdEks") or stacks in ("--all", "RayPdEksPipeline"), (
                where,
                stacks,
            )


def test_readme_is_short_and_links_every_doc() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES
    # The newcomer's path stays readable; the depth (the settings table among it) is in docs/.
    assert len(README.encode()) <= README_MAX_BYTES, len(README.encode())
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)(?:#[\w-]+)?\)", README))
    assert linked == {f"docs/{name}" for name in DOCS}, linked ^ {f"docs/{n}" for n in DOCS}


def test_the_cost_table_prices_the_default_deployment() -> None:
    costs = README.split("## What it costs", 1)[1].split("\n## ", 1)[0]
    gpu = next(line for line in costs.splitlines() if line.startswith("| GPU nodes"))
    assert f"{DEFAULTS.gpu_node_count} \u00d7 `{DEFAULTS.gpu_node_type}`" in gpu
    assert instance_types.EFA_GPU_TYPES[DEFAULTS.gpu_node_type].gpu_model in gpu
    system = next(line for line in costs.splitlines() if line.startswith("| System node"))
    assert f"{DEFAULTS.system_node_count} \u00d7 `{DEFAULTS.system_node_type}`" in system
    for item in ("EKS control plane", "NAT gateway", "EBS", "Observability", "**Total**"):
        assert f"| {item}" in costs, item
    assert re.search(r"us-(east-1|west-2)", costs) and "On-Demand" in costs
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", costs), "prices must be dated"


def test_one_deploy_time_everywhere() -> None:
    stated = {
        (where, time)
        for where, text in MANUAL.items()
        for time in re.findall(
            r"deploy (?:therefore )?takes (?:\*\*)?(?:about|roughly) ([\d-]+ minutes)", text
        )
    }
    assert {time for _, time in stated} and len({time for _, time in stated}) == 1, stated


def test_no_deploy_shown_carries_a_setting_that_later_commands_would_forget() -> None:
    """Settings given with -c to one deploy are gone at the next command (the CLI's `status`,
    the next `cdk deploy`): the manual puts them in settings.local.json (`settings --set`)."""
    for where, text in MANUAL.items():
        joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines
        for command in re.findall(r"npx cdk deploy [^\n`]*", joined):
            assert re.findall(r"-c (\w+)=", command) in ([], ["pipeline"]), (where, command)
    assert "ray-pd-eks settings --add-admin-me" in README
    assert "--add endpointPublicCidrs=" in README


# -- documented cdk commands select the Stage's stacks (else the CLI prints no warning) ------

CDK = ROOT / "node_modules" / ".bin" / "cdk"
_CDK_COMMAND = re.compile(r"npx cdk (synth|diff|deploy|destroy)(?![|\w])([^`\n]*)")


def _documented(verb: str) -> list[tuple[str, str]]:
    """(where, arguments) of every ``npx cdk <verb>`` command in the manual and setup.sh."""
    texts = {**MANUAL, "scripts/setup.sh": (ROOT / "scripts" / "setup.sh").read_text()}
    return [
        (where, rest.strip())
        for where, text in texts.items()
        for found_verb, rest in _CDK_COMMAND.findall(re.sub(r"\s*\n\s*", " ", text))
        if found_verb == verb
    ]


def test_every_documented_synth_and_diff_selects_stacks() -> None:
    """`npx cdk synth` on a Stage app selects no stack: no template, and none of the app's
    warnings. The pipeline's own CodeBuild synth (pipeline.md) has a top-level stack."""
    commands = _documented("synth") + _documented("diff")
    assert any(where == "README.md" for where, _ in commands)
    for where, args in commands:
        if where == "docs/pipeline.md":
            continue
        assert "'RayPdEks/*'" in args or "RayPdEksPipeline" in args, (where, args)


def _cdk_synth(assembly: Path, args: list[str]) -> str:
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    argv = [str(CDK), "synth", "--app", str(assembly), "--no-notices", *args]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_readmes_synth_command_shows_the_apps_warnings(default_app: Any) -> None:
    """The README's command, run by the pinned CDK CLI on the tests' synthesized assembly (the
    default settings warn that nobody administers the cluster); the bare command shows none."""
    (args,) = [a for where, a in _documented("synth") if where == "README.md"]
    documented = [a.strip("'") for a in args.split() if not a.startswith("-c") and "=" not in a]
    shown = _cdk_synth(default_app.outdir, documented)
    assert "cdk deploy will be refused before anything is created: adminPrincipalArns" in shown
    bare = _cdk_synth(default_app.outdir, ["--quiet"])
    assert "adminPrincipalArns" not in bare
    # Nothing of the CDK's own around them: no feature-flag census, no deprecation, no
    # cross-stack reference notice (cdk.json states every flag at the value it behaves as).
    for noise in ("feature flags", "deprecated", "cross-stack-reference", "crossStackReferences"):
        assert noise not in shown, noise


def test_the_gpu_share_of_the_cost_matches_the_cost_table() -> None:
    (gpu,) = re.findall(r"^\| GPU nodes \|[^|]*\| ~\$([\d.]+) \|", README, flags=re.M)
    (total,) = re.findall(r"^\| \*\*Total\*\* \| \| \*\*~\$([\d.]+)\*\* \|", README, flags=re.M)
    (share,) = re.findall(r"The GPU nodes are (\d+) % of it", README)
    assert int(share) == round(100 * float(gpu) / float(total))


def test_the_manual_runs_the_console_script() -> None:
    """Usage lines say `ray-pd-eks`, which works from any folder; not `python -m`."""
    for where, text in MANUAL.items():
        for line in text.splitlines():
            assert "bin/python -m ray_pd_eks " not in line, (where, line)
    assert "ray-pd-eks settings --add-admin-me" in README
    assert "sed -E" not in README  # the old assumed-role rewrite, which dropped the path


def test_every_benchmark_recipe_redeploys_after_going_back_to_pd() -> None:
    """`settings --unset servingMode` changes a file; only the next deploy changes the endpoint."""
    for where, text in MANUAL.items():
        lines = [line.split("#")[0].strip() for line in text.splitlines()]
        for i, line in enumerate(lines):
            if line.endswith("settings --unset servingMode"):
                following = [rest for rest in lines[i + 1 :] if rest][:1]
                assert following and following[0].startswith("npx cdk deploy"), where


def test_the_readiness_timeouts_stated_maximum_is_the_apps() -> None:
    from ray_pd_eks.config.limits import MAX_READINESS_MINUTES

    stated = [
        (where, int(limit))
        for where, text in MANUAL.items()
        for limit in re.findall(
            r"readinessTimeoutMinutes`[^.|]{0,60}?(?:at most|max) (\d+)", " ".join(text.split())
        )
    ]
    assert len(stated) >= 3, stated
    assert {limit for _, limit in stated} == {MAX_READINESS_MINUTES}, stated
