"""Questions for the real authorizer (SubjectAccessReview) and the same questions for
tests/rbac.py's evaluator, given every Role, ClusterRole and binding the real API server holds
(the app's, the operator's, KubeRay's per-cluster autoscaler Role and Kubernetes' own bootstrap
roles), so that both answer from the same objects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests import rbac
from tests_cluster.kube import Cluster

AUTHENTICATED = "system:authenticated"  # every authenticated request's group, SAR's too
RBAC_RESOURCES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


def sar(a: rbac.Attributes) -> dict[str, str]:
    """A SubjectAccessReview's resourceAttributes (or nonResourceAttributes) for ``a``."""
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


def service_account(namespace: str, name: str) -> rbac.Subject:
    """A service account as the API server authenticates its token: its user and groups."""
    plain = rbac.Subject.service_account(namespace, name)
    return rbac.Subject(plain.user, (*plain.groups, AUTHENTICATED))


def live_authorizer(cluster: Cluster) -> rbac.Authorizer:
    """tests/rbac.py's evaluator over every RBAC object the real API server holds now."""
    kinds = ",".join(f"{r}.rbac.authorization.k8s.io" for r in RBAC_RESOURCES)
    objects: list[dict[str, Any]] = cluster.items(kinds, "-A")
    return rbac.Authorizer(objects)


def answers(
    cluster: Cluster, authorizer: rbac.Authorizer, subject: rbac.Subject, a: rbac.Attributes
) -> tuple[bool, bool]:
    """(the real authorizer's answer, the evaluator's) for one request of ``subject``."""
    return cluster.can(subject.user, subject.groups, sar(a)), authorizer.allows(subject, a)


def attrs(
    verb: str, resource: str, name: str = "", namespace: str = "", group: str = "", sub: str = ""
) -> rbac.Attributes:
    return rbac.Attributes(verb, group, resource, sub, name, namespace)


def escalations(namespace: str, account: str) -> list[rbac.Attributes]:
    """Requests that would lift an identity above its rights: RBAC objects, impersonation,
    tokens of other accounts, workloads that run pods, the admission policies and the Pod
    Security label of the namespace."""
    rbac_group = "rbac.authorization.k8s.io"
    return [
        attrs("create", "roles", namespace=namespace, group=rbac_group),
        attrs("create", "rolebindings", namespace=namespace, group=rbac_group),
        attrs("bind", "clusterroles", "cluster-admin", group=rbac_group),
        attrs("escalate", "roles", namespace=namespace, group=rbac_group),
        attrs("create", "clusterrolebindings", group=rbac_group),
        attrs("impersonate", "users", "system:admin"),
        attrs("impersonate", "groups", "system:masters"),
        attrs("impersonate", "serviceaccounts", "kuberay-operator", "kuberay-system"),
        attrs("create", "serviceaccounts", account, namespace, sub="token"),
        attrs("create", "pods", namespace=namespace),
        attrs("create", "deployments", namespace=namespace, group="apps"),
        attrs("create", "jobs", namespace=namespace, group="batch"),
        attrs("patch", "namespaces", namespace),
        attrs(
            "delete",
            "validatingadmissionpolicies",
            f"ray-pd-eks-ray-pods.{namespace}",
            group="admissionregistration.k8s.io",
        ),
        attrs("create", "certificatesigningrequests", group="certificates.k8s.io"),
    ]


def disagreements(
    cluster: Cluster,
    authorizer: rbac.Authorizer,
    subject: rbac.Subject,
    probes: Iterable[rbac.Attributes],
) -> tuple[dict[rbac.Attributes, bool], list[str]]:
    """The real answer to each probe, and every probe the evaluator answers otherwise."""
    real: dict[rbac.Attributes, bool] = {}
    differ = []
    for a in probes:
        truth, evaluated = answers(cluster, authorizer, subject, a)
        real[a] = truth
        if truth != evaluated:
            differ.append(f"{a}: real {truth}, tests/rbac.py {evaluated}")
    return real, differ
