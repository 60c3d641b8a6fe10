"""The app's admission policies (tests/admission_cases.py, the table the CEL evaluator of
tests/admission.py runs offline) asked of the real API server: every CREATE case of the table
is a server-side dry-run create made as the case's user (impersonated), and the real admission
chain must admit or refuse it as the table says; a refusal must name the policy the table
expects.

The impersonated requests also carry the group ``tier:admission-cases``, bound here to a
ClusterRole that may create pods and RayClusters, so that authorization never answers in
admission's place (the SubjectAccessReview tests ask about the real identities' rights, without
this group). UPDATE cases need a stored old object, which a dry run cannot provide without
starting it (a real RayCluster or pod would be reconciled by the operator and the scheduler):
they run in the offline evaluator only (tests/test_admission_policies.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ray_pd_eks.config import AppConfig
from tests.admission_cases import AdmissionCase, cases
from tests_cluster import variants
from tests_cluster.kube import Cluster
from tests_cluster.test_admission_policies import policies  # noqa: F401  (fixture)

GROUP = "tier:admission-cases"
RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "tier-admission-cases"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
            {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["create"]},
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


@pytest.fixture(scope="module")
def admission(policies: Cluster) -> Cluster:  # noqa: F811
    policies.apply(RBAC, manager="tier")
    for namespace in sorted({c.request.namespace for c in CREATES}):
        policies.kubectl("create", "namespace", namespace, check=False)
    return policies


def _dry_run(cluster: Cluster, case: AdmissionCase) -> tuple[bool, str]:
    request = case.request
    obj = json.loads(json.dumps(request.object))
    obj.setdefault("metadata", {})["namespace"] = request.namespace
    obj["metadata"].pop("resourceVersion", None)
    done = cluster.kubectl(
        "create",
        "--dry-run=server",
        "-o",
        "name",
        f"--as={request.username}",
        f"--as-group={GROUP}",
        "--as-group=system:authenticated",
        "-f",
        "-",
        stdin=json.dumps(obj),
        check=False,
    )
    return done.returncode != 0, (done.stderr or done.stdout).strip()


def test_the_table_has_creates_of_both_kinds() -> None:
    assert any(c.admit for c in CREATES) and any(not c.admit for c in CREATES)


@pytest.mark.parametrize("case", CREATES, ids=[c.name for c in CREATES])
def test_real_admission_answers_the_apps_case(admission: Cluster, case: AdmissionCase) -> None:
    # A new policy takes effect once the API server has compiled it (about a second).
    deadline = time.monotonic() + 15
    refused, message = _dry_run(admission, case)
    while not case.admit and not refused and time.monotonic() < deadline:
        time.sleep(0.5)
        refused, message = _dry_run(admission, case)
    assert refused == (not case.admit), f"{case.name}: refused={refused} {message}"
    if refused:
        assert case.refused_by in message, message
