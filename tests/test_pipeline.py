"""The promotion pipeline: its configuration, validation errors, and the synthesized pipeline.

The pipeline is synthesized once per session (``synth_pipeline`` is cached; the teardown audit
reuses it) through ``app.build``, with cdk-nag, exactly as ``cdk synth`` does with a pipeline
declared in cdk.json. Accounts are fake, nothing calls AWS.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest

import app as app_module
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.pipeline_config import (
    PipelineConfigError,
    is_production_name,
    pipeline_from_context,
)
from stacks.pipeline_stack import (
    CDK_ASSETS_VERSION,
    INSTALL_COMMANDS,
    PipelineStack,
    cdk_cli_version,
)
from stacks.stage import RayPdEksStage
from tests.synth import NO_STAGING, ROOT, cdk_json_context, outdir

PIPELINE_ACCOUNT = "111111111111"
DEV_ACCOUNT = "222222222222"
PROD_ACCOUNT = "333333333333"
CONNECTION_ARN = (
    "arn:aws:codeconnections:us-west-2:111111111111:connection/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
)
PIPELINE = {
    "account": PIPELINE_ACCOUNT,
    "region": "us-west-2",
    "connectionArn": CONNECTION_ARN,
    "repository": "example-org/ray-pd-eks",
    "branch": "release",
}
ENVIRONMENTS = [
    {
        "name": "dev",
        "account": DEV_ACCOUNT,
        "region": "us-west-2",
        "overrides": {"gpuNodeCount": 2},
    },
    {
        "name": "prod",
        "account": PROD_ACCOUNT,
        "region": "us-east-1",
        "overrides": {"gpuNodeCount": 3, "retainLogs": True, "logRetentionDays": 365},
    },
]


@dataclass
class SynthesizedPipeline:
    """The pipeline stack, its template, each stage's templates and the cross-region support
    stacks' templates (CodePipeline adds one per other region, at the app's top level)."""

    stack: PipelineStack
    template: dict[str, Any]
    stage_templates: dict[str, dict[str, dict[str, Any]]]  # env name -> stack id -> template
    stage_envs: dict[str, dict[str, str]]  # env name -> stack id -> "aws://account/region"
    support_templates: dict[str, dict[str, Any]]

    def resources(self, rtype: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == rtype}

    def pipeline_stages(self) -> list[dict[str, Any]]:
        (pipeline,) = self.resources("AWS::CodePipeline::Pipeline").values()
        return list(pipeline["Properties"]["Stages"])

    def actions(self, stage_name: str) -> list[dict[str, Any]]:
        (stage,) = [s for s in self.pipeline_stages() if s["Name"] == stage_name]
        return sorted(stage["Actions"], key=lambda a: a["RunOrder"])

    def project_buildspec(self, project_ref: dict[str, str]) -> dict[str, Any]:
        project = self.template["Resources"][project_ref["Ref"]]
        return dict(json.loads(project["Properties"]["Source"]["BuildSpec"]))


def pipeline_context(**extra: Any) -> dict[str, Any]:
    return {
        **cdk_json_context(),
        **NO_STAGING,
        "pipeline": PIPELINE,
        "environments": ENVIRONMENTS,
        **extra,
    }


@functools.cache
def synth_pipeline() -> SynthesizedPipeline:
    """Synthesize the app with the test pipeline declared, once per process."""
    app = cdk.App(context=pipeline_context(), outdir=outdir("pipeline-"))
    stack = app_module.build(app)
    assert isinstance(stack, PipelineStack)
    assembly = app.synth()  # raises on an unacknowledged cdk-nag finding
    template = assembly.get_stack_artifact(stack.artifact_id).template
    stage_templates: dict[str, dict[str, dict[str, Any]]] = {}
    stage_envs: dict[str, dict[str, str]] = {}
    for name, stage in stack.stages.items():
        nested = assembly.get_nested_assembly(stage.artifact_id)
        stage_templates[name] = {}
        stage_envs[name] = {}
        for sub in stage.stacks:
            artifact = nested.get_stack_artifact(sub.artifact_id)
            stage_templates[name][sub.node.id] = artifact.template
            env = artifact.environment
            stage_envs[name][sub.node.id] = f"aws://{env.account}/{env.region}"
    support = {a.stack_name: a.template for a in assembly.stacks if a.id != stack.artifact_id}
    return SynthesizedPipeline(stack, template, stage_templates, stage_envs, support)


@pytest.fixture(scope="module")
def pipeline() -> SynthesizedPipeline:
    return synth_pipeline()


def parse(**context: Any) -> Any:
    return pipeline_from_context(context, DEFAULTS)


def errors(**context: Any) -> list[str]:
    with pytest.raises(PipelineConfigError) as info:
        parse(**context)
    return str(info.value).splitlines()


def env(**fields: Any) -> dict[str, Any]:
    return {"name": "dev", "account": DEV_ACCOUNT, "region": "us-west-2", **fields}


# -- configuration ---------------------------------------------------------------------------


def test_without_a_pipeline_the_app_is_the_plain_stage() -> None:
    """No `pipeline` key (the repository's cdk.json as shipped): the plain Stage, unchanged."""
    settings = {
        k: v for k, v in cdk_json_context().items() if k not in ("pipeline", "environments")
    }
    assert pipeline_from_context(settings, DEFAULTS) is None
    app = cdk.App(context=settings)
    assert isinstance(app_module.build(app), RayPdEksStage)


def test_an_empty_pipeline_switches_a_declared_pipeline_off() -> None:
    """`-c pipeline=` deploys a sandbox from a checkout whose cdk.json declares a pipeline."""
    assert parse(pipeline="", environments=ENVIRONMENTS) is None


def test_the_example_file_is_a_valid_declaration() -> None:
    example = json.loads((ROOT / "pipeline.example.json").read_text())
    cfg = parse(**example)
    assert [e.name for e in cfg.environments] == ["dev", "prod"]
    assert [e.approval for e in cfg.environments] == [False, True]
    assert cfg.environments[1].config.gpu_node_count == 3


def test_environments_start_from_the_app_config_and_apply_their_overrides() -> None:
    base = AppConfig.from_context({"clusterName": "shared-name", "systemNodeCount": 2})
    cfg = pipeline_from_context({"pipeline": PIPELINE, "environments": ENVIRONMENTS}, base)
    assert cfg is not None
    dev, prod = cfg.environments
    assert (dev.config.cluster_name, dev.config.system_node_count) == ("shared-name", 2)
    assert (prod.config.cluster_name, prod.config.system_node_count) == ("shared-name", 2)
    assert (dev.config.gpu_node_count, prod.config.gpu_node_count) == (2, 3)
    assert (prod.config.account, prod.config.region) == (PROD_ACCOUNT, "us-east-1")
    assert (prod.config.retain_logs, dev.config.retain_logs) == (True, False)


def test_context_given_with_dash_c_is_json_text() -> None:
    cfg = parse(pipeline=json.dumps(PIPELINE), environments=json.dumps(ENVIRONMENTS))
    assert (cfg.repository, cfg.branch) == ("example-org/ray-pd-eks", "release")


def test_branch_defaults_to_main() -> None:
    pipeline = {k: v for k, v in PIPELINE.items() if k != "branch"}
    assert parse(pipeline=pipeline, environments=[env()]).branch == "main"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("prod", True),
        ("Production", True),
        ("prod-eu", True),
        ("Prod-US-2", True),
        ("dev", False),
        ("staging", False),
        ("product-demo", False),
        ("preprod", False),
    ],
)
def test_approval_defaults_to_on_for_production_names(name: str, expected: bool) -> None:
    assert is_production_name(name) is expected
    (parsed,) = parse(pipeline=PIPELINE, environments=[env(name=name)]).environments
    assert parsed.approval is expected


def test_approval_is_optional_outside_production_and_production_can_be_declared() -> None:
    envs = [
        env(name="staging", approval=True),
        env(name="qa", region="us-east-2", approval=False),
        env(name="live", account=PROD_ACCOUNT, region="us-east-1", production=True),
    ]
    cfg = parse(pipeline=PIPELINE, environments=envs)
    assert [(e.approval, e.production) for e in cfg.environments] == [
        (True, False),
        (False, False),
        (True, True),
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"name": "prod", "approval": False},
            "environment 'prod': 'approval' = false: a production environment is always "
            "approved by a person before it deploys (fixed in stacks/pipeline_stack.py",
        ),
        (
            {"name": "live", "production": True, "approval": False},
            "environment 'live': 'approval' = false: a production environment is always",
        ),
        (
            {"name": "prod-eu", "production": False},
            "environment 'prod-eu': 'production' = false: the name marks a production "
            "environment, which is always one",
        ),
        (
            {"name": "live", "production": "yes"},
            "environment 'live': 'production' = \"yes\": must be true or false",
        ),
    ],
)
def test_data_cannot_remove_the_production_gate(fields: dict[str, Any], expected: str) -> None:
    (line,) = errors(pipeline=PIPELINE, environments=[env(**fields)])
    assert line.startswith(expected), line


def test_production_is_an_account_not_a_name() -> None:
    """A stage of any name in a production environment's account deploys with the same deploy
    role into the same account: it is gated like production (check and approval)."""
    canary = env(name="canary", account=PROD_ACCOUNT, region="us-east-1")
    canary["overrides"] = {"clusterName": "canary"}
    cfg = parse(pipeline=PIPELINE, environments=[*ENVIRONMENTS, canary])
    gates = {e.name: (e.production, e.approval) for e in cfg.environments}
    assert gates == {"dev": (False, False), "prod": (True, True), "canary": (True, True)}
    assert cfg.production_accounts == {PROD_ACCOUNT}
    # Listed before production, in another region: the account still decides.
    early = {**canary, "region": "eu-west-1"}
    cfg = parse(pipeline=PIPELINE, environments=[early, *ENVIRONMENTS])
    assert [e.production for e in cfg.environments] == [True, False, True]


@pytest.mark.parametrize("key", ["production", "approval"])
def test_data_cannot_ungate_an_environment_in_a_production_account(key: str) -> None:
    canary = env(name="canary", account=PROD_ACCOUNT, overrides={"clusterName": "canary"})
    (line,) = errors(pipeline=PIPELINE, environments=[*ENVIRONMENTS, {**canary, key: False}])
    assert line.startswith(
        f"environment 'canary': '{key}' = false: account {PROD_ACCOUNT} holds production "
        "environment 'prod'"
    ), line


def test_production_pipelines_do_not_self_mutate() -> None:
    """The gate in front of production is the pipeline an administrator deployed: a change
    cannot rewrite it on its way through. Without production, self-mutation stays on."""
    assert parse(pipeline=PIPELINE, environments=ENVIRONMENTS).self_mutation is False
    assert parse(pipeline=PIPELINE, environments=[env()]).self_mutation is True
    off = {**PIPELINE, "selfMutation": False}
    assert parse(pipeline=off, environments=[env()]).self_mutation is False
    (line,) = errors(pipeline={**PIPELINE, "selfMutation": True}, environments=ENVIRONMENTS)
    assert line.startswith(
        "pipeline: 'selfMutation' = true: production environment 'prod' is deployed"
    ), line
    (line,) = errors(pipeline={**PIPELINE, "selfMutation": "no"}, environments=[env()])
    assert line == "pipeline: 'selfMutation' = \"no\": must be true or false"


def test_cross_account_only_when_an_environment_is_in_another_account() -> None:
    same = parse(pipeline=PIPELINE, environments=[env(account=PIPELINE_ACCOUNT)])
    assert same.cross_account is False
    assert parse(pipeline=PIPELINE, environments=ENVIRONMENTS).cross_account is True


# -- validation errors: each line names the environment (or pipeline) and the key ------------


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (env(regoin="us-west-2"), "environment 'dev': 'regoin' = \"us-west-2\": unknown key"),
        ({"name": "dev", "region": "us-west-2"}, "environment 'dev': 'account' = null: required"),
        (env(account="2222"), "environment 'dev': 'account' = \"2222\": required"),
        ({"name": "dev", "account": DEV_ACCOUNT}, "environment 'dev': 'region' = null: required"),
        (env(approval="yes"), "environment 'dev': 'approval' = \"yes\": must be true or false"),
        (env(name="dev env"), "environment 'dev env': 'name' = \"dev env\": required"),
        (env(overrides=[]), "environment 'dev': 'overrides' = []: must be an object"),
        (
            env(overrides={"gpuNodeCount": 1}),
            "environment 'dev': overrides.'gpuNodeCount' = 1: prefill and decode need separate "
            "nodes: at least 2",
        ),
        (
            env(overrides={"gpuNodeCont": 3}),
            "environment 'dev': 'overrides.gpuNodeCont' = 3: not a setting of this app",
        ),
        (
            env(overrides={"region": "eu-west-1"}),
            "environment 'dev': 'overrides.region' = \"eu-west-1\": set the environment's own "
            "'region' instead",
        ),
        (
            env(overrides={"pipeline": {}}),
            "environment 'dev': 'overrides.pipeline' = {}: not a setting of this app",
        ),
        (
            env(region="us-east-1", overrides={"gpuAz": "us-west-2b"}),
            "environment 'dev': overrides.'gpuAz' = \"us-west-2b\": is not in region us-east-1",
        ),
    ],
)
def test_a_bad_environment_names_itself_and_the_key(
    environment: dict[str, Any], expected: str
) -> None:
    lines = errors(pipeline=PIPELINE, environments=[environment])
    assert any(line.startswith(expected) for line in lines), lines
    # The hint of config.py (-c / cdk.json) would point at the wrong place.
    assert not any("fix it with `ray-pd-eks settings" in line for line in lines)


def test_an_environment_without_a_name_is_named_by_its_position() -> None:
    lines = errors(pipeline=PIPELINE, environments=[env(), {"account": PROD_ACCOUNT}])
    assert "environments[1]: 'region' = null: required" in "\n".join(lines)
    assert any(line.startswith("environments[1]: 'name' = null: required") for line in lines)


def test_duplicate_environment_names_are_rejected() -> None:
    lines = errors(pipeline=PIPELINE, environments=[env(), env(name="Dev", region="us-east-1")])
    assert lines == [
        "environments[1]: 'name' = \"Dev\": duplicate name: environments[0] has it already"
    ]


def test_two_environments_cannot_own_one_cluster_in_one_account_and_region() -> None:
    lines = errors(pipeline=PIPELINE, environments=[env(), env(name="test")])
    assert lines == [
        "environment 'test': 'clusterName' = \"ray-llm-multinode\": environment 'dev' already "
        f"deploys this cluster name to {DEV_ACCOUNT}/us-west-2; set overrides.clusterName"
    ]
    envs = [env(), env(name="test", overrides={"clusterName": "ray-llm-test"})]
    assert len(parse(pipeline=PIPELINE, environments=envs).environments) == 2


def test_every_problem_is_reported_at_once() -> None:
    envs = [env(account="x"), env(name="prod", region="nowhere")]
    lines = errors(pipeline={**PIPELINE, "branch": "a..b"}, environments=envs)
    assert [line.split(":")[0] for line in lines] == [
        "pipeline",
        "environment 'dev'",
        "environment 'prod'",
    ]


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        ({**PIPELINE, "connection": "x"}, "pipeline: 'connection' = \"x\": unknown key"),
        ({**PIPELINE, "account": None}, "pipeline: 'account' = null: required"),
        ({**PIPELINE, "region": "west"}, "pipeline: 'region' = \"west\": required"),
        ({**PIPELINE, "connectionArn": "arn:aws:s3:::b"}, "pipeline: 'connectionArn' = "),
        ({**PIPELINE, "repository": "ray-pd-eks"}, "pipeline: 'repository' = \"ray-pd-eks\""),
        ({**PIPELINE, "branch": "feature/"}, "pipeline: 'branch' = \"feature/\""),
        ("[1]", "pipeline: must be an object"),
        ("{oops", "pipeline: not valid JSON"),
    ],
)
def test_a_bad_pipeline_names_the_key(pipeline: Any, expected: str) -> None:
    lines = errors(pipeline=pipeline, environments=[env()])
    assert any(line.startswith(expected) for line in lines), lines


def test_environments_need_a_pipeline_and_a_pipeline_needs_environments() -> None:
    assert errors(environments=[env()])[0].startswith("environments: declared without 'pipeline'")
    assert errors(pipeline=PIPELINE, environments=[]) == [
        "environments: must be a non-empty list of environments (name, account, region, "
        "optional approval and overrides), in promotion order"
    ]


def test_pipeline_errors_are_config_errors_for_app_py() -> None:
    assert issubclass(PipelineConfigError, ConfigError)


# -- the synthesized pipeline --------------------------------------------------------------


def test_the_app_with_a_pipeline_is_the_pipeline_stack_only(
    pipeline: SynthesizedPipeline,
) -> None:
    """No plain Stage beside the pipeline: `cdk deploy --all` must not deploy a stray copy."""
    app = pipeline.stack.node.scope
    assert app is not None
    stage_ids = [c.node.id for c in app.node.children if isinstance(c, cdk.Stage)]
    assert stage_ids == []
    assert pipeline.stack.account == PIPELINE_ACCOUNT
    assert pipeline.stack.region == "us-west-2"


def test_stages_deploy_the_environments_in_order(pipeline: SynthesizedPipeline) -> None:
    names = [s["Name"] for s in pipeline.pipeline_stages()]
    assert names == ["Source", "Build", "Assets", "RayPdEks-dev", "RayPdEks-prod"]


@pytest.mark.parametrize(
    ("name", "account", "region"),
    [
        ("dev", DEV_ACCOUNT, "us-west-2"),
        ("prod", PROD_ACCOUNT, "us-east-1"),
    ],
)
def test_each_stage_deploys_in_dependency_order_with_nodes_side_by_side(
    pipeline: SynthesizedPipeline, name: str, account: str, region: str
) -> None:
    gates = ("Approve", "CheckPermissions.Check", "CheckPermissions.Confirm")
    actions = [a for a in pipeline.actions(f"RayPdEks-{name}") if a["Name"] not in gates]
    first = min(a["RunOrder"] for a in actions)
    # The GPU nodes deploy beside the cluster (they wait for the control plane themselves),
    # the workload beside the GPU add-ons, as with `cdk deploy --concurrency`; the readiness
    # check after all of them, the report last.
    assert sorted((a["RunOrder"] - first, a["Name"]) for a in actions) == [
        (0, "Network.Prepare"),
        (1, "Network.Deploy"),
        (2, "Cluster.Prepare"),
        (2, "GpuNodes.Prepare"),
        (3, "Cluster.Deploy"),
        (3, "GpuNodes.Deploy"),
        (4, "GpuAddons.Prepare"),
        (4, "Workload.Prepare"),
        (5, "GpuAddons.Deploy"),
        (5, "Workload.Deploy"),
        (6, "Readiness.Prepare"),
        (7, "Readiness.Deploy"),
        (8, "Endpoint"),
    ]
    prepares = sorted(
        (a for a in actions if a["Name"].endswith(".Prepare")), key=lambda a: a["RunOrder"]
    )
    assert {a["Configuration"]["StackName"] for a in prepares} == {
        f"RayPdEks-{name}-{stack}"
        for stack in ("Network", "Cluster", "GpuNodes", "Workload", "GpuAddons", "Readiness")
    }
    role = json.dumps(prepares[0]["Configuration"]["RoleArn"])
    assert f"cfn-exec-role-{account}-{region}" in role


def test_production_checks_permission_broadening_then_a_person_approves(
    pipeline: SynthesizedPipeline,
) -> None:
    prod = pipeline.actions("RayPdEks-prod")
    names = [(a["RunOrder"], a["Name"], a["ActionTypeId"]["Category"]) for a in prod[:3]]
    assert [n[1:] for n in names] == [
        ("CheckPermissions.Check", "Build"),  # cdk diff --security-only --fail
        ("CheckPermissions.Confirm", "Approval"),  # auto-approved when nothing broadens
        ("Approve", "Approval"),
    ]
    assert names[0][0] < names[1][0] < names[2][0] < min(a["RunOrder"] for a in prod[3:])
    assert PROD_ACCOUNT in prod[2]["Configuration"]["CustomData"]
    check = pipeline.template["Resources"][prod[0]["Configuration"]["ProjectName"]["Ref"]]
    spec = json.dumps(check["Properties"]["Source"])
    assert "cdk diff -a . --security-only --fail" in spec
    # Its CDK CLI is the pinned one too (aws-cdk-lib would install the newest).
    assert f'npm install -g aws-cdk@{cdk_cli_version()}\\",' in spec
    assert 'npm install -g aws-cdk\\",' not in spec
    dev = pipeline.actions("RayPdEks-dev")
    assert [a for a in dev if a["ActionTypeId"]["Category"] == "Approval"] == []
    assert not [a for a in dev if a["Name"].startswith("CheckPermissions")]


def test_production_is_gated_in_code_even_if_the_data_says_otherwise() -> None:
    """An environment parsed as production with approval off (which the config refuses) still
    gets both gates: the stack decides from `production`, not only from `approval`."""
    cfg = parse(pipeline=PIPELINE, environments=ENVIRONMENTS)
    prod = cfg.environments[1]
    assert prod.production and prod.approval
    # Production alone: the dev stage would add a second app to synthesize and nothing here.
    forced = dataclasses.replace(cfg, environments=(dataclasses.replace(prod, approval=False),))
    app = cdk.App(context={**cdk_json_context(), **NO_STAGING}, outdir=outdir("pipeline-gate-"))
    stack = PipelineStack(
        app,
        "Gate",
        pipeline_config=forced,
        env=cdk.Environment(account=PIPELINE_ACCOUNT, region="us-west-2"),
    )
    template = app.synth(validate_on_synthesis=False).get_stack_artifact(stack.artifact_id).template
    (codepipeline,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"
    ]
    (stage,) = [s for s in codepipeline["Properties"]["Stages"] if s["Name"] == "RayPdEks-prod"]
    names = {a["Name"] for a in stage["Actions"]}
    assert {"CheckPermissions.Check", "CheckPermissions.Confirm", "Approve"} <= names


def test_source_is_the_configured_connection(pipeline: SynthesizedPipeline) -> None:
    (source,) = pipeline.actions("Source")
    assert source["Configuration"] == {
        "ConnectionArn": CONNECTION_ARN,
        "FullRepositoryId": "example-org/ray-pd-eks",
        "BranchName": "release",
    }


def test_synth_step_installs_pins_and_runs_the_test_suite_before_synth(
    pipeline: SynthesizedPipeline,
) -> None:
    (synth,) = pipeline.actions("Build")
    spec = pipeline.project_buildspec(synth["Configuration"]["ProjectName"])
    install = spec["phases"]["install"]
    assert install["commands"] == list(INSTALL_COMMANDS)
    assert (
        ".venv/bin/python -m pip install --require-hashes -r requirements-lock.txt"
        in install["commands"]
    )
    assert not [c for c in install["commands"] if "--upgrade" in c or "@latest" in c]
    assert "npm ci" in install["commands"]
    assert install["runtime-versions"] == {"python": "3.12", "nodejs": "22"}
    assert spec["phases"]["build"]["commands"] == ["./scripts/test.sh", "npx cdk synth"]
    assert spec["artifacts"]["base-directory"] == "cdk.out"
    project = pipeline.template["Resources"][synth["Configuration"]["ProjectName"]["Ref"]]
    assert project["Properties"]["Environment"]["ComputeType"] == "BUILD_GENERAL1_MEDIUM"
    assert project["Properties"]["Environment"]["Image"] == "aws/codebuild/standard:8.0"


def test_asset_jobs_install_the_pinned_cdk_assets(pipeline: SynthesizedPipeline) -> None:
    (assets,) = [s for s in pipeline.pipeline_stages() if s["Name"] == "Assets"]
    assert assets["Actions"]
    for action in assets["Actions"]:
        spec = pipeline.project_buildspec(action["Configuration"]["ProjectName"])
        commands = spec["phases"]["install"]["commands"]
        assert commands == [f"npm install -g cdk-assets@{CDK_ASSETS_VERSION}"], commands
    assert re.fullmatch(r"\d+\.\d+\.\d+", CDK_ASSETS_VERSION)


def test_a_retained_stage_checks_for_leftover_log_groups_first(
    pipeline: SynthesizedPipeline,
) -> None:
    """prod keeps its logs (retainLogs): its stage stops on a leftover before anything bills."""

    def checks(name: str) -> list[str]:
        resources = pipeline.stage_templates[name]["Network"]["Resources"]
        return [k for k, r in resources.items() if r["Type"] == "Custom::LeftoverLogGroupsCheck"]

    assert len(checks("prod")) == 1
    assert checks("dev") == []


def test_a_production_pipeline_has_no_self_mutation(pipeline: SynthesizedPipeline) -> None:
    names = [s["Name"] for s in pipeline.pipeline_stages()]
    assert names[:3] == ["Source", "Build", "Assets"]
    assert "UpdatePipeline" not in names


def test_the_permission_check_runs_on_the_pipeline_build_image(
    pipeline: SynthesizedPipeline,
) -> None:
    check, _confirm, approve = pipeline.actions("RayPdEks-prod")[:3]
    project = pipeline.template["Resources"][check["Configuration"]["ProjectName"]["Ref"]]
    assert project["Properties"]["Environment"]["Image"] == "aws/codebuild/standard:8.0"
    # The approval says what the check covers instead of "has passed".
    comment = approve["Configuration"]["CustomData"]
    assert "has passed" not in comment
    assert "new IAM statements and security-group rules only" in comment


def test_cross_account_artifacts_use_a_rotating_key(pipeline: SynthesizedPipeline) -> None:
    keys = pipeline.resources("AWS::KMS::Key")
    assert [k["Properties"]["EnableKeyRotation"] for k in keys.values()] == [True]


def test_each_stage_gets_its_environment_and_overrides(pipeline: SynthesizedPipeline) -> None:
    def gpu_desired(name: str) -> int:
        groups = [
            r["Properties"]
            for r in pipeline.stage_templates[name]["GpuNodes"]["Resources"].values()
            if r["Type"] == "AWS::EKS::Nodegroup"
        ]
        assert len(groups) == 1
        return int(groups[0]["ScalingConfig"]["DesiredSize"])

    assert (gpu_desired("dev"), gpu_desired("prod")) == (2, 3)
    assert set(pipeline.stage_envs["dev"].values()) == {f"aws://{DEV_ACCOUNT}/us-west-2"}
    assert set(pipeline.stage_envs["prod"].values()) == {f"aws://{PROD_ACCOUNT}/us-east-1"}


def test_post_deploy_step_prints_the_stage_outputs(pipeline: SynthesizedPipeline) -> None:
    endpoint = pipeline.actions("RayPdEks-prod")[-1]
    assert endpoint["Name"] == "Endpoint"
    env_vars = {
        v["name"]: v["value"] for v in json.loads(endpoint["Configuration"]["EnvironmentVariables"])
    }
    workload = pipeline.stack.stages["prod"].workload.artifact_id
    cluster = pipeline.stack.stages["prod"].cluster.artifact_id
    assert env_vars["PORT_FORWARD_COMMAND"] == f"#{{{workload}.PortForwardCommand}}"
    assert env_vars["SERVE_SERVICE"] == f"#{{{workload}.ServeService}}"
    assert env_vars["UPDATE_KUBECONFIG_COMMAND"] == f"#{{{cluster}.UpdateKubeconfigCommand}}"
    gpu_nodes = pipeline.stack.stages["prod"].gpu_nodes.artifact_id
    assert env_vars["GPU_AVAILABILITY_ZONE"] == f"#{{{gpu_nodes}.GpuAvailabilityZone}}"
    assert env_vars["GPU_NODEGROUP_NAME"] == f"#{{{gpu_nodes}.GpuNodegroupName}}"
    # The readiness facts the deploy proved are printed too.
    readiness = pipeline.stack.stages["prod"].readiness.artifact_id
    for fact in ("APP_STATUS", "PREFILL_NODE", "DECODE_NODE", "KV_BACKEND", "MODELS"):
        assert env_vars[f"READINESS_{fact}"].startswith(f"#{{{readiness}.Readiness")
    commands = pipeline.project_buildspec(endpoint["Configuration"]["ProjectName"])["phases"][
        "build"
    ]["commands"]
    assert 'echo "PORT_FORWARD_COMMAND: $PORT_FORWARD_COMMAND"' in commands
    assert commands[0] == f'echo "ray-pd-eks prod ({PROD_ACCOUNT}/us-east-1) is deployed."'


def test_another_region_gets_a_cross_region_support_stack(pipeline: SynthesizedPipeline) -> None:
    """CodePipeline needs an artifact bucket in each region it deploys to (prod: us-east-1)."""
    assert list(pipeline.support_templates) == ["RayPdEksPipeline-support-us-east-1"]


def test_a_single_account_pipeline_passes_cdk_nag_without_a_kms_key() -> None:
    """The other shape: no cross-account key, no support stack; still no unacknowledged
    cdk-nag finding (synth raises on one)."""
    context = pipeline_context(
        environments=[{"name": "sandbox", "account": PIPELINE_ACCOUNT, "region": "us-west-2"}]
    )
    app = cdk.App(context=context, outdir=outdir("pipeline-"))
    stack = app_module.build(app)
    assembly = app.synth()
    assert [a.stack_name for a in assembly.stacks] == ["RayPdEksPipeline"]
    template = assembly.get_stack_artifact(stack.artifact_id).template
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    # Without production the pipeline updates itself, with the pinned CDK CLI.
    (codepipeline,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"
    ]
    (mutate,) = [s for s in codepipeline["Properties"]["Stages"] if s["Name"] == "UpdatePipeline"]
    project = template["Resources"][mutate["Actions"][0]["Configuration"]["ProjectName"]["Ref"]]
    spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
    assert f"npm install -g aws-cdk@{cdk_cli_version()}" in spec["phases"]["install"]["commands"]
    package = json.loads((ROOT / "package.json").read_text())
    assert cdk_cli_version() == package["devDependencies"]["aws-cdk"]


def test_an_invalid_environment_fails_the_app_like_any_config_error() -> None:
    app = cdk.App(context=pipeline_context(environments=[env(overrides={"gpuNodeCount": 1})]))
    with pytest.raises(ConfigError, match=r"environment 'dev': overrides\.'gpuNodeCount' = 1"):
        app_module.build(app)
