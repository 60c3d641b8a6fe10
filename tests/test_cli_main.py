"""Global behaviour of ``python -m ray_pd_eks``: help texts, settings, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ray_pd_eks.cli.main import main
from ray_pd_eks.cli.settings import DEFAULT_CDK_JSON, REPO_ROOT
from tests.cli_fixtures import REGION, Harness, write_cdk_json

EXIT_CODE_LINES = (
    "  0  ok: every check passed",
    "  1  a check failed",
    "  2  usage or configuration error",
    "  3  AWS or Kubernetes access problem",
)


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_commands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys)
    assert text.startswith("usage: ray-pd-eks ")
    for command in ("preflight", "status", "endpoint", "smoke", "efa-check"):
        assert f"\n    {command} " in text
    for flag in ("-c KEY=VALUE", "--region REGION", "--profile PROFILE", "--debug", "--cdk-json"):
        assert flag in text
    assert "ray-pd-eks status --watch" in text
    for line in EXIT_CODE_LINES:
        assert line in text


@pytest.mark.parametrize(
    ("command", "phrases"),
    [
        (
            "preflight",
            (
                "vCPU quota",
                "recommends a gpuAz (settings --set)",
                "cdk bootstrap",
                "Exit 1 if any check FAILs",
            ),
        ),
        ("status", ("--watch", "--interval SECONDS", "--timeout SECONDS", "InitializingTimeout")),
        ("endpoint", ("--run", "--local-port PORT", "<rayServiceName>-serve-svc:8000")),
        ("smoke", ("--prompt", "--max-tokens N", "upper bound", "Exit 1 if the model")),
        ("efa-check", ("LIBFABRIC", "FI_PROVIDER=efa", "vpc.amazonaws.com/efa", "unknown")),
    ],
)
def test_every_command_has_help_with_exit_codes(
    capsys: pytest.CaptureFixture[str], command: str, phrases: tuple[str, ...]
) -> None:
    text = help_text(capsys, command)
    assert text.startswith(f"usage: ray-pd-eks {command} ")
    for phrase in phrases:
        assert phrase in text
    for line in EXIT_CODE_LINES:
        assert line in text
    # Global flags work after the command too.
    assert "--region REGION" in text and "-c KEY=VALUE" in text


def test_no_command_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_invalid_context_value_is_exit_2_with_the_config_message(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    result = harness.run("-c", "gpuNodeType=m5.large", "endpoint")
    assert result.code == 2
    assert result.err.startswith("error: context key 'gpuNodeType' = \"m5.large\": not an NVIDIA")
    assert result.out == ""


def test_unknown_context_key_suggests_the_right_one(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path))
    result = harness.run("endpoint", "-c", "gpuNodCount=3")
    assert result.code == 2
    assert "unknown setting; did you mean 'gpuNodeCount'?" in result.err


def test_malformed_override_is_exit_2(tmp_path: Path) -> None:
    result = Harness(write_cdk_json(tmp_path)).run("endpoint", "-c", "gpuAz")
    assert result.code == 2
    assert (
        result.err == "error: -c gpuAz: no '=': expected -c gpuAz=VALUE, e.g. -c gpuAz=us-west-2a\n"
    )


def test_missing_cdk_json_is_exit_2(tmp_path: Path) -> None:
    result = Harness(tmp_path / "nope" / "cdk.json").run("endpoint")
    assert result.code == 2
    assert result.err.startswith(f"error: {tmp_path / 'nope' / 'cdk.json'} not found")


def test_overrides_before_and_after_the_command_add_up(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, namespace="from-file"))
    result = harness.run("-c", "namespace=before", "endpoint", "-c", "rayServiceName=after")
    assert "kubectl port-forward -n before svc/after-serve-svc 8000:8000" in result.out


def test_command_line_wins_over_cdk_json_which_wins_over_cdk_context_json(tmp_path: Path) -> None:
    """The CDK CLI's order (tests/test_settings_sources.py checks it against the CLI itself)."""
    cdk_json = write_cdk_json(tmp_path, namespace="from-file", rayServiceName="from-file")
    (tmp_path / "cdk.context.json").write_text(
        '{"rayServiceName": "from-context-json", "clusterName": "only-in-context-json"}'
    )
    result = Harness(cdk_json).run("endpoint", "-c", "namespace=from-flag")
    assert "-n from-flag svc/from-file-serve-svc" in result.out
    assert "--name only-in-context-json" in result.out


def test_default_cdk_json_is_the_repositorys() -> None:
    assert DEFAULT_CDK_JSON == REPO_ROOT / "cdk.json"
    assert (REPO_ROOT / "ray_pd_eks" / "__main__.py").is_file()


def test_module_entry_point_runs(tmp_path: Path) -> None:
    cdk_json = write_cdk_json(tmp_path, namespace="ns1")
    done = subprocess.run(
        [sys.executable, "-m", "ray_pd_eks", "endpoint", "--cdk-json", str(cdk_json)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "kubectl port-forward -n ns1 svc/ray-llm-serve-svc 8000:8000" in done.stdout


def test_deploy_command_selects_the_apps_stage() -> None:
    """`cdk deploy --all` selects no stack of a Stage; the hint must name the Stage's id."""
    import app as app_module
    from ray_pd_eks.cli.errors import DEPLOY_COMMAND
    from ray_pd_eks.config import DEFAULTS

    assert app_module.STAGE_ID == DEFAULTS.stage_id == "RayPdEks"
    # --concurrency: the GPU node and workload stacks deploy side by side (docs/architecture.md).
    assert DEPLOY_COMMAND == "npx cdk deploy 'RayPdEks/*' --concurrency 4"
    assert DEPLOY_COMMAND in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_region_and_profile_help_name_the_environment_variables_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = " ".join(help_text(capsys, "status").split())
    assert "then $AWS_REGION, then $AWS_DEFAULT_REGION or the profile's region" in text
    assert "(default: $AWS_PROFILE, else the default profile)" in text
