"""Compliance over every synthesized template: cdk-nag, cfn-lint, stable logical IDs."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from tests import cfn_lint_pool
from tests.synth import Synthesized


# Linted in the background as each session app is synthesized (tests/cfn_lint_pool.py, which
# lists the ignored rules with their reasons); these tests run last and collect the results.
@pytest.mark.cfn_lint
@pytest.mark.parametrize(
    "stack", ["Network", "Cluster", "GpuNodes", "Workload", "GpuAddons", "Readiness"]
)
@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_cfn_lint_is_clean(stack: str, app_name: str, request: pytest.FixtureRequest) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    assert cfn_lint_pool.findings(app_name, stack, app.templates[stack]) == []


# Its GpuNodes template is the default app's, and its Network template differs from it by one
# export (the second public subnet's id, for the ALB); the stacks that hold the endpoint, the
# probe and the probe's machinery are linted.
@pytest.mark.cfn_lint
@pytest.mark.parametrize("stack", ["Cluster", "Workload", "Readiness"])
@pytest.mark.parametrize("app_name", ["public_cognito_app"])
def test_cfn_lint_is_clean_with_an_internet_facing_probe(
    stack: str, app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    assert cfn_lint_pool.findings(app_name, stack, app.templates[stack]) == []


@pytest.mark.cfn_lint
def test_cfn_lint_in_the_background_reports_a_finding() -> None:
    """The background lint is not vacuous: a template with a mistake that no ignored rule
    covers comes back with the rule, the message and the line."""
    bad = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"DisplayNme": "x"}}}}
    (finding,) = cfn_lint_pool.lint_in_background(bad).result()
    assert finding.startswith("E3002 Additional properties are not allowed ('DisplayNme'")
    assert finding.endswith("(line 6)")


@pytest.mark.cfn_lint
def test_cfn_lint_skips_only_the_exact_templates_it_found_clean(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The cache of clean templates (tests/cfn_lint_pool.py): a template with a finding is not
    kept, and a template that changes is linted again. Within a run, the same text is linted
    once."""
    monkeypatch.setenv("CFN_LINT_CACHE", "on")
    for name, value in (("CACHE_FILE", tmp_path / "clean.json"), ("_clean", None)):
        monkeypatch.setattr(cfn_lint_pool, name, value)
    monkeypatch.setattr(cfn_lint_pool, "_newly_clean", [])
    monkeypatch.setattr(cfn_lint_pool, "_wanted", set())
    monkeypatch.setattr(cfn_lint_pool, "_linting", {})
    clean = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    bad = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"DisplayNme": "x"}}}}
    cfn_lint_pool.want([("probe", "Clean"), ("probe", "Bad"), ("twin", "Bad")])
    cfn_lint_pool.submit("probe", {"Clean": clean, "Bad": bad})
    cfn_lint_pool.submit("twin", {"Bad": json.loads(json.dumps(bad))})
    assert len(cfn_lint_pool._linting) == 2
    assert cfn_lint_pool.findings("probe", "Clean", clean) == []
    assert len(cfn_lint_pool.findings("probe", "Bad", bad)) == 1
    assert len(cfn_lint_pool.findings("twin", "Bad", bad)) == 1
    cfn_lint_pool._save_cache()  # as the session's end does; the next run reads it
    monkeypatch.setattr(cfn_lint_pool, "_clean", None)
    monkeypatch.setattr(cfn_lint_pool, "_linting", {})

    def linted(template_json: str) -> list[str]:
        raise AssertionError(f"linted: {template_json}")

    monkeypatch.setattr(cfn_lint_pool, "_lint_text_in_background", linted)
    monkeypatch.setattr(cfn_lint_pool, "lint_template", linted)
    cfn_lint_pool.submit("probe", {"Clean": clean})
    assert cfn_lint_pool.findings("probe", "Clean", clean) == []
    with pytest.raises(AssertionError, match="DisplayNme"):
        cfn_lint_pool.submit("probe", {"Bad": bad})
    renamed = {"Resources": {"Queue": clean["Resources"]["Topic"]}}
    with pytest.raises(AssertionError, match="Queue"):
        cfn_lint_pool.findings("probe", "Clean", renamed)


def test_cdk_nag_runs_and_fails_an_unacknowledged_finding(tmp_path: Any) -> None:
    # The session fixtures synthesize with the AwsSolutions plugin and would have raised on a
    # finding; this proves the plugin really rejects one.
    app = cdk.App(outdir=str(tmp_path))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    s3.Bucket(cdk.Stack(app, "Probe"), "Bucket")
    with pytest.raises(Exception, match=r"AwsSolutions-S1\b"):
        app.synth()


def _acknowledgments(app: Synthesized) -> list[dict[str, str]]:
    """Every acknowledged rule with its reason and the path of the construct that carries it:
    the stacks' entries as synthesis wrote them into the assembly (reading the construct tree
    instead is a jsii round trip per construct, about 0.6 s an app), and the Stage's own."""
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    entries = [(path.lstrip("/"), data) for path, data in app.metadata(key)]
    entries += [(app.stage.node.path, e.data) for e in app.stage.node.metadata if e.type == key]
    return [
        {"id": rule, "reason": reason, "path": path}
        for path, data in entries
        for rule, reason in data.items()
    ]


def test_every_acknowledgment_names_a_rule_and_gives_a_reason(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    acks = [
        a
        for a in _acknowledgments(default_app) + _acknowledgments(variant_app)
        if a["id"].startswith("AwsSolutions::")  # aws-cdk-lib records a few of its own
    ]
    assert len(acks) >= 10, "expected acknowledgments next to generated resources"
    for ack in acks:
        assert ack["id"].startswith("AwsSolutions::AwsSolutions-"), ack
        assert len(ack["reason"]) >= 40, ack
    # Never a blanket acknowledgment on a stack or the stage.
    assert not [a for a in acks if a["path"].count("/") < 2]


def test_public_endpoint_acknowledgment_only_when_asked_for(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    def eks1(app: Synthesized) -> list[dict[str, str]]:
        return [a for a in _acknowledgments(app) if "EKS1" in a["id"]]

    assert eks1(default_app) == []
    assert len(eks1(variant_app)) == 1


# Replacing any of these loses data or the running endpoint; a refactor must not rename them.
PINNED_LOGICAL_IDS = {
    "Network": {"NetworkVpc7FB7348F": "AWS::EC2::VPC"},
    "Cluster": {
        "Cluster9EE0221C": "AWS::EKS::Cluster",
        "ClusterSecretsKey462B29B5": "AWS::KMS::Key",
    },
    # The sticky AZ choice keeps its id, so an update never re-chooses by accident (renamed
    # once from GpuAzE036B77A, when its Provider moved into this stack: on that Create it keeps
    # the AZ and block of the subnet the GPU route table serves, docs/lifecycle.md). The GPU
    # subnet, launch template and node group keep theirs through that upgrade too; they are
    # replaceable by design on an AZ move (their names follow the AZ).
    "GpuNodes": {
        "GpuAzChoice5ED869E1": "Custom::GpuAvailabilityZone",
        "GpuSubnet357B4339": "AWS::EC2::Subnet",
        "GpuNodesLaunchTemplate0E1B1CE7": "AWS::EC2::LaunchTemplate",
        "GpuNodes20C68506": "AWS::EKS::Nodegroup",
    },
    "Workload": {"SystemNodesE123D1FA": "AWS::EKS::Nodegroup"},
}


def test_stateful_logical_ids_are_stable(default_app: Synthesized) -> None:
    for stack, ids in PINNED_LOGICAL_IDS.items():
        resources = default_app.templates[stack]["Resources"]
        assert {k: resources[k]["Type"] for k in ids if k in resources} == ids, stack
