"""What the synthesized templates grant, per IAM role, Pod Identity association, EKS access entry
and RBAC subject: the facts tests/test_identities.py holds against
pd_constructs/inventory/identities.py."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam

from tests.synth import Synthesized, resolve


@dataclass
class RoleFacts:
    where: str  # <stack>/<construct path below the stage> (or the logical id)
    principals: set[str] = field(default_factory=set)
    actions: set[str] = field(default_factory=set)
    managed: set[str] = field(default_factory=set)
    service_accounts: set[str] = field(default_factory=set)
    kubernetes_groups: set[str] = field(default_factory=set)
    access_policies: set[str] = field(default_factory=set)


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _managed_name(arn: Any) -> str:
    text = json.dumps(arn)
    return text.rsplit(":policy/", 1)[-1].rsplit("/", 1)[-1].split('"')[0]


def _paths(app: Synthesized) -> dict[tuple[str, str], str]:
    found = {}
    for construct in app.stage.node.find_all():
        if isinstance(construct, iam.CfnRole):
            stack = Stack.of(construct)
            path = construct.node.path.split("/", 1)[1]
            found[(stack.node.id, stack.get_logical_id(construct))] = path
    return found


def _role_ref(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
            return str(value["Fn::GetAtt"][0])
    return None


def role_facts(app: Synthesized) -> dict[str, RoleFacts]:
    """Every AWS::IAM::Role of every stack, by where it is."""
    paths = _paths(app)
    by_id: dict[tuple[str, str], RoleFacts] = {}
    for stack, template in app.templates.items():
        for logical_id, r in template["Resources"].items():
            if r["Type"] != "AWS::IAM::Role":
                continue
            where = paths.get((stack, logical_id), f"{stack}/{logical_id}")
            facts = RoleFacts(where)
            p = r["Properties"]
            for statement in p["AssumeRolePolicyDocument"]["Statement"]:
                for kind, value in statement["Principal"].items():
                    facts.principals.update(f"{kind}:{v}" for v in _strings(value))
            facts.managed.update(_managed_name(a) for a in p.get("ManagedPolicyArns", []))
            for policy in p.get("Policies", []):
                facts.actions.update(_actions(policy["PolicyDocument"]["Statement"]))
            by_id[(stack, logical_id)] = facts
    # A policy may be attached from another stack to a role by its exported name.
    exports = {
        o["Export"]["Name"]: (stack, o["Value"])
        for stack, template in app.templates.items()
        for o in template.get("Outputs", {}).values()
        if isinstance(o.get("Export", {}).get("Name"), str)
    }
    for stack, template in app.templates.items():
        for r in template["Resources"].values():
            p = r.get("Properties", {})
            if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                for ref in p.get("Roles", []):
                    role_stack = stack
                    if isinstance(ref, dict) and "Fn::ImportValue" in ref:
                        role_stack, ref = exports[ref["Fn::ImportValue"]]
                    role_id = _role_ref(ref)
                    if role_id and (role_stack, role_id) in by_id:
                        by_id[(role_stack, role_id)].actions.update(
                            _actions(p["PolicyDocument"]["Statement"])
                        )
            elif r["Type"] == "AWS::EKS::PodIdentityAssociation":
                role_id = _role_ref(p["RoleArn"])
                by_id[(stack, str(role_id))].service_accounts.add(
                    f"{p['Namespace']}/{p['ServiceAccount']}"
                )
            elif r["Type"] == "AWS::EKS::Addon":
                for assoc in p.get("PodIdentityAssociations", []):
                    role_id = _role_ref(assoc["RoleArn"])
                    by_id[(stack, str(role_id))].service_accounts.add(
                        f"addon {p['AddonName']}/{assoc['ServiceAccount']}"
                    )
            elif r["Type"] == "AWS::EKS::AccessEntry":
                role_id = _role_ref(p["PrincipalArn"])
                if role_id is None or (stack, role_id) not in by_id:
                    continue  # an administrator's ARN, not a role of ours
                facts = by_id[(stack, role_id)]
                facts.kubernetes_groups.update(p.get("KubernetesGroups", []))
                for ap in p.get("AccessPolicies", []):
                    name = _managed_name(ap["PolicyArn"])
                    facts.access_policies.add(f"{name} ({ap['AccessScope']['Type']})")
    return {f.where: f for f in by_id.values()}


def _actions(statements: Iterable[Mapping[str, Any]]) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        if statement.get("Effect", "Allow") == "Allow" and "Action" in statement:
            found.update(_strings(statement["Action"]))
    return found


def _rule_text(rule: Mapping[str, Any], namespace: str) -> list[str]:
    out = []
    verbs = ",".join(sorted(rule.get("verbs", [])))
    names = rule.get("resourceNames")
    suffix = f"[{','.join(names)}]" if names else ""
    for group in rule.get("apiGroups", [""]):
        for resource in rule.get("resources", []):
            prefix = f"{group}/" if group else ""
            out.append(f"{namespace}: {verbs} {prefix}{resource}{suffix}")
    return out


def rbac_facts(app: Synthesized) -> dict[str, set[str]]:
    """Kubernetes subject (``group:<name>`` / ``serviceaccount:<ns>/<name>``) -> its rules as
    ``<namespace or *>: <verbs> <group/>resource[names]``, from the manifests the stacks apply."""
    objects = []
    for template in app.templates.values():
        for r in template["Resources"].values():
            if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
                objects.extend(json.loads(resolve(r["Properties"]["Manifest"])))
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    found: dict[str, set[str]] = {}
    for o in objects:
        if o.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = o["roleRef"]
        ns = o["metadata"].get("namespace") if o["kind"] == "RoleBinding" else None
        role_ns = ns if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        rules = [t for rule in role.get("rules", []) for t in _rule_text(rule, ns or "*")]
        for subject in o.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                key = f"serviceaccount:{subject['namespace']}/{subject['name']}"
            else:
                key = f"{subject['kind'].lower()}:{subject['name']}"
            found.setdefault(key, set()).update(rules)
    return found
