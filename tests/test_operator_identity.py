"""The KubeRay operator's identity, named in one place: the admission policies that admit only
it, the identities table, the NetworkPolicy that admits its pod and the chart the stack
installs all agree (pd_constructs/common/helm.py derives the name from the release and the chart's
naming rules; this test recomputes it from what is synthesized and from the chart's own
values.yaml, kept in tests/schemas/kuberay-v1.7.0/)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from pd_constructs.common.helm import (
    KUBERAY_CHART,
    KUBERAY_CHART_NAMING,
    KUBERAY_CHART_NAMING_VERSION,
    KUBERAY_RELEASE,
    chart_fullname,
    chart_name,
    chart_service_account,
    kuberay_operator_identity,
)
from pd_constructs.inventory import identities
from pd_constructs.network.network_policy import OPERATOR_POD_LABELS
from pd_constructs.serving.admission import (
    DAEMONSET_CONTROLLER_USERS,
    OPERATOR_USER,
    REPLICASET_CONTROLLER_USERS,
)
from ray_pd_eks.templates import deep_merge
from tests.synth import ROOT, Synthesized

SCHEMAS = ROOT / "tests" / "schemas" / "kuberay-v1.7.0"
CHART_VALUES = yaml.safe_load((SCHEMAS / "kuberay-operator-values.yaml").read_text())
_USER = re.compile(r"system:serviceaccount:[a-z0-9-]+:[a-z0-9-]+")


def test_the_naming_values_are_the_pinned_charts() -> None:
    chart = yaml.safe_load((SCHEMAS / "kuberay-operator-Chart.yaml").read_text())
    assert chart["name"] == KUBERAY_CHART and chart["version"] == KUBERAY_CHART_NAMING_VERSION
    assert {key: CHART_VALUES[key] for key in KUBERAY_CHART_NAMING} == KUBERAY_CHART_NAMING


@pytest.mark.parametrize(
    ("values", "release", "fullname", "account"),
    [
        (KUBERAY_CHART_NAMING, "anything", "kuberay-operator", "kuberay-operator"),
        # No overrides: the release name when it contains the chart's name, else both.
        ({"serviceAccount": {"create": True}}, "kuberay-operator", "kuberay-operator", None),
        (
            {"serviceAccount": {"create": True}},
            "my-kuberay-operator-1",
            "my-kuberay-operator-1",
            None,
        ),
        ({"serviceAccount": {"create": True}}, "ray", "ray-kuberay-operator", None),
        ({"nameOverride": "op", "serviceAccount": {"create": True}}, "ray", "ray-op", None),
        # An explicit account name wins; without create, the name or `default`.
        ({"serviceAccount": {"create": True, "name": "sa"}}, "ray", "ray-kuberay-operator", "sa"),
        ({"serviceAccount": {"create": False}}, "ray", "ray-kuberay-operator", "default"),
        ({"serviceAccount": {"create": False, "name": "x"}}, "ray", "ray-kuberay-operator", "x"),
        # Helm truncates at 63 and drops one trailing '-'.
        ({"fullnameOverride": "a" * 62 + "-b"}, "r", "a" * 62, "default"),
        ({"fullnameOverride": "a" * 70}, "r", "a" * 63, "default"),
    ],
)
def test_the_charts_naming_rules(
    values: Mapping[str, Any], release: str, fullname: str, account: str | None
) -> None:
    """kuberay-operator chart 1.7.0, templates/_helpers.tpl: `kuberay-operator.fullname` and
    `kuberay-operator.serviceAccount.name` (the account defaults to the fullname)."""
    assert chart_fullname(KUBERAY_CHART, release, values) == fullname
    assert chart_service_account(KUBERAY_CHART, release, values) == (account or fullname)


def _installed(app: Synthesized) -> dict[str, Any]:
    (chart,) = [
        c["Properties"]
        for c in app.resources("Workload", "Custom::AWSCDK-EKS-HelmChart").values()
        if c["Properties"]["Release"] == KUBERAY_RELEASE
    ]
    return dict(chart)


def test_policies_table_chart_and_network_policy_name_one_operator(
    default_app: Synthesized,
) -> None:
    chart = _installed(default_app)
    # What Helm renders: the chart's values.yaml with the stack's values over it.
    values = deep_merge(CHART_VALUES, json.loads(chart["Values"]))
    account = chart_service_account(KUBERAY_CHART, chart["Release"], values)
    installed = f"system:serviceaccount:{chart['Namespace']}:{account}"
    assert installed == OPERATOR_USER == kuberay_operator_identity().user

    # Every operator user any manifest of the workload stack names is that one ...
    template = json.dumps(default_app.templates["Workload"])
    controllers = {*DAEMONSET_CONTROLLER_USERS, *REPLICASET_CONTROLLER_USERS}
    named = set(_USER.findall(template)) - controllers
    assert named == {installed}
    # ... in exactly the policies the table says.
    (row,) = identities.CHART_ACCOUNTS
    assert row.subject == installed
    ns = default_app.config.namespace
    resources = default_app.templates["Workload"]["Resources"].values()
    naming = set()
    for resource in resources:
        text = json.dumps(resource)
        if f"'{installed}'" in text:
            naming |= set(re.findall(r"ray-pd-eks-[a-z-]+\.[a-z0-9-]+", text))
    assert {n.format(ns=ns) for n in row.named_by} <= naming
    assert {"app.kubernetes.io/name": chart_name(KUBERAY_CHART, values)} == OPERATOR_POD_LABELS


def test_the_cluster_tier_runs_the_operator_under_the_same_account() -> None:
    """scripts/local-cluster.sh creates the account the chart would (read, not changed here)."""
    script = (ROOT / "scripts" / "local-cluster.sh").read_text()
    identity = kuberay_operator_identity()
    assert f"OPERATOR_NAMESPACE={identity.namespace}\n" in script
    assert f"create serviceaccount {identity.service_account} " in script
    assert f'--serviceaccount "$OPERATOR_NAMESPACE:{identity.service_account}"' in script
