"""A test-only RBAC evaluator following Kubernetes' authorization semantics.

What the API server does with a request, reduced to what RBAC decides on (upstream:
``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`` for the request attributes and
``k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`` + ``pkg/apis/rbac/v1/evaluation_helpers.go``
for the rule matching):

* **Request attributes** from the URL and method: ``/api/v1/...`` is API group ``""``,
  ``/apis/<group>/<version>/...`` is ``<group>``; ``namespaces/<ns>/<resource>[/<name>
  [/<subresource>...]]`` is namespaced, ``<resource>[/<name>...]`` cluster-scoped. The verb is
  ``get`` for GET of a named object and ``list`` for a collection, ``watch`` either way when the
  query says ``watch=true``; POST ``create``, PUT ``update``, PATCH ``patch``, DELETE ``delete``
  (``deletecollection`` without a name). For ``services/proxy`` and ``pods/proxy`` everything
  after ``proxy/`` is the proxied path, and the name is the URL segment as written:
  ``ray-llm-head-svc:8265`` — so a rule naming ``ray-llm-head-svc`` does not match it.
* **Rules**: a rule matches when its ``verbs``, ``apiGroups`` and ``resources`` each contain the
  request's value or ``*``; the resource is matched as ``resource/subresource`` (``pods/log``
  is not ``pods``; ``*/log`` matches any subresource ``log``); a non-empty ``resourceNames``
  must contain the request's name exactly (so it never matches a ``list``, which has none).
  ``nonResourceURLs`` rules match requests outside the API paths (prefix with a trailing ``*``).
* **Bindings**: a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its
  Role or ClusterRole only in the binding's namespace, never for cluster-scoped resources.
  Subjects are groups, users or service accounts (``system:serviceaccount:<ns>:<name>``, which
  also belongs to the groups ``system:serviceaccounts`` and ``system:serviceaccounts:<ns>``).

EKS access policies are not RBAC objects; :func:`access_policy_rules` gives the RBAC rules
EKS documents for the ones this project associates.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
# Subresources whose remaining path segments are the proxied path, not more subresources.
_PROXY_SUBRESOURCES = ("proxy",)


@dataclass(frozen=True)
class Attributes:
    """What RBAC authorizes: one request's verb, group, resource, name and namespace."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""  # the request path, for non-resource requests and messages
    resource_request: bool = True

    def __str__(self) -> str:
        if not self.resource_request:
            return f"{self.verb} {self.path}"
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        group = f".{self.api_group}" if self.api_group else ""
        named = f" {self.name!r}" if self.name else ""
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster scope)"
        return f"{self.verb} {what}{group}{named}{where}"


def attributes(method: str, path: str, query: Mapping[str, str] | None = None) -> Attributes:
    """The request attributes the API server derives from a request (``requestinfo.go``)."""
    query = query or {}
    parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
    method = method.upper()
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(verb=method.lower(), path=path, resource_request=False)
    if not rest:
        return Attributes(verb=method.lower(), path=path, resource_request=False)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        # /api/v1/namespaces/<ns>[/status|/finalize] is the Namespace object itself.
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3 and subresource not in _PROXY_SUBRESOURCES:
        raise ValueError(f"unexpected path shape {path}")
    watch = query.get("watch", "").lower() in ("true", "1")
    if method in ("GET", "HEAD"):
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _METHOD_VERBS[method]
    return Attributes(verb, group, resource, subresource, name, namespace, path)


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, rule: Mapping[str, Any]) -> Rule:
        return cls(
            verbs=tuple(rule.get("verbs") or ()),
            api_groups=tuple(rule.get("apiGroups") or ()),
            resources=tuple(rule.get("resources") or ()),
            resource_names=tuple(rule.get("resourceNames") or ()),
            non_resource_urls=tuple(rule.get("nonResourceURLs") or ()),
        )

    def matches(self, a: Attributes) -> bool:
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.resource_request:
            return any(
                url == a.path or (url.endswith("*") and a.path.startswith(url[:-1]))
                for url in self.non_resource_urls
            )
        if "*" not in self.api_groups and a.api_group not in self.api_groups:
            return False
        combined = a.resource + (f"/{a.subresource}" if a.subresource else "")
        if not any(
            r in ("*", combined) or (a.subresource and r == f"*/{a.subresource}")
            for r in self.resources
        ):
            return False
        return not self.resource_names or a.name in self.resource_names

    def grants(self) -> list[tuple[str, str, str, str]]:
        """Every (verb, apiGroup, resource, name) this rule allows; ``*`` stays ``*``."""
        return [
            (verb, group, resource, name)
            for verb in self.verbs
            for group in self.api_groups
            for resource in self.resources
            for name in self.resource_names or ("",)
        ]


@dataclass(frozen=True)
class Subject:
    """Who makes the request: a user name and the groups it belongs to."""

    user: str = ""
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> Subject:
        return cls(
            user=f"system:serviceaccount:{namespace}:{name}",
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        )

    def is_bound(self, subject: Mapping[str, Any], binding_namespace: str) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "Group":
            return name in self.groups
        if kind == "User":
            return name == self.user
        if kind == "ServiceAccount":
            namespace = subject.get("namespace") or binding_namespace
            return self.user == f"system:serviceaccount:{namespace}:{name}"
        return False


@dataclass(frozen=True)
class Grant:
    """One rule, where a binding puts it into effect (``namespace`` "" = everywhere)."""

    rule: Rule
    namespace: str
    source: str  # "Role inference/x via RoleBinding inference/x", for messages


class Authorizer:
    """RBAC over a set of Role/ClusterRole/RoleBinding/ClusterRoleBinding objects."""

    def __init__(self, objects: Iterable[Mapping[str, Any]], extra: Sequence[Grant] = ()) -> None:
        self.objects = [o for o in objects if o.get("kind") in RBAC_KINDS]
        self.extra = list(extra)

    def _role(self, kind: str, name: str, namespace: str) -> Mapping[str, Any] | None:
        for obj in self.objects:
            meta = obj.get("metadata") or {}
            if obj["kind"] != kind or meta.get("name") != name:
                continue
            if kind == "Role" and meta.get("namespace") != namespace:
                continue
            return obj
        return None

    def grants_for(self, subject: Subject) -> list[Grant]:
        """Every rule in effect for ``subject`` and where."""
        found = list(self.extra)
        for binding in self.objects:
            if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            meta = binding.get("metadata") or {}
            binding_ns = meta.get("namespace", "") if binding["kind"] == "RoleBinding" else ""
            if not any(subject.is_bound(s, binding_ns) for s in binding.get("subjects") or []):
                continue
            ref = binding.get("roleRef") or {}
            if binding["kind"] == "ClusterRoleBinding" and ref.get("kind") != "ClusterRole":
                continue  # the API server rejects such a binding
            role = self._role(ref.get("kind", ""), ref.get("name", ""), binding_ns)
            if role is None:
                continue  # a binding to a missing role grants nothing
            role_meta = role.get("metadata") or {}
            where = f"{ref.get('kind')} {role_meta.get('name')}"
            via = f"{binding['kind']} {meta.get('name')}"
            for rule in role.get("rules") or []:
                found.append(Grant(Rule.from_json(rule), binding_ns, f"{where} via {via}"))
        return found

    def allows(self, subject: Subject, a: Attributes) -> bool:
        for grant in self.grants_for(subject):
            if grant.namespace and (not a.resource_request or a.namespace != grant.namespace):
                continue  # a RoleBinding: only inside its namespace, never cluster-scoped
            if grant.rule.matches(a):
                return True
        return False


def access_policy_rules(policy_arn: str) -> list[Rule]:
    """The RBAC equivalent of an EKS access policy, as the EKS user guide lists it
    ("Review access policy permissions"). Only the policies this project associates."""
    name = policy_arn.rsplit("/", 1)[-1]
    if name == "AmazonEKSClusterAdminPolicy":
        return [
            Rule(verbs=("*",), api_groups=("*",), resources=("*",)),
            Rule(verbs=("*",), non_resource_urls=("*",)),
        ]
    raise KeyError(f"no RBAC rules known for access policy {name}; add them from the EKS docs")
