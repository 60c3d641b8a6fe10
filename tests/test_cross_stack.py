"""Which exports exist per setting (ray_pd_eks/cross_stack.py), checked two ways against the
synthesized templates of the session's configurations: every export is a row of the table that
applies, or one that every configuration makes; every row that applies is an export of its
stack that its importer imports, and a row that does not apply has none. Then what a change
that removes a reference needs: the importing stacks deployed first, and the `settings`
command saying so."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from pd_constructs.readiness.endpoint_probe import probe_skip_reason
from ray_pd_eks import cross_stack
from ray_pd_eks.cli.errors import DEPLOY_COMMAND
from ray_pd_eks.config import DEFAULTS, AppConfig
from ray_pd_eks.cross_stack import REFERENCES, Reference, ordered_deploy, removed_references
from tests.cli_fixtures import Harness
from tests.conftest import CERTIFICATE, IDP_ISSUER, IDP_JWKS
from tests.synth import ROOT, Synthesized

APPS = ("default_app", "variant_app", "token_app", "public_cognito_app")
_EXPORT = re.compile(r"^ExportsOutput(?:Ref|FnGetAtt)(\w+)$")


def _imports(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {str(v) for k, v in node.items() if k == "Fn::ImportValue"}
        return found.union(*(_imports(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_imports(v) for v in node))
    return set()


def _exports(app: Synthesized) -> dict[tuple[str, str], set[str]]:
    """(exporting stack, the export's logical id past its prefix) -> the stacks importing it."""
    stacks = {name: template for name, template in app.templates.items()}
    imported = {name: _imports(template) for name, template in stacks.items()}
    out = {}
    for name, template in stacks.items():
        for output in template.get("Outputs", {}).values():
            if "Export" not in output:
                continue
            export = output["Export"]["Name"]
            (exported,) = _EXPORT.findall(export.split(":", 1)[1])
            out[(name, exported)] = {s for s, found in imported.items() if export in found}
    return out


def _rows_of(key: tuple[str, str]) -> list[Reference]:
    stack, exported = key
    return [r for r in REFERENCES if r.exporter == stack and exported.startswith(r.resource)]


@pytest.fixture(scope="module")
def always(
    default_app: Synthesized,
    variant_app: Synthesized,
    token_app: Synthesized,
    public_cognito_app: Synthesized,
) -> set[tuple[str, str]]:
    """The exports no row names: every configuration makes them."""
    per_app = [
        {key for key in _exports(app) if not _rows_of(key)}
        for app in (default_app, variant_app, token_app, public_cognito_app)
    ]
    assert all(found == per_app[0] for found in per_app), (
        "an export no row names differs per setting"
    )
    return per_app[0]


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_every_export_is_a_row_that_applies_or_made_always(
    app: Synthesized, always: set[tuple[str, str]]
) -> None:
    problems = []
    for key, importers in _exports(app).items():
        rows = _rows_of(key)
        if not rows:
            assert key in always
            continue
        (row,) = rows
        if not row.applies(app.config):
            problems.append(f"{key}: row {row.resource} ({row.when}) does not apply")
        if importers != {row.importer}:
            problems.append(f"{key}: imported by {sorted(importers)}, not {row.importer}")
    assert not problems, problems


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_every_row_that_applies_is_exported_and_imported(app: Synthesized) -> None:
    exports = _exports(app)
    for row in REFERENCES:
        found = [k for k in exports if row in _rows_of(k)]
        if row.applies(app.config):
            assert found, f"{row.resource} ({row.when}) is not exported by {row.exporter}"
            assert all(exports[k] == {row.importer} for k in found), row
        else:
            assert not found, f"{row.resource} exported though {row.when} does not apply"


def test_what_the_session_checks_and_what_it_cannot(
    default_app: Synthesized,
    variant_app: Synthesized,
    token_app: Synthesized,
    public_cognito_app: Synthesized,
) -> None:
    """Every row applies in some configuration of the session, but the ones listed as not
    synthesized (each with its reason), which apply in none."""
    configs = (default_app.config, variant_app.config, token_app.config, public_cognito_app.config)
    unchecked = {r.resource for r in REFERENCES if not any(r.applies(c) for c in configs)}
    assert unchecked == set(cross_stack.NOT_SYNTHESIZED_IN_TESTS)


ENDPOINT = {"endpointCertificateArn": CERTIFICATE, "endpointAllowedCidrs": ["10.0.0.0/8"]}
INTERNAL = {**ENDPOINT, "endpointExposure": "internal"}
PUBLIC = {**ENDPOINT, "endpointExposure": "internet-facing"}
IDP = {"endpointJwtIssuer": IDP_ISSUER, "endpointJwksUri": IDP_JWKS, "endpointJwtAudience": "a"}
CONFIGS = {
    "defaults": {},
    "internal": INTERNAL,
    "internal, no auth": {**INTERNAL, "endpointAuth": "none"},
    "internal, existing IdP": {**INTERNAL, **IDP},
    "internet-facing": PUBLIC,
    "internet-facing, existing IdP": {**PUBLIC, **IDP},
}


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS)
def test_the_endpoint_probe_condition_is_the_probes(overrides: dict[str, Any]) -> None:
    config = DEFAULTS.with_overrides(overrides)
    probe = cross_stack.CONDITIONS["endpoint probe"](config)
    assert probe == (probe_skip_reason(config) == "")


@pytest.mark.parametrize(
    ("before", "after", "resources", "commands"),
    [
        (
            {},
            {"observability": "none"},
            ["ObservabilityAlarmTopic"],
            ["npx cdk deploy 'RayPdEks/Readiness' --exclusively"],
        ),
        # Without the KV probe nothing imports the topic: the usual deploy.
        (
            {"kvProbeIntervalMinutes": 0},
            {"kvProbeIntervalMinutes": 0, "observability": "none"},
            [],
            [],
        ),
        (
            INTERNAL,
            {},
            [
                "ProvidersEndpointProbeFunctionServiceRole",
                "ProvidersEndpointProbeSecurityGroup",
                "ProvidersEndpointProbeProviderframeworkonEvent",
                "ApplicationEndpointLoadBalancer",
                "ApplicationEndpointTokenIssuerUserPool",
                "NetworkVpcLoadBalancerSubnet1Subnet",
                "NetworkVpcLoadBalancerSubnet2Subnet",
            ],
            [
                "npx cdk deploy 'RayPdEks/Readiness' --exclusively",
                "npx cdk deploy 'RayPdEks/Workload' --exclusively",
            ],
        ),
        (
            PUBLIC,
            INTERNAL,
            ["EgressEip", "NetworkVpcPublicSubnet2"],
            ["npx cdk deploy 'RayPdEks/Workload' --exclusively"],
        ),
        # Tokens from an existing identity provider: no probe, so no Cognito or probe export.
        (
            INTERNAL,
            {**INTERNAL, **IDP},
            [
                "ProvidersEndpointProbeFunctionServiceRole",
                "ProvidersEndpointProbeSecurityGroup",
                "ProvidersEndpointProbeProviderframeworkonEvent",
                "ApplicationEndpointLoadBalancer",
                "ApplicationEndpointTokenIssuerUserPool",
            ],
            [
                "npx cdk deploy 'RayPdEks/Readiness' --exclusively",
                "npx cdk deploy 'RayPdEks/Workload' --exclusively",
            ],
        ),
        # Turning a feature on only adds exports: the usual deploy.
        ({"observability": "none"}, {}, [], []),
        ({}, PUBLIC, [], []),
    ],
)
def test_a_change_that_removes_a_reference_deploys_the_importers_first(
    before: dict[str, Any], after: dict[str, Any], resources: list[str], commands: list[str]
) -> None:
    removed = removed_references(DEFAULTS.with_overrides(before), DEFAULTS.with_overrides(after))
    assert [r.resource for r in removed] == resources
    assert ordered_deploy(removed) == ([*commands, DEPLOY_COMMAND] if commands else [])


def test_the_table_is_in_docs_lifecycle_md() -> None:
    doc = (ROOT / "docs" / "lifecycle.md").read_text(encoding="utf-8")
    assert cross_stack.markdown() in doc, "render it with ray_pd_eks.cross_stack.markdown()"
    assert cross_stack.DEPLOY_ALL == DEPLOY_COMMAND


def test_a_row_whose_exporter_deploys_later_is_refused() -> None:
    with pytest.raises(ValueError, match="Readiness deploys after its importer"):
        Reference("Readiness", "Workload", "X", "x", "endpoint probe")
    with pytest.raises(ValueError, match="Workload deploys after its importer"):
        Reference("Workload", "Workload", "X", "x", "endpoint probe")  # no stack imports itself
    assert Reference("Cluster", "Workload", "X", "x", "endpoint probe").importer == "Workload"
    with pytest.raises(ValueError, match="condition 'sometimes' unknown"):
        Reference("Network", "Workload", "X", "x", "sometimes")


# -- the settings command says it ----------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    shutil.copy(ROOT / "cdk.json", directory / "cdk.json")
    return directory


def test_settings_prints_the_ordered_deploy_when_a_change_removes_a_reference(
    project: Path,
) -> None:
    result = Harness(project / "cdk.json").run("settings", "--set", "observability=none")
    assert result.code == 0, result.err
    assert result.out.splitlines()[1:] == [
        "Every later command reads it. It removes what one stack passes to another (Workload "
        "to Readiness: the alarm topic, for the KV probe's alarms): on stacks deployed with "
        "the old value, deploy the importing stacks first (docs/lifecycle.md, Turning a "
        "feature off on a deployed stack):",
        "  npx cdk deploy 'RayPdEks/Readiness' --exclusively",
        f"  {DEPLOY_COMMAND}",
    ]
    # Back on: nothing is removed, the usual line.
    result = Harness(project / "cdk.json").run("settings", "--unset", "observability")
    assert result.out.splitlines()[1:] == [
        f"Every later command reads it; apply it with `{DEPLOY_COMMAND}`."
    ]
    assert json.loads((project / "settings.local.json").read_text()) == {}


def test_removed_references_compare_whole_configurations() -> None:
    config: AppConfig = DEFAULTS
    assert removed_references(config, config) == []


# What the previous release's GpuNodes stack imported from the Cluster stack (its templates
# with the defaults and with GPU autoscaling, synthesized at the commit before the GpuNodes
# stack stopped depending on the Cluster stack). The two deploy side by side now, so the
# Cluster stack's update may run while the old GpuNodes stack still imports these.
PREVIOUS_GPU_NODES_IMPORTS = {
    "ExportsOutputFnGetAttCluster9EE0221CArn9E0B683E",
    "ExportsOutputFnGetAttCluster9EE0221CClusterSecurityGroupIdC9685297",
    "ExportsOutputFnGetAttClusterKubectlProviderframeworkonEvent7915A232Arn81113105",
    "ExportsOutputFnGetAttGpuAzChooserProviderframeworkonEventC4F5C3F9Arn602EF012",
    "ExportsOutputFnGetAttProvidersGpuCapacityWatchProviderframeworkonEvent60047BB8ArnBBFEB054",
    "ExportsOutputRefCluster9EE0221C4853B4C3",
    "ExportsOutputRefVpcCniRole0E3ED76EEF50D054",
}


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_the_cluster_stack_keeps_every_export_the_old_gpu_nodes_stack_imported(
    app: Synthesized,
) -> None:
    prefix = f"{app.stage.cluster.stack_name}:"
    exported = {
        o["Export"]["Name"].removeprefix(prefix)
        for o in app.templates["Cluster"].get("Outputs", {}).values()
        if "Export" in o
    }
    kept = {k.name for k in cross_stack.KEPT_FOR_UPGRADE if k.kind == "export"}
    assert kept == PREVIOUS_GPU_NODES_IMPORTS
    assert kept <= exported, sorted(kept - exported)
    # The new GpuNodes stack imports none of them (nothing of the Cluster stack at all).
    assert prefix not in json.dumps(app.templates["GpuNodes"])


def test_the_kept_providers_are_the_ones_the_kept_exports_name(default_app: Synthesized) -> None:
    """Same construct paths, so the same logical ids (and so the same functions) as the
    previous release's, whose ARNs the old custom resources carry as their ServiceToken."""
    cluster = default_app.stage.cluster
    resources = default_app.templates["Cluster"]["Resources"]
    for kept in (k for k in cross_stack.KEPT_FOR_UPGRADE if k.kind == "provider"):
        logical = kept.name.replace("/", "") + "ProviderframeworkonEvent"
        matches = [k for k in resources if k.startswith(logical) and "ServiceRole" not in k]
        assert len(matches) == 1 and resources[matches[0]]["Type"] == "AWS::Lambda::Function"
        export = f"ExportsOutputFnGetAtt{matches[0]}Arn"
        assert any(e.startswith(export) for e in PREVIOUS_GPU_NODES_IMPORTS), kept.name
        node = cluster.node
        for part in kept.name.split("/"):
            node = node.find_child(part).node


def test_lifecycle_lists_what_is_kept_for_the_upgrade() -> None:
    text = (ROOT / "docs" / "lifecycle.md").read_text()
    assert cross_stack.kept_markdown() in text
    assert "remove in the next release" in text
