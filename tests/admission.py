"""A test-side evaluator of ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1), for
the rendered policies under assets/manifests/admission/ and the case table in
tests/admission_cases.py.

It does what the API server's policy plugin does for a request, as far as these policies use
it: a policy applies when its ``matchConstraints.resourceRules`` match the request's
resource, subresource and operation and a binding's ``matchResources.namespaceSelector``
matches the namespace (by its ``kubernetes.io/metadata.name`` label, which every namespace
carries); ``variables`` are evaluated in order into ``variables``; the request is refused when
any validation is not ``true`` (an evaluation error counts as a refusal, as with
``failurePolicy: Fail``). CEL comes from cel-python (``celpy``), Google's CEL semantics without
the Kubernetes CEL libraries, which the policies therefore do not use. The real API server is
the authority: the cluster integration tier runs the same table against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def compile_cel(expression: str) -> Any:
    """The compiled program of ``expression`` (raises celpy's error when it does not parse)."""
    program = _PROGRAMS.get(expression)
    if program is None:
        program = _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression))
    return program


@dataclass(frozen=True)
class Request:
    operation: str  # CREATE | UPDATE
    resource: str  # plural, e.g. pods, rayclusters, bindings
    group: str  # "" for core
    namespace: str
    username: str
    object: Mapping[str, Any]
    old_object: Mapping[str, Any] | None = None
    subresource: str = ""


def _rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    wanted = request.resource + (f"/{request.subresource}" if request.subresource else "")
    return (
        request.group in rule["apiGroups"]
        and request.operation in rule["operations"]
        and (wanted in rule["resources"] or "*" in rule["resources"])
    )


def _selector_matches(selector: Mapping[str, Any], namespace: str) -> bool:
    labels = {"kubernetes.io/metadata.name": namespace}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        present = expr["key"] in labels
        value = labels.get(expr["key"])
        op = expr["operator"]
        if op == "In" and not (present and value in expr["values"]):
            return False
        if op == "NotIn" and present and value in expr["values"]:
            return False
    return True


def _activation(request: Request) -> dict[str, Any]:
    return {
        "object": celpy.json_to_cel(dict(request.object)),
        "oldObject": (
            celpy.json_to_cel(dict(request.old_object))
            if request.old_object is not None
            else celtypes.NullType()
        ),
        # As the API server builds it: no `subResource` key for a request on the object itself
        # (the cluster tier found a policy that read it unguarded).
        "request": celpy.json_to_cel(
            {
                "operation": request.operation,
                "namespace": request.namespace,
                "resource": {"group": request.group, "resource": request.resource},
                **({"subResource": request.subresource} if request.subresource else {}),
                "userInfo": {"username": request.username},
            }
        ),
    }


def _true(value: Any) -> bool:
    return isinstance(value, celtypes.BoolType) and bool(value)


def refusals(policy: Mapping[str, Any], request: Request) -> list[str]:
    """The messages of the validations ``policy`` fails for ``request`` (its binding's
    namespace selection is the caller's: :func:`decide`)."""
    spec = policy["spec"]
    activation = _activation(request)
    variables: dict[str, Any] = {}
    for variable in spec.get("variables") or []:
        activation["variables"] = celtypes.MapType(variables)
        try:
            value = compile_cel(variable["expression"]).evaluate(activation)
        except CELEvalError as error:
            # An error stays an error value: only the validations that use it fail (the API
            # server evaluates variables lazily, and fails a validation that errors).
            value = error
        variables[celtypes.StringType(variable["name"])] = value
    activation["variables"] = celtypes.MapType(variables)
    failed = []
    for validation in spec["validations"]:
        try:
            result = compile_cel(validation["expression"]).evaluate(activation)
        except CELEvalError:
            result = None  # failurePolicy Fail: an error refuses
        if not _true(result):
            failed.append(validation.get("message") or validation.get("messageExpression", ""))
    return failed


def decide(objects: Iterable[Mapping[str, Any]], request: Request) -> dict[str, list[str]]:
    """Policy name -> its refusal messages, for every policy that applies to ``request`` and
    refuses it (empty: admitted)."""
    objects = list(objects)
    policies = {
        o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
    }
    out: dict[str, list[str]] = {}
    for binding in (o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"):
        policy = policies[binding["spec"]["policyName"]]
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        if not any(_rule_matches(r, request) for r in rules):
            continue
        selector = (binding["spec"].get("matchResources") or {}).get("namespaceSelector") or {}
        if not _selector_matches(selector, request.namespace):
            continue
        found = refusals(policy, request)
        if found:
            out[policy["metadata"]["name"]] = found
    return out
