"""Where settings come from: the CDK CLI's context files, settings.local.json and -c, read the
same way by `cdk synth` (app.py) and by the operations CLI, and the CLI's AWS region."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import app as app_module
from ray_pd_eks.cli.aws import Aws, default_session
from ray_pd_eks.cli.errors import UsageError
from ray_pd_eks.cli.settings import load_config
from ray_pd_eks.config import DEFAULTS, AppConfig
from ray_pd_eks.context import (
    SettingsFileError,
    cdk_cli_context,
    file_context,
    with_local_settings,
)
from tests.cli_fixtures import Harness, StubbedSession
from tests.synth import ROOT

ADMIN = "arn:aws:iam::123456789012:role/Admin"
CDK = ROOT / "node_modules" / ".bin" / "cdk"
NO_ENV: dict[str, str] = {}


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's cdk.json, a cdk.context.json naming another namespace (the
    reported disagreement), and a user's ~/.cdk.json in tmp_path/home."""
    directory = tmp_path / "project"
    directory.mkdir()
    shutil.copy(ROOT / "cdk.json", directory / "cdk.json")
    write(directory / "cdk.context.json", {"namespace": "from-context-file", "lookup:x": "y"})
    write(tmp_path / "home" / ".cdk.json", {"context": {"namespace": "from-home", "kvBackend": 1}})
    return directory


def real_cdk_context(project: Path, home: Path, *pairs: str) -> dict[str, Any]:
    """The context the pinned CDK CLI itself merges (``cdk context`` does not run the app)."""
    argv = [str(CDK), "context", "--json", "--no-notices"]
    argv += [arg for pair in pairs for arg in ("-c", pair)]
    env = {**os.environ, "HOME": str(home), "CDK_DISABLE_CLI_TELEMETRY": "true"}
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def test_synth_and_the_cli_read_the_same_settings(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run of the real CDK CLI: its context, through app.py, gives the config the CLI loads.

    cdk.json beats cdk.context.json and ~/.cdk.json (namespace stays cdk.json's), the local
    file beats cdk.json (admins, maxModelLen), and -c beats the local file (maxModelLen)."""
    home = project.parent / "home"
    write(project / "settings.local.json", {"adminPrincipalArns": [ADMIN], "maxModelLen": 8192})
    pairs = ("maxModelLen=6144", "rayServiceName=from-cli")
    cdk_context = real_cdk_context(project, home, *pairs)
    assert cdk_context == cdk_cli_context(project, dict(p.split("=") for p in pairs), home)

    monkeypatch.setattr(app_module, "PROJECT_DIR", project)
    monkeypatch.setattr(app_module, "USER_HOME", home)
    synth_config, pipeline = app_module.configure(cdk_context)
    cli_config = load_config(project / "cdk.json", pairs, {"HOME": str(home)}.get)

    assert pipeline is None
    assert cli_config == synth_config
    assert cli_config.namespace == DEFAULTS.namespace == "inference"
    assert cli_config.admin_principal_arns == (ADMIN,)
    assert cli_config.max_model_len == 6144
    assert cli_config.ray_service_name == "from-cli"


def test_the_cli_talks_to_the_namespace_synth_deploys(project: Path) -> None:
    result = Harness(project / "cdk.json").run("endpoint")
    assert result.code == 0, result.err
    assert "kubectl port-forward -n inference svc/ray-llm-serve-svc" in result.out


def test_context_files_in_the_cdk_clis_order(project: Path) -> None:
    home = project.parent / "home"
    files = file_context(project, home)
    assert files["namespace"] == "inference"  # cdk.json over cdk.context.json and ~/.cdk.json
    assert files["lookup:x"] == "y"  # cdk.context.json's own keys still arrive
    assert files["kvBackend"] == "LIBFABRIC"
    (project / "cdk.context.json").unlink()
    json_context = json.loads((project / "cdk.json").read_text())
    del json_context["context"]["namespace"]
    write(project / "cdk.json", json_context)
    assert file_context(project, home)["namespace"] == "from-home"  # the lowest level
    assert file_context(project, None)["kvBackend"] == "LIBFABRIC"


def test_local_settings_sit_between_cdk_json_and_command_line(project: Path) -> None:
    write(
        project / "settings.local.json",
        {"adminPrincipalArns": [ADMIN], "gpuNodeType": "g6e.8xlarge", "clusterName": "mine"},
    )
    given = {"gpuNodeType": "g5.8xlarge", "clusterName": DEFAULTS.cluster_name}
    context = with_local_settings(cdk_cli_context(project, given, None), project, None)
    assert context["adminPrincipalArns"] == [ADMIN]  # over cdk.json's []
    assert context["gpuNodeType"] == "g5.8xlarge"  # -c differs from the files: -c wins
    # -c naming exactly cdk.json's value cannot be told from no -c: the local file wins.
    assert context["clusterName"] == "mine"
    assert context["namespace"] == "inference"  # not in the local file: cdk.json


def test_without_a_local_file_the_context_is_the_cdk_clis(project: Path) -> None:
    context = cdk_cli_context(project, {"maxModelLen": "1024"}, None)
    assert with_local_settings(context, project, None) == context


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read it as JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"pipeline": {}}', "'pipeline' belongs in cdk.json"),
        ('{"environments": []}', "'environments' belongs in cdk.json"),
    ],
)
def test_an_unusable_local_file_is_an_error_naming_it(
    project: Path, content: str, message: str
) -> None:
    (project / "settings.local.json").write_text(content, encoding="utf-8")
    with pytest.raises(SettingsFileError, match=message) as raised:
        with_local_settings(cdk_cli_context(project, {}, None), project, None)
    assert "settings.local.json" in str(raised.value)
    result = Harness(project / "cdk.json").run("endpoint")
    assert result.code == 2 and "settings.local.json" in result.err and message in result.err


def test_an_invalid_local_setting_fails_like_a_bad_cdk_json_value(project: Path) -> None:
    write(project / "settings.local.json", {"gpuNodeCount": 1, "decodeReplicas": 1})
    with pytest.raises(UsageError, match="context key 'gpuNodeCount' = 1"):
        load_config(project / "cdk.json", [], NO_ENV.get)


def test_a_declared_pipeline_is_built_without_the_local_file(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pipeline's synth runs in CodeBuild from the repository, where the file is not."""
    write(project / "settings.local.json", {"maxModelLen": 8192})
    monkeypatch.setattr(app_module, "PROJECT_DIR", project)
    example = json.loads((ROOT / "pipeline.example.json").read_text())
    context = {**json.loads((project / "cdk.json").read_text())["context"], **example}
    config, pipeline = app_module.configure(context)
    assert pipeline is not None and pipeline.environments[0].name == "dev"
    assert config.max_model_len == DEFAULTS.max_model_len
    assert "settings.local.json is not used for the pipeline" in capsys.readouterr().err
    # Switched off for one command (a sandbox), the local file applies again.
    config, pipeline = app_module.configure({**context, "pipeline": ""})
    assert pipeline is None and config.max_model_len == 8192


# -- the AWS region: the CDK CLI's order (AWS_REGION, then AWS_DEFAULT_REGION, then profile) --


@pytest.fixture
def aws_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A process environment without AWS config files or region variables; real botocore."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return {}


def region_of(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Aws:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = DEFAULTS.with_overrides(kw.pop("context", {}))
    return Aws(
        config,
        profile=None,
        region=kw.get("region"),
        session_factory=default_session,
        getenv=dict(os.environ).get,
    )


@pytest.mark.parametrize(
    ("env", "region", "source"),
    [
        ({"AWS_REGION": "eu-west-1"}, "eu-west-1", "AWS_REGION"),
        ({"AWS_DEFAULT_REGION": "eu-central-1"}, "eu-central-1", "AWS_DEFAULT_REGION"),
        ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-central-1"}, "eu-west-1", None),
    ],
)
def test_the_cli_honours_aws_region_and_aws_default_region(
    aws_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    region: str,
    source: str | None,
) -> None:
    aws = region_of(env, monkeypatch)
    assert aws.region == region
    assert aws.region_source == (source or "AWS_REGION")
    assert aws.client("sts").meta.region_name == region


def test_flag_and_context_region_come_before_the_environment(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"AWS_REGION": "eu-west-1"}
    assert region_of(env, monkeypatch, context={"region": "us-east-1"}).region == "us-east-1"
    assert region_of(env, monkeypatch, region="ap-south-1").region == "ap-south-1"


def test_no_region_anywhere_says_how_to_set_one(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError, match="export AWS_REGION"):
        region_of({}, monkeypatch)


def test_the_cli_passes_its_environment_to_the_region_choice(tmp_path: Path) -> None:
    """Through main: a profile without a region and AWS_REGION exported reaches AWS (here
    an expired token) instead of stopping at "no AWS region"."""
    harness = Harness(tmp_path / "cdk.json", StubbedSession(region=None))
    write(harness.cdk_json, {"app": "true", "context": {}})
    harness.session.stub("sts").add_client_error("get_caller_identity", "ExpiredToken", "x", 403)
    assert harness.run("preflight").code == 2
    harness.env = {"AWS_REGION": "eu-west-1"}
    result = harness.run("preflight")
    assert result.code == 3, result.err
    assert "ExpiredToken" in result.err


# -- the `settings` command ------------------------------------------------------------------


def test_settings_set_writes_typed_values_that_every_command_then_reads(project: Path) -> None:
    harness = Harness(project / "cdk.json")
    result = harness.run(
        "settings",
        "--set",
        f"adminPrincipalArns={ADMIN}",
        "--set",
        "namespace=team-a",
        "--set",
        "gpuNodeCount=3",
    )
    assert result.code == 0, result.err
    assert 'settings.local.json: set namespace = "team-a"' in result.out
    written = json.loads((project / "settings.local.json").read_text())
    assert written == {"adminPrincipalArns": [ADMIN], "namespace": "team-a", "gpuNodeCount": 3}
    assert "-n team-a svc/ray-llm-serve-svc" in harness.run("endpoint").out
    config, _ = configure_in(project)
    assert (config.namespace, config.gpu_node_count) == ("team-a", 3)


def configure_in(project: Path) -> Any:
    saved = app_module.PROJECT_DIR, app_module.USER_HOME
    app_module.PROJECT_DIR, app_module.USER_HOME = project, None
    try:
        return app_module.configure(cdk_cli_context(project, {}, None))
    finally:
        app_module.PROJECT_DIR, app_module.USER_HOME = saved


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--set", "gpuNodeCount=1"), "not changed:\ncontext key 'gpuNodeCount' = 1"),
        (("--set", "gpuNodeCont=3"), "did you mean 'gpuNodeCount'? (set it with -c gpuNodeCount="),
        (("--set", "maxModelLen=lots"), "expected a whole number"),
        (("--unset", "namespace"), "--unset namespace: "),
    ],
)
def test_settings_set_refuses_what_synth_would_refuse(
    project: Path, argv: tuple[str, ...], message: str
) -> None:
    write(project / "settings.local.json", {"maxModelLen": 8192})
    result = Harness(project / "cdk.json").run("settings", *argv)
    assert result.code == 2
    assert message in result.err
    assert json.loads((project / "settings.local.json").read_text()) == {"maxModelLen": 8192}


def test_settings_unset_goes_back_to_cdk_json(project: Path) -> None:
    write(project / "settings.local.json", {"maxModelLen": 8192, "namespace": "team-a"})
    result = Harness(project / "cdk.json").run("settings", "--unset", "maxModelLen")
    assert result.code == 0, result.err
    assert "unset maxModelLen (back to 4096)" in result.out
    assert json.loads((project / "settings.local.json").read_text()) == {"namespace": "team-a"}


def test_settings_shows_each_value_and_where_it_comes_from(tmp_path: Path) -> None:
    cdk_json = write(tmp_path / "cdk.json", {"app": "true", "context": {"namespace": "ns-json"}})
    write(tmp_path / "cdk.context.json", {"clusterName": "from-context", "namespace": "ns-ctx"})
    write(tmp_path / "home" / ".cdk.json", {"context": {"rayServiceName": "from-home"}})
    write(tmp_path / "settings.local.json", {"maxModelLen": 8192, "dtype": "float16"})
    harness = Harness(cdk_json, env={"HOME": str(tmp_path / "home")})
    result = harness.run("settings", "-c", "dtype=auto", "-c", "kvBackend=UCX")
    assert result.code == 0, result.err
    *listing, estimate = result.out.splitlines()[1:]
    shown = {line.split()[0]: line.split(None, 1)[1] for line in listing}
    assert set(shown) == set(AppConfig.context_keys())
    # Then the fit check's estimate of the engine's memory (dtype=auto: 16-bit weights).
    assert estimate.startswith("Engine memory, per replica: L4: 20.2 GiB for vLLM, weights 16.8")
    assert "CUDA graphs fit, tightly (estimate; now enforceEager=true" in estimate
    assert shown["namespace"] == '"ns-json"  [cdk.json]'
    assert shown["clusterName"] == '"from-context"  [cdk.context.json]'
    assert shown["rayServiceName"] == '"from-home"  [~/.cdk.json]'
    assert shown["maxModelLen"] == "8192  [settings.local.json]"
    assert shown["dtype"] == '"auto"  [-c]'
    assert shown["kvBackend"] == '"UCX"  [-c]'
    assert shown["gpuNodeType"] == '"g6.8xlarge"  [default]'
    assert shown["modelId"] == '"qwen3.5-9b"  [default, empty: derived from modelSource]'
