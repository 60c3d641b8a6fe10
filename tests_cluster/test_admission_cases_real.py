"""The app's admission policies (tests/admission_cases.py, the table the CEL evaluator of
tests/admission.py runs offline) asked of the real API server: every case of the table is a
request made as the case's user (impersonated), and the real admission chain must admit or
refuse it as the table says; a refusal must name the policy the table expects.

A CREATE case is a server-side dry-run create. An UPDATE case needs the old object stored: it
is created for real, as the KubeRay operator creates it (itself an admitted CREATE case of the
table), once per distinct old object; the case is then a server-side dry-run JSON merge patch
from the old object to the case's, so every case meets the same stored object and nothing
changes it. The API server applies the patch to the stored object and defaults the result, so
the policies compare what a real client's update would hand them, server defaults included.
The stored objects are kept still: the pod names a scheduler that does not exist (no node is
ever chosen, no kubelet starts it) and the RayCluster says ``spec.managedBy:
kueue.x-k8s.io/multikueue``, which KubeRay 1.6.1 leaves alone (``rayClusterReconcile`` returns
at once for a RayCluster managed by another controller); neither field is one a policy reads.
The RayCluster's owner reference carries the uid of the deployed RayService, so the garbage
collector keeps it. Both are deleted when the module ends.

The impersonated requests also carry the group ``tier:admission-cases``, bound here to a
ClusterRole that may create and patch pods (and their ephemeral containers) and RayClusters,
so that authorization never answers in admission's place (the SubjectAccessReview tests ask
about the real identities' rights, without this group).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pd_constructs.serving.admission import OPERATOR_USER
from ray_pd_eks.config import AppConfig
from tests.admission_cases import AdmissionCase, cases
from tests_cluster import variants
from tests_cluster.kube import Cluster, wait_until
from tests_cluster.test_admission_policies import policies  # noqa: F401  (fixture)

GROUP = "tier:admission-cases"
RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "tier-admission-cases"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "pods/ephemeralcontainers"],
                "verbs": ["create", "get", "patch"],
            },
            {
                "apiGroups": ["ray.io"],
                "resources": ["rayclusters"],
                "verbs": ["create", "get", "patch"],
            },
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "tier-admission-cases"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "tier-admission-cases",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
    },
]


def _config() -> AppConfig:
    return variants.app("default").config


CREATES = [c for c in cases(_config()) if c.request.operation == "CREATE"]
UPDATES = [c for c in cases(_config()) if c.request.operation == "UPDATE"]
# What keeps a stored old object still (see the module's docstring).
NO_SCHEDULER = "ray-pd-eks-tier-no-scheduler"
NOT_KUBERAY = "kueue.x-k8s.io/multikueue"
RESOURCES = {"pods": "pods", "rayclusters": "rayclusters.ray.io"}


@pytest.fixture(scope="module")
def admission(policies: Cluster) -> Cluster:  # noqa: F811
    policies.apply(RBAC, manager="tier")
    for namespace in sorted({c.request.namespace for c in CREATES}):
        policies.kubectl("create", "namespace", namespace, check=False)
    return policies


def _collection(case: AdmissionCase) -> str:
    request = case.request
    prefix = f"/apis/{request.group}/v1" if request.group else "/api/v1"
    return f"{prefix}/namespaces/{request.namespace}/{request.resource}"


def _as_the_case(
    cluster: Cluster, case: AdmissionCase, method: str, path: str, body: Any, content_type: str
) -> tuple[bool, str]:
    """The request as the case's user (impersonated, as ``kubectl --as`` sends it), dry run:
    (refused, the API server's message)."""
    status, answer = cluster.call(
        method,
        f"{path}?dryRun=All",
        body,
        content_type=content_type,
        user=case.request.username,
        groups=(GROUP, "system:authenticated"),
    )
    message = str(answer.get("message", "")) if isinstance(answer, dict) else str(answer)
    return status >= 300, f"{status} {message}"


def _dry_run(cluster: Cluster, case: AdmissionCase) -> tuple[bool, str]:
    request = case.request
    obj = json.loads(json.dumps(request.object))
    obj.setdefault("metadata", {})["namespace"] = request.namespace
    obj["metadata"].pop("resourceVersion", None)
    return _as_the_case(cluster, case, "POST", _collection(case), obj, "application/json")


def test_the_table_has_creates_and_updates_of_both_kinds() -> None:
    for found in (CREATES, UPDATES):
        assert any(c.admit for c in found) and any(not c.admit for c in found)
    assert {c.request.resource for c in UPDATES} == set(RESOURCES)
    assert any(c.request.subresource for c in UPDATES)


@pytest.mark.parametrize("case", CREATES, ids=[c.name for c in CREATES])
def test_real_admission_answers_the_apps_case(admission: Cluster, case: AdmissionCase) -> None:
    # A new policy takes effect once the API server has compiled it (about a second).
    deadline = time.monotonic() + 15
    refused, message = _dry_run(admission, case)
    while not case.admit and not refused and time.monotonic() < deadline:
        time.sleep(0.2)
        refused, message = _dry_run(admission, case)
    assert refused == (not case.admit), f"{case.name}: refused={refused} {message}"
    if refused:
        assert case.refused_by in message, message


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: changed keys of
    objects recursively, removed keys as null, any other changed value (a list too) whole."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def _key(case: AdmissionCase) -> str:
    return json.dumps(case.request.old_object, sort_keys=True)


def _stored_names() -> dict[str, str]:
    """A name per distinct old object: the table's own, with a suffix where two old objects of
    one kind and namespace share it (the patches never touch the name)."""
    names: dict[str, str] = {}
    taken: set[tuple[str, str, str]] = set()
    for case in UPDATES:
        key = _key(case)
        if key in names:
            continue
        assert case.request.old_object is not None, f"{case.name}: an UPDATE without its old object"
        name = base = str(case.request.old_object["metadata"]["name"])
        n = 1
        while (case.request.resource, case.request.namespace, name) in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add((case.request.resource, case.request.namespace, name))
        names[key] = name
    return names


def _old_name(case: AdmissionCase) -> str:
    return _STORED_NAMES[_key(case)]


_STORED_NAMES = _stored_names()


def _stored_form(cluster: Cluster, case: AdmissionCase) -> dict[str, Any]:
    """The case's old object as the operator creates it here, kept still."""
    obj = json.loads(json.dumps(case.request.old_object))
    obj["metadata"]["name"] = _old_name(case)
    obj["metadata"]["namespace"] = case.request.namespace
    obj["metadata"].pop("resourceVersion", None)
    if case.request.resource == "pods":
        obj["spec"]["schedulerName"] = NO_SCHEDULER
    else:
        obj["spec"]["managedBy"] = NOT_KUBERAY
        owner = cluster.get("rayservices.ray.io", "-n", case.request.namespace, _RAYSERVICE)
        for reference in obj["metadata"]["ownerReferences"]:
            reference["uid"] = owner["metadata"]["uid"]
    return obj


_RAYSERVICE = _config().ray_service_name


_REFUSING_BINDING = re.compile(r"ValidatingAdmissionPolicy '[^']+' with binding '([^']+)' denied")


def _create_as_the_operator(cluster: Cluster, obj: dict[str, Any], *, dry_run: bool = False) -> Any:
    return cluster.kubectl(
        "create",
        "-o",
        "name",
        *(["--dry-run=server"] if dry_run else []),
        f"--as={OPERATOR_USER}",
        f"--as-group={GROUP}",
        "--as-group=system:authenticated",
        "-f",
        "-",
        stdin=json.dumps(obj),
        check=False,
    )


def _store(cluster: Cluster, obj: dict[str, Any]) -> None:
    """Create ``obj`` as the operator. An old object one of our policies refuses today (a pod
    outside our namespaces that already tolerates the GPU taint) stands for one made before the
    policy existed: its binding is set to Audit for that one create, then back to what it was,
    and the policy must refuse the same create again before the cases run."""
    done = _create_as_the_operator(cluster, obj)
    if done.returncode == 0:
        return
    found = _REFUSING_BINDING.search(done.stderr)
    assert found, f"storing {obj['metadata']['name']}: {done.stderr.strip()}"
    binding = found.group(1)
    path = f"validatingadmissionpolicybinding/{binding}"
    actions = cluster.get(path)["spec"]["validationActions"]

    def with_actions(value: list[str]) -> None:
        patch = json.dumps({"spec": {"validationActions": value}})
        cluster.kubectl("patch", path, "--type=merge", "-p", patch)

    with_actions(["Audit"])
    last: list[str] = []

    def created() -> bool:
        done = _create_as_the_operator(cluster, obj)
        last[:] = [done.stderr.strip()]
        return done.returncode == 0

    try:
        wait_until(f"{binding} in Audit", created, timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last answer: {last}") from None
    finally:
        with_actions(actions)
    refused_again = {**obj, "metadata": {**obj["metadata"], "name": "tier-refused-again"}}
    wait_until(
        f"{binding} refusing again",
        lambda: _create_as_the_operator(cluster, refused_again, dry_run=True).returncode != 0,
        timeout_s=30,
    )


@pytest.fixture(scope="module")
def stored(admission: Cluster) -> Iterator[Cluster]:
    """Every distinct old object of the UPDATE cases, created as the operator creates it."""
    made: list[tuple[str, str, str]] = []
    try:
        for case in {_key(c): c for c in UPDATES}.values():
            obj = _stored_form(admission, case)
            _store(admission, obj)
            made.append(
                (
                    RESOURCES[case.request.resource],
                    obj["metadata"]["name"],
                    obj["metadata"]["namespace"],
                )
            )
        yield admission
    finally:
        for resource, name, namespace in made:
            admission.kubectl(
                "delete",
                resource,
                name,
                "-n",
                namespace,
                "--grace-period=0",
                "--force",
                "--ignore-not-found",
                check=False,
            )


def _dry_run_update(cluster: Cluster, case: AdmissionCase) -> tuple[bool, str]:
    request = case.request
    patch = merge_patch(request.old_object, request.object)
    assert patch, f"{case.name}: the case changes nothing"
    path = f"{_collection(case)}/{_old_name(case)}"
    tolerations = patch.get("spec", {}).get("tolerations") if isinstance(patch, dict) else None
    if request.resource == "pods" and tolerations is not None:
        # A merge patch replaces a list whole, and the stored pod also holds the tolerations
        # the API server added at its create (DefaultTolerationSeconds: not-ready,
        # unreachable), which an update may not remove: keep the stored ones, add the case's.
        assert request.old_object is not None
        stored = cluster.get("pods", _old_name(case), "-n", request.namespace)
        before = request.old_object["spec"].get("tolerations", [])
        added = [t for t in request.object["spec"].get("tolerations", []) if t not in before]
        patch["spec"]["tolerations"] = stored["spec"].get("tolerations", []) + added
    if request.subresource:
        path += f"/{request.subresource}"
    return _as_the_case(cluster, case, "PATCH", path, patch, "application/merge-patch+json")


def test_the_stored_objects_stay_still(stored: Cluster) -> None:
    """No scheduler placed the old pod and KubeRay made nothing for the old RayCluster, so the
    UPDATE cases all meet the object as it was created."""
    for case in {_key(c): c for c in UPDATES}.values():
        name = _old_name(case)
        found = stored.get(RESOURCES[case.request.resource], name, "-n", case.request.namespace)
        if case.request.resource == "pods":
            assert not found["spec"].get("nodeName"), found["spec"].get("nodeName")
        else:
            assert not found.get("status"), found.get("status")
    made = stored.items(
        "pods", "-n", _config().namespace, "-l", f"ray.io/cluster={_RAYSERVICE}-abcde"
    )
    assert len(made) == 1, [p["metadata"]["name"] for p in made]


@pytest.mark.parametrize("case", UPDATES, ids=[c.name for c in UPDATES])
def test_real_admission_answers_the_apps_update_case(stored: Cluster, case: AdmissionCase) -> None:
    refused, message = _dry_run_update(stored, case)
    assert refused == (not case.admit), f"{case.name}: refused={refused} {message}"
    if refused:
        assert case.refused_by in message, message
