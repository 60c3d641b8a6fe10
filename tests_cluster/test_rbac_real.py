"""Every identity the app creates, asked of the real authorizer (SubjectAccessReview) with the
Roles and bindings the app deployed: allowed every request its code makes (recorded by driving
the code against the fake API server, as tests/test_rbac.py does), denied the neighbours of
those requests (other verbs, other names, other namespaces, Secrets), and tests/rbac.py's
evaluator giving the same answer as the real one for every request asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import rbac
from tests.fakes.kube_api import FakeKubeApi
from tests.test_rbac import IDENTITIES, Identity, access_entries, rendered_objects
from tests_cluster import variants
from tests_cluster.conftest import Deployer, bind_admin_cli
from tests_cluster.kube import Cluster, tokens

pytest_plugins = ["tests.fakes.fixtures"]

ADMIN = "arn:aws:iam::123456789012:role/Admin"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@pytest.fixture(scope="module")
def deployed(deployer: Deployer) -> Cluster:
    deployer.ensure("default")
    cluster = deployer.cluster
    assert bind_admin_cli(cluster) == ADMIN
    return cluster


def _sar(a: rbac.Attributes) -> dict[str, str]:
    if not a.resource_request:
        return {"path": a.path, "verb": a.verb}
    found = {"verb": a.verb, "group": a.api_group, "resource": a.resource}
    for key, value in (
        ("subresource", a.subresource),
        ("name", a.name),
        ("namespace", a.namespace),
    ):
        if value:
            found[key] = value
    return found


def _neighbours(a: rbac.Attributes) -> list[rbac.Attributes]:
    if not a.resource_request:
        return []
    found = [
        rbac.Attributes(v, a.api_group, a.resource, a.subresource, a.name, a.namespace)
        for v in VERBS
        if v != a.verb
    ]
    if a.name:
        found.append(
            rbac.Attributes(
                a.verb, a.api_group, a.resource, a.subresource, a.name + "x", a.namespace
            )
        )
    if a.namespace:
        found.append(
            rbac.Attributes(a.verb, a.api_group, a.resource, a.subresource, a.name, "default")
        )
    found.append(rbac.Attributes("get", "", "secrets", "", "other", a.namespace or "default"))
    return found


def test_token_identities_are_the_access_entries_groups() -> None:
    """tokens.csv's groups are exactly the synthesized access entries' groups, both ways."""
    app = variants.app("default")
    entries = {
        g for e in access_entries(app).values() for g in e["Properties"].get("KubernetesGroups", [])
    }
    rows = {g for t in tokens().values() for g in t.groups}
    assert rows == entries, (
        f"only in tokens.csv: {rows - entries}; only in the templates: {entries - rows}"
    )


@pytest.mark.parametrize("identity", IDENTITIES, ids=[i.name for i in IDENTITIES])
def test_real_authorizer_allows_what_the_code_does_and_denies_the_rest(
    identity: Identity, deployed: Cluster, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    app = variants.app("default")
    subject = (
        identity.subject(app)
        if identity.name not in ("operator-cli", "operator-cli-bench")
        else rbac.Subject(user=ADMIN)
    )
    extra = (
        [
            rbac.Grant(r, "", "AmazonEKSClusterAdminPolicy")
            for r in rbac.access_policy_rules("x/AmazonEKSClusterAdminPolicy")
        ]
        if subject.user == ADMIN
        else []
    )
    evaluator = rbac.Authorizer(rendered_objects(app), extra)
    identity.drive(kube_api, tmp_path)
    used = {rbac.attributes(r.method, r.path, r.query) for r in kube_api.requests}
    assert used, "the driver made no request"

    def real(a: rbac.Attributes) -> bool:
        return deployed.can(subject.user, subject.groups, _sar(a))

    denied = sorted(str(a) for a in used if not real(a))
    assert not denied, f"{identity.name}: the real authorizer denies {denied}"

    def key(a: rbac.Attributes) -> tuple[str, ...]:
        return (a.verb, a.api_group, a.resource, a.subresource, a.name, a.namespace)

    used_keys = {key(a) for a in used}
    probes = {n for a in used for n in _neighbours(a) if key(n) not in used_keys}
    disagree = []
    widened = []
    for a in sorted(probes, key=str):
        answer = real(a)
        if answer != evaluator.allows(subject, a):
            disagree.append(f"{a}: real {answer}")
        # Another name of the same resource is allowed exactly when a rule names no
        # resourceNames (the recreate reads whichever RayCluster KubeRay made): the evaluator
        # check above covers it; another verb, namespace or a Secret must be denied.
        other_name_only = any(key(a)[:4] == k[:4] and key(a)[5] == k[5] for k in used_keys)
        if answer and identity.exact and not other_name_only:
            widened.append(str(a))
    assert not disagree, f"tests/rbac.py disagrees with the real authorizer: {disagree}"
    assert not widened, f"{identity.name} may do more than its code does: {widened}"
