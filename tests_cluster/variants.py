"""The variants the tier deploys, each synthesized once, and their Kubernetes objects in the
order the deploy applies them.

The order is the templates': stacks in the Stage's dependency order, and inside a stack a
``Custom::AWSCDK-EKS-KubernetesResource`` after every resource it references (``Ref``,
``Fn::GetAtt``) or names in ``DependsOn``, as CloudFormation starts them. Helm charts are not
applied: the KubeRay operator runs beside the API server (local-cluster.sh) and the device
plugins' and add-ons' DaemonSets are modelled by ``nodes.daemonset_objects``."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from ray_pd_eks.config import AppConfig
from ray_pd_eks.timeline import refs
from tests.synth import ROOT, Synthesized, cdk_json_context, resolve, synth

MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
# The app's own custom resources that talk to Kubernetes, run by the deployer at their place in
# the order under their own identities (the readiness check is the tests' to run).
HANDLERS = ("Custom::RayAuthToken", "Custom::RayServiceRecreate", "Custom::RayServiceReadiness")
S3_URI = "s3://example-models/qwen/Qwen3.5-9B/"
TOKEN_SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-token"
CERTIFICATE = "arn:aws:acm:us-west-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "aggregated": {"servingMode": "aggregated"},
    "decode-autoscaling": {
        "gpuNodeCount": 3,
        "decodeReplicas": 1,
        "decodeMaxReplicas": 2,
        "gpuNodeMaxCount": 3,
    },
    # One GPU node more than the workers need, held by a placeholder pod (docs/scaling.md,
    # "Warm spare GPU nodes"): the real scheduler's preemption is what hands it to a new worker.
    "warm-spares": {
        "gpuNodeCount": 3,
        "decodeReplicas": 1,
        "decodeMaxReplicas": 2,
        "gpuNodeMaxCount": 4,
        "gpuWarmSpareNodes": 1,
    },
    "ucx": {"kvBackend": "UCX"},
    "s3-staging": {"modelS3Uri": S3_URI},
    "hf-token": {"hfTokenSecretArn": TOKEN_SECRET},
    "endpoint": {
        "endpointExposure": "internal",
        "endpointCertificateArn": CERTIFICATE,
        "endpointAllowedCidrs": ["10.0.0.0/8"],
        "adminPrincipalArns": ["arn:aws:iam::123456789012:role/Admin"],
    },
    "p5-tp8": {"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 8},
}


@dataclass(frozen=True)
class Step:
    """One manifest resource of the templates, in deploy order."""

    stack: str
    logical_id: str
    objects: tuple[dict[str, Any], ...]
    kind: str = MANIFEST
    properties: dict[str, Any] | None = None  # a handler's ResourceProperties


# Synthesized templates are kept by a hash of everything that shapes them (the app's code,
# assets, cdk.json and the pinned dependencies) and the variant's settings, so a run on
# unchanged code synthesizes nothing (each synth costs 10-25 s of this tier's 3 minutes).
SOURCES = (
    "app.py",
    "cdk.json",
    "requirements-lock.txt",
    "ray_pd_eks",
    "pd_constructs",
    "stacks",
    "assets",
)
SYNTH_CACHE = (
    Path(os.environ.get("RAY_PD_EKS_CACHE", Path.home() / ".cache" / "ray-pd-eks")) / "synth"
)
SYNTH_VERSIONS = 4  # kept per variant (about 250 kB each)


def _source_hash(overrides: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode())
    for name in SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts:
                continue
            digest.update(str(f.relative_to(ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:24]


@cache
def app(variant: str) -> Synthesized:
    """The variant synthesized (cdk-nag runs in the fast gate on the same constructs; here
    only the manifests matter), or its templates from the cache when nothing changed."""
    overrides = VARIANTS[variant]
    cached = SYNTH_CACHE / f"{variant}-{_source_hash(overrides)}.json"
    config = AppConfig.from_context({**cdk_json_context(), **overrides})
    if cached.is_file():
        saved = json.loads(cached.read_text())
        _ORDER[variant] = saved["order"]
        return Synthesized(config, cast(Any, None), saved["templates"], cached)
    found = synth(overrides, nag=False)
    order = _stack_order_of(found)
    SYNTH_CACHE.mkdir(parents=True, exist_ok=True)
    # A few versions per variant, the newest kept: checkouts of other branches (worktrees) that
    # share the cache do not synthesize again each time the other ran.
    older = sorted(SYNTH_CACHE.glob(f"{variant}-*.json"), key=lambda f: f.stat().st_mtime)
    for old in older[: -(SYNTH_VERSIONS - 1)]:
        old.unlink(missing_ok=True)
    cached.write_text(json.dumps({"order": order, "templates": found.templates}))
    _ORDER[variant] = order
    return Synthesized(config, cast(Any, None), found.templates, cached)


_ORDER: dict[str, list[str]] = {}


def _stack_order(synthesized: Synthesized) -> list[str]:
    for variant, order in _ORDER.items():
        if app(variant) is synthesized:
            return order
    return _stack_order_of(synthesized)


def _stack_order_of(synthesized: Synthesized) -> list[str]:
    stacks = {s.node.id: s for s in synthesized.stage.stacks}
    done: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        for dep in stacks[name].dependencies:
            visit(dep.node.id)
        done.append(name)

    for name in stacks:
        visit(name)
    return done


def _depends(resource: dict[str, Any]) -> set[str]:
    depends_on = resource.get("DependsOn") or []
    if isinstance(depends_on, str):
        depends_on = [depends_on]
    return set(depends_on) | refs(resource.get("Properties", {}))


def handler_properties(synthesized: Synthesized, kind: str) -> dict[str, Any]:
    (step,) = [s for s in steps(synthesized) if s.kind == kind]
    assert step.properties is not None
    return dict(step.properties)


def _stack_steps(stack: str, resources: dict[str, Any]) -> list[Step]:
    ordered: list[Step] = []
    seen: set[str] = set()

    def visit(logical_id: str) -> None:
        if logical_id in seen or logical_id not in resources:
            return
        seen.add(logical_id)
        for dep in sorted(_depends(resources[logical_id])):
            visit(dep)
        resource = resources[logical_id]
        if resource["Type"] == MANIFEST:
            objects = json.loads(resolve(resource["Properties"]["Manifest"]))
            ordered.append(Step(stack, logical_id, tuple(objects)))
        elif resource["Type"] in HANDLERS:
            properties = {
                k: v if isinstance(v, str) else "<token>" for k, v in resource["Properties"].items()
            }
            ordered.append(Step(stack, logical_id, (), resource["Type"], properties))

    for logical_id in resources:
        visit(logical_id)
    return ordered


def steps(synthesized: Synthesized) -> list[Step]:
    """Every manifest and handler resource, in the order the deploy applies it."""
    ordered: list[Step] = []
    for stack in _stack_order(synthesized):
        ordered += _stack_steps(stack, synthesized.templates[stack]["Resources"])
    return ordered


def objects(synthesized: Synthesized) -> list[dict[str, Any]]:
    return [o for step in steps(synthesized) for o in step.objects]


def of_kind(synthesized: Synthesized, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects(synthesized) if o["kind"] == kind]
