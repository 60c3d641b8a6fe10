"""A harness for ValidatingAdmissionPolicies: every policy (and binding) in the app's rendered
manifests, of every variant, is applied to the real API server, and each row of ``CASES`` is a
request that the real admission chain must refuse or admit (a server-side dry-run create, so
nothing is stored; admission runs for dry-run requests).

To cover a new policy, add rows to ``CASES``: ``policy`` is the policy's name, ``namespace``
where the request goes (``APP`` for the app's namespace), ``obj`` the object, ``refuse`` the
expectation and ``message`` a fragment of the refusal. ``test_every_policy_has_both_kinds_of_case``
fails for a shipped policy without at least one refusing and one admitted row.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests_cluster import variants
from tests_cluster.conftest import Deployer
from tests_cluster.kube import Cluster

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "policies" / "sample.yaml"
SAMPLE_NAMESPACE = "tier-vap-sample"
APP = "<app namespace>"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }


@dataclass(frozen=True)
class Case:
    policy: str
    name: str
    namespace: str
    obj: dict[str, Any]
    refuse: bool
    message: str = ""


CASES = [
    Case(
        "tier-sample-no-host-network",
        "host network refused",
        SAMPLE_NAMESPACE,
        _pod("host-net", hostNetwork=True),
        refuse=True,
        message="pods here may not use the host network",
    ),
    Case(
        "tier-sample-no-host-network",
        "pod network admitted",
        SAMPLE_NAMESPACE,
        _pod("pod-net"),
        refuse=False,
    ),
    Case(
        "tier-sample-no-host-network",
        "host network admitted where the binding does not select",
        "default",
        _pod("host-net-elsewhere", hostNetwork=True),
        refuse=False,
    ),
]


def shipped_policies() -> dict[str, dict[str, Any]]:
    """Every ValidatingAdmissionPolicy and binding the app renders, over all variants."""
    found: dict[str, dict[str, Any]] = {}
    for variant in variants.VARIANTS:
        for obj in variants.objects(variants.app(variant)):
            if obj["kind"] in POLICY_KINDS:
                found[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    return found


def sample_policies() -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(SAMPLE.read_text())
    }


@pytest.fixture(scope="module")
def policies(deployer: Deployer) -> Cluster:
    applied = deployer.ensure("default")
    cluster = deployer.cluster
    cluster.kubectl("create", "namespace", SAMPLE_NAMESPACE, check=False)
    cluster.kubectl(
        "label", "namespace", SAMPLE_NAMESPACE, "ray-pd-eks.test/vap-sample=on", "--overwrite"
    )
    # The default variant's policies came with its manifests; those only other variants ship
    # are applied here too, so that every case can run.
    cluster.apply([*sample_policies().values(), *shipped_policies().values()], manager="tier")
    assert applied.variant == "default"
    return cluster


def _namespace(case: Case) -> str:
    return variants.app("default").config.namespace if case.namespace == APP else case.namespace


def _dry_run(cluster: Cluster, case: Case) -> tuple[bool, str]:
    obj = {**case.obj, "metadata": {**case.obj["metadata"], "namespace": _namespace(case)}}
    done = cluster.kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=json.dumps(obj), check=False
    )
    return done.returncode != 0, done.stderr.strip()


def test_every_policy_has_both_kinds_of_case() -> None:
    names = {
        o["metadata"]["name"]
        for o in {**shipped_policies(), **sample_policies()}.values()
        if o["kind"] == "ValidatingAdmissionPolicy"
    }
    # The app's own policies have their case table in tests/admission_cases.py (run against
    # this API server by test_admission_cases_real.py); the sample's is CASES above.
    from tests_cluster.test_admission_cases_real import CREATES, UPDATES

    kinds = {(c.policy, c.refuse) for c in CASES}
    for app_case in (*CREATES, *UPDATES):
        judged = app_case.refused_by if not app_case.admit else ""
        if judged:
            kinds.add((judged, True))
    # An admitted case of the app's table passes every policy; it counts as an admitted case
    # of each policy whose resource (and namespace, for a namespaced one) it is.
    for name in (n for n in names if n.startswith("ray-pd-eks-")):
        resource = "rayclusters" if "rayclusters" in name else "pods"
        namespace = name.split(".", 1)[1] if "." in name else None
        if any(
            c.admit and c.request.resource == resource and namespace in (None, c.request.namespace)
            for c in (*CREATES, *UPDATES)
        ):
            kinds.add((name, False))
    missing = [
        f"{name}: no {'refusing' if want else 'admitted'} case"
        for name in sorted(names)
        for want in (True, False)
        if (name, want) not in kinds
    ]
    assert not missing, missing
    unknown = sorted({c.policy for c in CASES} - names)
    assert not unknown, f"cases for policies nobody ships: {unknown}"


def test_every_policy_has_a_binding() -> None:
    found = {**shipped_policies(), **sample_policies()}.values()
    bound = {o["spec"]["policyName"] for o in found if o["kind"] == POLICY_KINDS[1]}
    unbound = sorted(o["metadata"]["name"] for o in found if o["kind"] == POLICY_KINDS[0])
    assert set(unbound) <= bound, (
        f"policies without a binding enforce nothing: {set(unbound) - bound}"
    )


@pytest.mark.parametrize("case", CASES, ids=[f"{c.policy}: {c.name}" for c in CASES])
def test_real_admission_answers_each_case(policies: Cluster, case: Case) -> None:
    # A new policy takes effect once the API server has compiled it (about a second): a
    # refusing case is retried briefly; an admitted case must be admitted once it refuses.
    deadline = time.monotonic() + 15
    refused, message = _dry_run(policies, case)
    while case.refuse and not refused and time.monotonic() < deadline:
        time.sleep(0.2)
        refused, message = _dry_run(policies, case)
    assert refused == case.refuse, f"{case.name}: refused={refused} {message}"
    if case.refuse:
        assert case.message in message, message
        assert case.policy in message, message
