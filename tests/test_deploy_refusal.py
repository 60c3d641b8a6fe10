"""Settings that synthesize but must not deploy as they are: a CloudFormation rule in the stack
that deploys first refuses the deploy before anything is created, naming the setting and the
fix (pd_constructs/lifecycle/deploy_refusal.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Stack

from pd_constructs.lifecycle.deploy_refusal import DeployRefusal
from stacks.network_stack import NO_ADMINS_REASON
from tests.synth import Synthesized


def _rules(app: Synthesized, stack: str) -> dict[str, Any]:
    """The app's rules (CDK's own CheckBootstrapVersion aside)."""
    rules = app.templates[stack].get("Rules", {})
    return {k: v for k, v in rules.items() if k != "CheckBootstrapVersion"}


def test_the_defaults_refuse_the_deploy_in_the_first_stack_naming_the_setting_and_fix(
    default_app: Synthesized,
) -> None:
    (rule,) = _rules(default_app, "Network").values()
    (assertion,) = rule["Assertions"]
    assert assertion["AssertDescription"] == NO_ADMINS_REASON
    assert "adminPrincipalArns is empty" in NO_ADMINS_REASON
    assert "ray-pd-eks settings --add-admin-me" in NO_ADMINS_REASON
    assert "`ray-pd-eks settings --set allowNoAdmins=true`" in NO_ADMINS_REASON
    # False in every region (none is named "none"); no condition that could skip it.
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "none"]}
    assert "RuleCondition" not in rule
    # Every other stack deploys after the Network stack.
    stage = default_app.stage
    for stack in stage.stacks[1:]:
        assert stage.network in _upstream(stack), stack.stack_name
    # The synth warns, once.
    warnings = [d for _, d in default_app.metadata("aws:cdk:warning") if "adminPrincipalArns" in d]
    assert len(warnings) == 1 and "cdk deploy will be refused" in warnings[0]


def _upstream(stack: Stack) -> set[Stack]:
    seen: set[Stack] = set()
    todo = list(stack.dependencies)
    while todo:
        s = todo.pop()
        if s not in seen:
            seen.add(s)
            todo.extend(s.dependencies)
    return seen


def test_admins_or_an_explicit_opt_in_deploy(
    variant_app: Synthesized, token_app: Synthesized
) -> None:
    assert variant_app.config.admin_principal_arns and not _rules(variant_app, "Network")
    assert token_app.config.allow_no_admins and not token_app.config.admin_principal_arns
    assert not _rules(token_app, "Network")
    # Opted in, the synth still says that nobody can administer the cluster.
    warnings = [d for _, d in token_app.metadata("aws:cdk:warning") if "NOBODY" in d]
    assert len(warnings) == 1


def test_a_refusal_without_a_reason_is_a_bug() -> None:
    with pytest.raises(ValueError, match="reason"):
        DeployRefusal(Stack(), "Refusal", reason=" ", warning_id="x:y")


# -- several deployments in one account: deploymentName ---------------------------------------


def test_a_deployment_name_prefixes_the_stage_stacks_cluster_and_its_names(
    public_cognito_app: Synthesized, default_app: Synthesized
) -> None:
    app = public_cognito_app
    assert app.config.deployment_name == "team-a"
    assert app.stage.node.id == "team-a-RayPdEks"
    assert [s.stack_name for s in app.stage.stacks] == [
        f"team-a-{s.stack_name}" for s in default_app.stage.stacks
    ]
    (cluster,) = app.resources("Cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == "team-a-ray-llm-multinode"
    (default_cluster,) = default_app.resources("Cluster", "AWS::EKS::Cluster").values()
    assert default_cluster["Properties"]["Name"] == "ray-llm-multinode"
    # Every explicit name that must be unique in the account carries it: log groups, the
    # dashboard, the alarms, the exports.
    named = {
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::CloudWatch::Dashboard": "DashboardName",
        "AWS::CloudWatch::Alarm": "AlarmName",
    }
    seen = 0
    for stack, template in app.templates.items():
        for resource in template["Resources"].values():
            name = resource.get("Properties", {}).get(named.get(resource["Type"], ""), None)
            if isinstance(name, str):
                seen += 1
                assert "team-a-ray-llm-multinode" in name, (stack, name)
        for output in template.get("Outputs", {}).values():
            export = output.get("Export", {}).get("Name", "")
            assert not export or export.startswith("team-a-RayPdEks-"), export
    assert seen >= 5


def test_the_default_deployment_name_keeps_todays_names(default_app: Synthesized) -> None:
    """Empty: the stage, stack and cluster names deployed stacks already have."""
    assert default_app.config.deployment_name == ""
    assert default_app.stage.node.id == "RayPdEks"
    assert [s.stack_name for s in default_app.stage.stacks] == [
        "RayPdEks-Network",
        "RayPdEks-Cluster",
        "RayPdEks-GpuNodes",
        "RayPdEks-Workload",
        "RayPdEks-GpuAddons",
        "RayPdEks-Readiness",
    ]
    assert default_app.config.cluster_name == "ray-llm-multinode"
