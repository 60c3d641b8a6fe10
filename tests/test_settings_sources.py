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
from ray_pd_eks.cli.settings import load_config, load_environment_config
from ray_pd_eks.config import DEFAULTS, AppConfig
from ray_pd_eks.context import (
    SettingsFileError,
    cdk_cli_context,
    file_context,
    with_local_settings,
)
from tests.cli_fixtures import (
    ACCOUNT,
    SSO_PATH,
    SSO_ROLE,
    SSO_ROLE_ARN,
    SSO_SESSION_ARN,
    Harness,
    StubbedSession,
    stub_get_role,
)
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
        ("{not json", r"line 1, column 2: not valid JSON"),
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
        (
            ("--set", "gpuNodeCont=3"),
            "did you mean 'gpuNodeCount'? (fix it with `ray-pd-eks settings --set gpuNodeCount=",
        ),
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


# -- repairing, lists, and your own admin ARN ------------------------------------------------


def local_file(project: Path) -> Any:
    return json.loads((project / "settings.local.json").read_text())


def test_unset_and_set_repair_a_file_holding_an_invalid_value(project: Path) -> None:
    """The whole file is not validated before the change, only the result."""
    write(project / "settings.local.json", {"gpuNodeCount": 1, "maxModelLen": 8192})
    harness = Harness(project / "cdk.json")
    result = harness.run("settings", "--unset", "gpuNodeCount")
    assert result.code == 0, result.err
    assert local_file(project) == {"maxModelLen": 8192}
    write(project / "settings.local.json", {"gpuNodeCount": 1})
    assert harness.run("settings", "--set", "gpuNodeCount=3").code == 0
    assert local_file(project) == {"gpuNodeCount": 3}


def test_a_bad_value_names_the_file_it_comes_from(project: Path) -> None:
    write(project / "settings.local.json", {"gpuNodeCount": 1})
    result = Harness(project / "cdk.json").run("endpoint")
    assert result.code == 2
    assert result.err.rstrip().endswith(
        "[this value is in settings.local.json; `ray-pd-eks settings --unset gpuNodeCount` "
        "removes it]"
    )
    (project / "settings.local.json").unlink()
    shown = Harness(project / "cdk.json").run("settings", "-c", "gpuNodeCount=1")
    assert shown.err.rstrip().endswith("[this value is from -c]")


@pytest.mark.parametrize("value", ["", "[]"])
def test_an_empty_admin_list_is_refused_unless_meant(project: Path, value: str) -> None:
    """`--set adminPrincipalArns="$admin"` with an empty $admin (expired credentials)."""
    write(project / "settings.local.json", {"adminPrincipalArns": [ADMIN]})
    harness = Harness(project / "cdk.json")
    result = harness.run("settings", "--set", f"adminPrincipalArns={value}")
    assert result.code == 2
    assert (
        f"--set adminPrincipalArns={value}: an empty list is refused: nobody could " in result.err
    )
    assert "add --allow-empty" in result.err
    assert local_file(project) == {"adminPrincipalArns": [ADMIN]}
    meant = harness.run("settings", "--set", f"adminPrincipalArns={value}", "--allow-empty")
    assert meant.code == 0, meant.err
    assert local_file(project) == {"adminPrincipalArns": []}


def test_add_and_remove_change_one_item_of_a_list(project: Path) -> None:
    other = "arn:aws:iam::123456789012:role/Other"
    write(project / "settings.local.json", {"adminPrincipalArns": [ADMIN]})
    harness = Harness(project / "cdk.json")
    assert harness.run("settings", "--add", f"adminPrincipalArns={other}").code == 0
    assert local_file(project) == {"adminPrincipalArns": [ADMIN, other]}
    assert harness.run("settings", "--add", f"adminPrincipalArns={other}").code == 0  # no dup
    assert local_file(project) == {"adminPrincipalArns": [ADMIN, other]}
    assert harness.run("settings", "--remove", f"adminPrincipalArns={ADMIN}").code == 0
    assert local_file(project) == {"adminPrincipalArns": [other]}
    last = harness.run("settings", "--remove", f"adminPrincipalArns={other}")
    assert last.code == 2
    assert "leaves adminPrincipalArns empty, and nobody could administer" in last.err
    missing = harness.run("settings", "--remove", f"adminPrincipalArns={ADMIN}")
    assert missing.code == 2
    assert f"--remove adminPrincipalArns={ADMIN}: not in adminPrincipalArns" in missing.err
    scalar = harness.run("settings", "--add", "gpuNodeCount=3")
    assert scalar.code == 2
    assert "--add gpuNodeCount: not a list setting" in scalar.err


def test_add_starts_from_the_value_in_cdk_json(project: Path) -> None:
    data = json.loads((project / "cdk.json").read_text())
    data["context"]["adminPrincipalArns"] = [ADMIN]
    (project / "cdk.json").write_text(json.dumps(data))
    other = "arn:aws:iam::123456789012:user/bob"
    result = Harness(project / "cdk.json").run("settings", "--add", f"adminPrincipalArns={other}")
    assert result.code == 0, result.err
    assert local_file(project) == {"adminPrincipalArns": [ADMIN, other]}


def _signed_in_through_sso(harness: Harness) -> None:
    """STS answers that the caller is the Identity Center role's session."""
    harness.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AROA", "Account": ACCOUNT, "Arn": SSO_SESSION_ARN}
    )


def test_add_admin_me_writes_the_identity_center_role_with_its_path(project: Path) -> None:
    harness = Harness(project / "cdk.json", env={"AWS_REGION": "eu-west-1"})
    _signed_in_through_sso(harness)
    stub_get_role(harness.session, SSO_ROLE, SSO_PATH)
    result = harness.run("settings", "--add-admin-me")
    assert result.code == 0, result.err
    assert f"settings.local.json: added to adminPrincipalArns: {SSO_ROLE_ARN}" in result.out
    assert local_file(project) == {"adminPrincipalArns": [SSO_ROLE_ARN]}
    harness.session.assert_no_pending_responses()


def test_add_admin_me_replaces_the_pathless_arn_of_the_same_role(project: Path) -> None:
    pathless = f"arn:aws:iam::{ACCOUNT}:role/{SSO_ROLE}"  # what the README's sed produced
    write(project / "settings.local.json", {"adminPrincipalArns": [ADMIN, pathless]})
    harness = Harness(project / "cdk.json")  # no region anywhere: STS and IAM need none
    _signed_in_through_sso(harness)
    stub_get_role(harness.session, SSO_ROLE, SSO_PATH)
    result = harness.run("settings", "--add-admin-me")
    assert result.code == 0, result.err
    assert f"replacing {pathless} (wrong path)" in result.out
    assert local_file(project) == {"adminPrincipalArns": [ADMIN, SSO_ROLE_ARN]}


def test_add_admin_me_writes_nothing_when_the_path_cannot_be_read(project: Path) -> None:
    harness = Harness(project / "cdk.json")
    _signed_in_through_sso(harness)
    harness.session.stub("iam").add_client_error("get_role", "AccessDenied", "denied", 403)
    result = harness.run("settings", "--add-admin-me")
    assert result.code == 2
    assert "--add-admin-me: cannot read the path of your role" in result.err
    assert "aws iam get-role --role-name" in result.err
    assert not (project / "settings.local.json").exists()


def test_add_admin_me_takes_an_iam_user_as_sts_names_it(project: Path) -> None:
    user = f"arn:aws:iam::{ACCOUNT}:user/ops/alice"  # a user's ARN carries its path
    harness = Harness(project / "cdk.json")
    harness.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": user}
    )
    assert harness.run("settings", "--add-admin-me").code == 0
    assert local_file(project) == {"adminPrincipalArns": [user]}


def test_add_admin_me_refuses_the_root_user(project: Path) -> None:
    harness = Harness(project / "cdk.json")
    harness.session.stub("sts").add_response(
        "get_caller_identity",
        {"UserId": ACCOUNT, "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:root"},
    )
    result = harness.run("settings", "--add-admin-me")
    assert result.code == 2
    assert "cannot be an EKS access entry here" in result.err


def test_set_without_an_equals_sign_says_so(project: Path) -> None:
    result = Harness(project / "cdk.json").run("settings", "--set", "gpuNodeCount")
    assert result.code == 2
    assert result.err == (
        "error: --set gpuNodeCount: no '=': expected --set gpuNodeCount=VALUE, e.g. --set "
        "gpuAz=us-west-2a (to remove it from settings.local.json: --unset gpuNodeCount)\n"
    )


def test_unset_suggests_the_key_the_file_holds(project: Path) -> None:
    write(project / "settings.local.json", {"gpuNodeCount": 3})
    result = Harness(project / "cdk.json").run("settings", "--unset", "gpuNodeCont")
    assert result.code == 2
    assert "did you mean --unset gpuNodeCount?" in result.err


def test_synth_names_settings_local_json_as_the_bad_values_source(project: Path) -> None:
    write(project / "settings.local.json", {"gpuNodeCount": 1})
    saved = app_module.PROJECT_DIR, app_module.USER_HOME
    app_module.PROJECT_DIR, app_module.USER_HOME = project, None
    try:
        with pytest.raises(SystemExit) as exit_:
            app_module.main(app_module.cdk.App(context=cdk_cli_context(project, {}, None)))
    finally:
        app_module.PROJECT_DIR, app_module.USER_HOME = saved
    message = str(exit_.value.code)
    assert message.startswith(
        "Invalid configuration, nothing synthesized:\ncontext key 'gpuNodeCount'"
    )
    assert message.endswith(
        "[this value is in settings.local.json; `ray-pd-eks settings --unset gpuNodeCount` "
        "removes it]"
    )


def test_a_key_set_twice_is_refused_naming_both_values(project: Path) -> None:
    result = Harness(project / "cdk.json").run(
        "settings", "--set", "maxModelLen=8192", "--set", "maxModelLen=16384"
    )
    assert result.code == 2
    assert (
        "--set maxModelLen=8192 and --set maxModelLen=16384: maxModelLen given twice" in result.err
    )
    assert not (project / "settings.local.json").exists()


def test_settings_warn_about_idle_gpus_when_set_and_when_shown(project: Path) -> None:
    harness = Harness(project / "cdk.json")
    result = harness.run("settings", "--set", "gpuNodeType=p5.48xlarge")
    assert result.code == 0, result.err
    (warning,) = [line for line in result.err.splitlines() if line.startswith("WARNING")]
    assert warning.startswith(
        "WARNING tensorParallelSize=1 on gpuNodeType=p5.48xlarge uses 1 of each node's 8 GPUs: "
        "7 GPU(s) idle per GPU node, 14 of 16 across gpuNodeCount=2"
    )
    assert warning in harness.run("settings").err
    assert "WARNING" not in harness.run("settings", "--set", "tensorParallelSize=8").err


def test_a_declared_pipeline_says_a_sandbox_needs_pipeline_off(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cdk destroy 'RayPdEks/*'` with a pipeline declared selects nothing and exits 0 while a
    sandbox bills on: every run of the pipeline app says so, with the command that works."""
    monkeypatch.setattr(app_module, "PROJECT_DIR", project)
    example = json.loads((ROOT / "pipeline.example.json").read_text())
    context = {**json.loads((project / "cdk.json").read_text())["context"], **example}
    app_module.configure(context)
    err = capsys.readouterr().err
    assert "WARNING: cdk.json declares a pipeline" in err
    assert "npx cdk destroy 'RayPdEks/*' --concurrency 1 -c pipeline=" in err
    app_module.configure({**context, "pipeline": ""})
    assert "declares a pipeline" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "where", "cause"),
    [
        ('{\n  "maxModelLen": 8192,\n}\n', "line 3, column 1", "a trailing comma before '}'"),
        ('{\n  "x": [1,\n  ]\n}', "line 3, column 3", "a trailing comma before ']'"),
        ('{\n  // mine\n  "maxModelLen": 8192\n}', "line 2, column 3", "a comment (JSON has none)"),
        ("{'maxModelLen': 8192}", "line 1, column 2", "single quotes"),
        ('{"a": 1\n "b": 2}', "line 2, column 2", "a missing comma between two entries"),
        ('{"a": ', "line 1, column 7", "the file ends early"),
    ],
)
def test_a_broken_local_file_names_the_line_the_likely_mistake_and_the_repair(
    project: Path, content: str, where: str, cause: str
) -> None:
    (project / "settings.local.json").write_text(content, encoding="utf-8")
    result = Harness(project / "cdk.json").run("settings", "--set", "maxModelLen=8192")
    assert result.code == 2
    (line,) = [x for x in result.err.splitlines() if "settings.local.json, line" in x]
    assert f"settings.local.json, {where}: not valid JSON: {cause}" in line
    assert "mv settings.local.json settings.local.json.broken" in line
    assert "Traceback" not in result.err


def test_a_local_file_saved_with_a_byte_order_mark_is_read(project: Path) -> None:
    (project / "settings.local.json").write_text('{"maxModelLen": 8192}', encoding="utf-8-sig")
    assert (project / "settings.local.json").read_bytes()[:3] == b"\xef\xbb\xbf"
    config, _ = configure_in(project)
    assert config.max_model_len == 8192


# -- --env: a pipeline environment's settings, account, region and stacks ----------------------


@pytest.fixture
def pipeline_project(project: Path) -> Path:
    """The project with pipeline.example.json's pipeline and environments in its cdk.json, and
    a settings.local.json that the environments must not see."""
    document = json.loads((project / "cdk.json").read_text())
    document["context"].update(json.loads((ROOT / "pipeline.example.json").read_text()))
    write(project / "cdk.json", document)
    write(project / "settings.local.json", {"namespace": "mine"})
    return project


def test_env_applies_the_environments_overrides_account_and_region(
    pipeline_project: Path,
) -> None:
    harness = Harness(pipeline_project / "cdk.json")
    result = harness.run("endpoint", "--env", "prod")
    assert result.code == 0, result.err
    assert "--region us-east-1" in result.out
    assert "(namespace inference, cluster ray-llm-multinode)" in result.out
    config = load_environment_config(pipeline_project / "cdk.json", [], "prod", NO_ENV.get)
    assert (config.account, config.region, config.gpu_node_count) == (
        "333333333333",
        "us-east-1",
        3,
    )
    # Without --env: the sandbox's own settings, settings.local.json included.
    assert "(namespace mine," in harness.run("endpoint").out


def test_env_names_the_stage_whose_stacks_the_commands_read(pipeline_project: Path) -> None:
    from ray_pd_eks.cli.app import App, Runtime
    from ray_pd_eks.cli.main import build_parser
    from stacks.pipeline_stack import STAGE_PREFIX

    args = build_parser().parse_args(["endpoint", "--env", "dev"])
    config = load_environment_config(pipeline_project / "cdk.json", [], "dev", NO_ENV.get)
    assert App(args, config, Runtime()).stage_id == f"{STAGE_PREFIX}-dev" == "RayPdEks-dev"
    plain = build_parser().parse_args(["endpoint"])
    assert App(plain, DEFAULTS, Runtime()).stage_id == "RayPdEks"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("endpoint", "--env", "qa"),
            "--env qa: no such pipeline environment; cdk.json declares dev, prod",
        ),
        (("settings", "--env", "dev"), "--env dev: `settings` works on settings.local.json"),
    ],
)
def test_env_refuses_what_it_cannot_mean(
    pipeline_project: Path, argv: tuple[str, ...], message: str
) -> None:
    result = Harness(pipeline_project / "cdk.json").run(*argv)
    assert result.code == 2 and message in result.err, result.err


def test_env_without_a_declared_pipeline_says_so(project: Path) -> None:
    result = Harness(project / "cdk.json").run("endpoint", "--env", "dev")
    assert result.code == 2
    assert "--env dev: cdk.json declares no pipeline" in result.err


def test_unset_of_a_setting_the_file_lacks_does_not_suggest_itself(project: Path) -> None:
    write(project / "settings.local.json", {"maxModelLen": 8192})
    result = Harness(project / "cdk.json").run("settings", "--unset", "namespace")
    assert result.code == 2
    assert "--unset namespace: " in result.err and "did you mean 'namespace'" not in result.err
