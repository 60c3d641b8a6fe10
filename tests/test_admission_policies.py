"""The ValidatingAdmissionPolicies (assets/manifests/admission/): their structure, their CEL,
where they are deployed, and the case table (tests/admission_cases.py) they must decide.

The table runs through tests/admission.py (cel-python) here; the real API server of the
cluster integration tier is the authority and can run the same table.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest

from pd_constructs.common.namespaces import WARMUP_NAMESPACE
from pd_constructs.serving.admission import (
    AUTOSCALED_GROUP_FIELDS,
    CLOUDWATCH_NAMESPACE,
    OPERATOR_USER,
    gpu_namespaces,
)
from ray_pd_eks.config import DEFAULTS, AppConfig
from tests.admission import Request, compile_cel, decide
from tests.admission_cases import (
    IMAGE,
    AdmissionCase,
    admission_objects,
    binding_cases,
    cases,
    raycluster,
)
from tests.synth import ROOT, Synthesized, resolve

# The unprivileged GPU workers of the explicit opt-in (the default runs them privileged).
UNPRIVILEGED = DEFAULTS.with_overrides({"gpuWorkerPrivileged": False})
# UCX (no IPC_LOCK), weights staged from S3 (init containers), decode autoscaling (the head's
# token volume and sidecar), the cache on the root volume, no observability namespace.
VARIANT = DEFAULTS.with_overrides(
    {
        "kvBackend": "UCX",
        "modelS3Uri": "s3://example-models/qwen/Qwen3.5-9B/",
        "gpuNodeCount": 3,
        "decodeReplicas": 2,
        "decodeMaxReplicas": 3,
        "gpuNodeMaxCount": 4,
        "gpuLocalStorage": "none",
        "observability": "none",
    }
)
CONFIGS = {"defaults": DEFAULTS, "gpuWorkerPrivileged=false": UNPRIVILEGED, "variant": VARIANT}
POLICIES = (
    "ray-pd-eks-ray-pods.inference",
    "ray-pd-eks-rayclusters.inference",
    f"ray-pd-eks-warmup-pods.{WARMUP_NAMESPACE}",
    "ray-pd-eks-gpu-nodes",
)


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
def test_each_policy_fails_closed_and_its_binding_denies(config: AppConfig) -> None:
    objects = admission_objects(config)
    policies = _by_kind(objects, "ValidatingAdmissionPolicy")
    bindings = _by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert sorted(policies) == sorted(POLICIES) == sorted(bindings)
    for name, policy in policies.items():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail", name
        assert spec["matchConstraints"]["resourceRules"], name
        assert spec["validations"], name
        binding = bindings[name]["spec"]
        assert binding["policyName"] == name
        assert binding["validationActions"] == ["Deny"], name
        assert binding["matchResources"]["namespaceSelector"], name


def test_namespaced_policies_bind_to_their_namespace_only() -> None:
    bindings = _by_kind(admission_objects(DEFAULTS), "ValidatingAdmissionPolicyBinding")
    for name, namespace in (
        ("ray-pd-eks-ray-pods.inference", "inference"),
        ("ray-pd-eks-rayclusters.inference", "inference"),
        (f"ray-pd-eks-warmup-pods.{WARMUP_NAMESPACE}", WARMUP_NAMESPACE),
    ):
        selector = bindings[name]["spec"]["matchResources"]["namespaceSelector"]
        assert selector == {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    gpu = bindings["ray-pd-eks-gpu-nodes"]["spec"]["matchResources"]["namespaceSelector"]
    assert gpu == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["inference", WARMUP_NAMESPACE, "kube-system", "amazon-cloudwatch"],
            }
        ]
    }
    without = DEFAULTS.with_overrides({"observability": "none"})
    gpu = _by_kind(admission_objects(without), "ValidatingAdmissionPolicyBinding")[
        "ray-pd-eks-gpu-nodes"
    ]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert "amazon-cloudwatch" not in gpu


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
def test_every_cel_expression_parses(config: AppConfig) -> None:
    count = 0
    for policy in _by_kind(admission_objects(config), "ValidatingAdmissionPolicy").values():
        for item in [*policy["spec"].get("variables", []), *policy["spec"]["validations"]]:
            for key in ("expression", "messageExpression"):
                if key in item:
                    compile_cel(item[key])
                    count += 1
            assert "${" not in json.dumps(item), "an unfilled placeholder"
    assert count >= 25


def test_the_policies_name_the_operator_and_the_cache_they_allow() -> None:
    text = json.dumps(admission_objects(DEFAULTS))
    assert f"'{OPERATOR_USER}'" in text
    assert OPERATOR_USER == "system:serviceaccount:kuberay-system:kuberay-operator"
    assert f"'{DEFAULTS.node_cache_dir}'" in text


@functools.cache
def _objects(config: AppConfig) -> list[dict[str, Any]]:
    """The policies of ``config``, rendered once for its cases (``decide`` only reads them)."""
    return admission_objects(config)


@functools.cache
def _cases() -> list[tuple[str, AppConfig, AdmissionCase]]:
    return [
        (f"{label}: {c.name}", cfg, c)
        for label, cfg in CONFIGS.items()
        for c in [*cases(cfg), *binding_cases(cfg)]
    ]


@pytest.mark.parametrize(
    "config,case", [(c, k) for _, c, k in _cases()], ids=[i for i, _, _ in _cases()]
)
def test_case_table(config: AppConfig, case: AdmissionCase) -> None:
    refused = decide(_objects(config), case.request)
    if case.admit:
        assert refused == {}, refused
    else:
        assert list(refused) == [case.refused_by], refused


def test_the_table_covers_every_policy_both_ways() -> None:
    verdicts = {(c.refused_by, c.admit) for _, _, c in _cases()}
    for policy in POLICIES:
        assert (policy, False) in verdicts, policy
    assert sum(c.admit for _, _, c in _cases()) >= 15


# -- where they are deployed ------------------------------------------------------------------


def _manifest_resources(app: Synthesized) -> dict[str, dict[str, Any]]:
    return dict(app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource"))


def test_policies_are_applied_before_the_pods_they_judge(default_app: Synthesized) -> None:
    resources = _manifest_resources(default_app)
    holders: dict[str, str] = {}
    for logical_id, r in resources.items():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            if obj["kind"] in ("ValidatingAdmissionPolicy", "RayService", "DaemonSet"):
                holders.setdefault(obj["kind"] + "/" + obj["metadata"]["name"], logical_id)
    template = default_app.templates["Workload"]["Resources"]

    def depends(resource: str, on: str) -> bool:
        deps = template[resource].get("DependsOn") or []
        return on in ([deps] if isinstance(deps, str) else deps)

    ray_policy = holders["ValidatingAdmissionPolicy/ray-pd-eks-ray-pods.inference"]
    assert holders["ValidatingAdmissionPolicy/ray-pd-eks-rayclusters.inference"] == ray_policy
    assert depends(holders["RayService/ray-llm"], ray_policy)
    warm_policy = holders[f"ValidatingAdmissionPolicy/ray-pd-eks-warmup-pods.{WARMUP_NAMESPACE}"]
    assert holders["ValidatingAdmissionPolicy/ray-pd-eks-gpu-nodes"] == warm_policy
    assert depends(holders["DaemonSet/model-prefetch"], warm_policy)


# -- what runs on a GPU node ------------------------------------------------------------------


def _tolerates_gpu_taint(spec: dict[str, Any]) -> bool:
    """What the GPU-node policy counts as tolerating the taint (assets/.../gpu-nodes.yaml)."""
    return any(
        not t.get("key") or t["key"] == "nvidia.com/gpu" for t in spec.get("tolerations") or []
    )


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "RayService":
        cluster = spec["rayClusterConfig"]
        groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
        return [g["template"]["spec"] for g in groups]
    template = spec.get("template") or (spec.get("jobTemplate") or {}).get("spec", {}).get(
        "template"
    )
    return [template["spec"]] if template else []


def _values(value: Any) -> dict[str, Any]:
    """Helm values as the chart resource holds them: JSON, maybe joined with intrinsics (the
    EFA plugin's registry), which stand in as a string here."""
    if isinstance(value, dict) and "Fn::Join" in value:
        value = "".join(p if isinstance(p, str) else "TOKEN" for p in value["Fn::Join"][1])
    return dict(json.loads(value or "{}"))


def _gpu_tenants(app: Synthesized) -> dict[str, set[str]]:
    """Namespace -> what the app ships there that may run on a GPU node (tolerates the GPU
    taint): the manifests' pod templates, the Helm charts' values, the CloudWatch add-on's."""
    found: dict[str, set[str]] = {}
    for template in app.templates.values():
        for r in template["Resources"].values():
            props = r.get("Properties", {})
            if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
                for obj in json.loads(resolve(props["Manifest"])):
                    if any(_tolerates_gpu_taint(s) for s in _pod_specs(obj)):
                        namespace = obj["metadata"].get("namespace", "default")
                        found.setdefault(namespace, set()).add(obj["metadata"]["name"])
            elif r["Type"] == "Custom::AWSCDK-EKS-HelmChart":
                if _tolerates_gpu_taint(_values(props.get("Values"))):
                    found.setdefault(props["Namespace"], set()).add(props["Release"])
            elif r["Type"] == "AWS::EKS::Addon" and _tolerates_gpu_taint(
                json.loads(props.get("ConfigurationValues") or "{}")
            ):
                # An add-on installs into its own namespace (KeyError: say which for a new one).
                namespace = {"amazon-cloudwatch-observability": CLOUDWATCH_NAMESPACE}
                found.setdefault(namespace[props["AddonName"]], set()).add(props["AddonName"])
    return found


@pytest.mark.parametrize("app_name", ["default_app", "variant_app"])
def test_what_may_run_on_gpu_nodes_is_exactly_the_exempt_namespaces(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    tenants = _gpu_tenants(app)
    # Both ways: everything the app puts on GPU nodes is in a namespace the policy exempts, and
    # every namespace it exempts holds something that must run there.
    assert sorted(tenants) == sorted(gpu_namespaces(app.config)), tenants
    assert app.config.ray_service_name in tenants[app.config.namespace]
    assert {"image-prepull", "model-prefetch"} <= tenants[WARMUP_NAMESPACE]
    # The warm spares' placeholders (variant_app has one) run there too.
    assert ("gpu-warm-spare" in tenants[WARMUP_NAMESPACE]) == bool(app.config.gpu_warm_spare_nodes)
    assert {"aws-efa-k8s-device-plugin", "nvidia-device-plugin"} <= tenants["kube-system"]


def test_the_gpu_node_policy_is_applied_early_in_the_workload_stack(
    default_app: Synthesized,
) -> None:
    """Where the GPU-node policy is (the header of gpu-nodes.yaml says so): the warm-up's
    AdmissionPolicies manifest of the workload stack, waiting for nothing in that stack, so it
    is applied as soon as the stack starts; the stack deploys beside GpuNodes, not before."""
    template = default_app.templates["Workload"]["Resources"]
    (holder,) = [
        logical_id
        for logical_id, r in template.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and any(
            o["metadata"]["name"] == "ray-pd-eks-gpu-nodes"
            for o in json.loads(resolve(r["Properties"]["Manifest"]))
        )
    ]
    assert holder.startswith("WarmupAdmissionPolicies")
    assert "DependsOn" not in template[holder]
    stacks = {s.node.id: s for s in default_app.stage.stacks}
    assert "GpuNodes" not in {d.node.id for d in stacks["Workload"].dependencies}
    header = (ROOT / "assets/manifests/admission/gpu-nodes.yaml").read_text()
    assert "Deployed by the workload stack" in header
    assert "beside the GPU node stack, not before it" in header


# -- the RayCluster policy against the pinned CRD --------------------------------------------

CRD = ROOT / "tests/schemas/kuberay-v1.7.0/ray.io_rayservices.yaml"


@functools.cache
def _raycluster_spec_schema() -> dict[str, Any]:
    """RayClusterSpec as the pinned CRD has it (the RayService's rayClusterConfig is the spec
    KubeRay copies into the RayCluster). Read once, for test_workload.py too: the CRD is 1 MB
    of YAML."""
    from tests.test_workload import rayservice_crd_schema

    spec = rayservice_crd_schema(CRD.parent.parent)["properties"]["spec"]["properties"]
    return dict(spec["rayClusterConfig"])


def _changed(schema: dict[str, Any], value: Any) -> Any:
    """A value of ``schema``'s type that differs from ``value`` (None: absent)."""
    kind = schema.get("type")
    if kind == "boolean":
        return not value
    if kind == "integer":
        return (value or 0) + 1
    if kind == "array":
        return [*(value or []), value[0] if value else "changed"]
    if kind == "object":
        return {**(value or {}), "changed": "yes"}
    return f"{value}-changed" if value else "changed"


@functools.cache
def _variant_raycluster() -> dict[str, Any]:
    """The variant's RayCluster with its pod templates cut to a stub: the policy compares keys
    whatever they hold, and the CEL evaluator is slow on big trees (the case table has the
    full ones)."""
    cluster = raycluster(VARIANT)
    spec = cluster["spec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group["template"] = {"spec": {"containers": [{"name": "ray", "image": IMAGE}]}}
    return cluster


@functools.cache
def _variant_objects() -> list[dict[str, Any]]:
    return admission_objects(VARIANT)


def _field_cases() -> list[tuple[str, str, str]]:
    """(level, field, change|remove) for every spec and worker-group field of the CRD; a field
    is removed only where the rendered RayCluster has it."""
    schema = _raycluster_spec_schema()
    group = schema["properties"]["workerGroupSpecs"]["items"]["properties"]
    rendered = _variant_raycluster()["spec"]
    fields = [("spec", f, rendered) for f in sorted(schema["properties"])]
    fields += [("group", f, rendered["workerGroupSpecs"][0]) for f in sorted(group)]
    return [
        (level, field, op)
        for level, field, holder in fields
        if field != "workerGroupSpecs" or level == "group"
        for op in ("change", "remove")
        if op == "change" or field in holder
    ]


def test_the_autoscaled_fields_are_the_crds_and_hold_only_what_the_autoscaler_writes() -> None:
    group = _raycluster_spec_schema()["properties"]["workerGroupSpecs"]["items"]["properties"]
    assert set(AUTOSCALED_GROUP_FIELDS) <= set(group)
    assert group["replicas"]["type"] == "integer"
    # The autoscaler replaces scaleStrategy whole with {workersToDelete: [...]}: a field a newer
    # CRD adds inside it would be writable by the autoscaler's account. Look before allowing it.
    assert sorted(group["scaleStrategy"]["properties"]) == ["workersToDelete"]


@pytest.mark.parametrize(("level", "field", "op"), _field_cases(), ids=lambda v: str(v))
def test_the_autoscalers_account_may_change_no_field_of_the_crd_but_the_autoscaled(
    level: str, field: str, op: str
) -> None:
    """Every field of the pinned CRD's RayClusterSpec and worker groups, changed (or added) or
    removed by the head's account (the autoscaler's token): refused, unless it is one the
    autoscaler patches; the operator may change it. A field a newer CRD adds gets a case here
    by itself."""
    config = VARIANT  # decode autoscales: the head's account exists
    ours = _variant_raycluster()
    schema = _raycluster_spec_schema()
    new = copy.deepcopy(ours)
    if level == "spec":
        holder, field_schema = new["spec"], schema["properties"][field]
    else:
        holder = new["spec"]["workerGroupSpecs"][0]
        items = schema["properties"]["workerGroupSpecs"]["items"]["properties"]
        field_schema = items[field]
    if op == "remove":
        del holder[field]
    else:
        holder[field] = _changed(field_schema, holder.get(field))
    head_sa = f"system:serviceaccount:{config.namespace}:{config.ray_service_name}-ray-head"
    objects = _variant_objects()
    refused = decide(
        objects, Request("UPDATE", "rayclusters", "ray.io", config.namespace, head_sa, new, ours)
    )
    if level == "group" and field in AUTOSCALED_GROUP_FIELDS:
        assert refused == {}, refused
    else:
        assert list(refused) == [f"ray-pd-eks-rayclusters.{config.namespace}"], refused
    if op == "change":
        by_operator = Request(
            "UPDATE", "rayclusters", "ray.io", config.namespace, OPERATOR_USER, new, ours
        )
        assert decide(objects, by_operator) == {}
