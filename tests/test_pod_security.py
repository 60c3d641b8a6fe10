"""Pods against their namespace's Pod Security level, and who among them holds credentials.

Every Ray and warm-up pod of every rendered variant (LIBFABRIC, UCX, S3 staging, Hugging Face
token, aggregated) is checked the way the PodSecurity admission plugin would check it when
KubeRay or the DaemonSet controller creates it (tests/psa.py). KubeRay adds one container of its
own to each worker, ``wait-gcs-ready``, with the Ray container's securityContext (KubeRay 1.7
``common/pod.go``); the check adds it too.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pd_constructs.serving.model_access import AWS_CONTAINERS, SKIP_CONTAINERS_ANNOTATION
from tests.psa import BASELINE_CAPABILITIES, containers, enforced_levels, violations
from tests.synth import Synthesized, resolve

VARIANTS = ("default_app", "variant_app", "token_app")


def _objects(app: Synthesized) -> list[dict[str, Any]]:
    out = []
    for stack in app.templates:
        for r in app.resources(stack, "Custom::AWSCDK-EKS-KubernetesResource").values():
            out += json.loads(resolve(r["Properties"]["Manifest"]))
    return out


def _pods(app: Synthesized) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, pod template) of every pod the app's objects create."""
    return _pods_of(_objects(app))


def _pods_of(objects: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    pods = []
    for obj in objects:
        ns = obj["metadata"].get("namespace", "")
        if obj["kind"] in ("DaemonSet", "Deployment"):
            pods.append((ns, obj["metadata"]["name"], obj["spec"]["template"]))
        if obj["kind"] == "RayService":
            cluster = obj["spec"]["rayClusterConfig"]
            head = copy.deepcopy(cluster["headGroupSpec"]["template"])
            if cluster.get("enableInTreeAutoscaling"):
                # KubeRay adds its autoscaler as a sidecar of the head (container "autoscaler"),
                # with autoscalerOptions' securityContext and volumeMounts (KubeRay 1.7.0
                # common/pod.go, mergeAutoscalerOverrides).
                options = cluster.get("autoscalerOptions") or {}
                head["spec"]["containers"].append(
                    {
                        "name": "autoscaler",
                        "image": head["spec"]["containers"][0]["image"],
                        "securityContext": copy.deepcopy(options.get("securityContext")),
                        "volumeMounts": copy.deepcopy(options.get("volumeMounts") or []),
                    }
                )
            pods.append((ns, "ray-head", head))
            for group in cluster["workerGroupSpecs"]:
                template = copy.deepcopy(group["template"])
                ray = template["spec"]["containers"][0]
                template["spec"]["initContainers"] = [
                    *template["spec"].get("initContainers", []),
                    {
                        "name": "wait-gcs-ready",
                        "image": ray["image"],
                        "securityContext": copy.deepcopy(ray.get("securityContext")),
                    },
                ]
                pods.append((ns, group["groupName"], template))
    return pods


@pytest.mark.parametrize("app_name", VARIANTS)
def test_every_pod_passes_its_namespaces_enforced_level(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    levels = enforced_levels(o for o in _objects(app) if o["kind"] == "Namespace")
    pods = _pods(app)
    assert {name for _, name, _ in pods} >= {
        "ray-head",
        "gpu-workers",
        "image-prepull",
        "model-prefetch",
    }
    for ns, name, template in pods:
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        found = violations(template["spec"], levels[ns], annotations)
        assert found == [], f"{app_name}: {ns}/{name} is rejected at {levels[ns]}: {found}"


def test_the_ucx_workers_need_more_than_baseline_for_the_node_cache(
    variant_app: Synthesized,
) -> None:
    """Why the Ray namespace is not `baseline` even without EFA: the hostPath node cache (and
    only that: the UCX workers are not privileged)."""
    assert variant_app.config.kv_backend == "UCX"
    (worker,) = [t for _, n, t in _pods(variant_app) if n == "gpu-workers"]
    assert violations(worker["spec"], "baseline") == ["hostPathVolumes:model-cache"]
    (head,) = [t for _, n, t in _pods(variant_app) if n == "ray-head"]
    assert violations(head["spec"], "baseline") == []


def test_only_the_efa_workers_run_privileged_by_default(default_app: Synthesized) -> None:
    """Beyond the cache's hostPath, the EFA workers (and KubeRay's wait-gcs-ready, which
    copies their context) run privileged (gpuWorkerPrivileged, on by default with EFA), and
    no other pod needs more than baseline."""
    for _, name, template in _pods(default_app):
        found = [v for v in violations(template["spec"], "baseline") if "hostPath" not in v]
        if name == "gpu-workers":
            assert found == ["privileged:ray-worker", "privileged:wait-gcs-ready"]
        else:
            assert found == [], name


def test_unprivileged_efa_workers_add_only_ipc_lock() -> None:
    """gpuWorkerPrivileged=false, the explicit opt-in: IPC_LOCK and nothing else."""
    from pd_constructs.serving.workload import render_rayservice
    from ray_pd_eks.config import DEFAULTS

    config = DEFAULTS.with_overrides({"gpuWorkerPrivileged": False})
    pods = _pods_of([render_rayservice(config, image="img:1")])
    (worker,) = [t for _, n, t in pods if n == "gpu-workers"]
    found = [v for v in violations(worker["spec"], "baseline") if "hostPath" not in v]
    assert found == [
        "capabilities_baseline:ray-worker:IPC_LOCK",
        "capabilities_baseline:wait-gcs-ready:IPC_LOCK",
    ]


@pytest.mark.parametrize("app", VARIANTS, indirect=True)
def test_head_and_warmup_pods_run_under_runtime_default_seccomp_without_capabilities(
    app: Synthesized,
) -> None:
    """The Ray head (with KubeRay's autoscaler sidecar when decode scales, and the fetch init
    containers with model access) and both warm-up DaemonSets pass `restricted`'s seccomp
    and capability checks (what is left is hostPath and root, which their jobs need)."""
    for _, name, template in _pods(app):
        if name == "gpu-workers":
            continue
        found = violations(template["spec"], "restricted")
        assert not [v for v in found if v.startswith(("seccomp", "capabilities", "allowPriv"))], (
            name,
            found,
        )


def test_warmup_pods_would_even_pass_restricted_but_for_the_cache_and_root(
    default_app: Synthesized,
) -> None:
    templates = {n: t for _, n, t in _pods(default_app)}
    assert violations(templates["image-prepull"]["spec"], "restricted") == []


# -- who holds AWS credentials and Kubernetes API tokens ------------------------------------


@pytest.mark.parametrize("app", VARIANTS, indirect=True)
def test_no_pod_mounts_a_kubernetes_api_token(app: Synthesized) -> None:
    pods = _pods(app)
    for _, name, template in pods:
        # The kubelet mounts no token anywhere; with decode autoscaling only KubeRay's
        # autoscaler sidecar mounts the head account's token from a projected volume.
        assert template["spec"]["automountServiceAccountToken"] is False, name
        spec = template["spec"]
        token_volumes = {
            v["name"]
            for v in spec.get("volumes") or []
            if any(
                "serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", [])
            )
        }
        holders = [
            c["name"]
            for c in [*spec["containers"], *(spec.get("initContainers") or [])]
            if token_volumes & {m["name"] for m in c.get("volumeMounts") or []}
        ]
        if name == "ray-head" and app.config.decode_autoscales:
            # The sidecar patches the RayCluster through the API, with the head's own
            # account, which no other pod uses (docs/scaling.md).
            account = spec["serviceAccountName"]
            assert account == f"{app.config.ray_service_name}-ray-head"
            assert [n for _, n, t in pods if t["spec"].get("serviceAccountName") == account] == [
                "ray-head"
            ]
            assert holders == ["autoscaler"]
            continue
        assert holders == [], name


@pytest.mark.parametrize("app_name", ("variant_app", "token_app"))
def test_only_the_fetch_init_containers_get_aws_credentials(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    """EKS Pod Identity's webhook injects credentials into every container not named in the
    skip annotation: with model access, that leaves exactly the AWS fetch init containers."""
    app: Synthesized = request.getfixturevalue(app_name)
    checked = 0
    for _, name, template in _pods(app):
        # The head has its own account (with the same role) when decode scales.
        if template["spec"].get("serviceAccountName") not in (
            "model-fetch",
            f"{app.config.ray_service_name}-ray-head",
        ):
            continue
        skipped = set(template["metadata"]["annotations"][SKIP_CONTAINERS_ANNOTATION].split(","))
        names = {c["name"] for c in containers(template["spec"])}
        credentialed = names - skipped
        assert credentialed, name
        assert credentialed <= AWS_CONTAINERS, (name, credentialed)
        assert all(n in skipped for n in names if n.startswith("ray-") or n == "done"), name
        checked += 1
    assert checked == 3  # head, workers, prefetch


def test_without_model_access_no_pod_has_an_aws_identity(default_app: Synthesized) -> None:
    for _, name, template in _pods(default_app):
        assert template["spec"].get("serviceAccountName", "default") == "default", name
        assert SKIP_CONTAINERS_ANNOTATION not in (template["metadata"].get("annotations") or {})


def test_pod_identity_roles_trust_only_this_cluster(variant_app: Synthesized) -> None:
    app = variant_app
    found = 0
    for stack in app.templates:
        for role in app.resources(stack, "AWS::IAM::Role").values():
            for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                if statement.get("Principal", {}).get("Service") != "pods.eks.amazonaws.com":
                    continue
                condition = statement["Condition"]
                assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
                source = json.dumps(condition["ArnEquals"]["aws:SourceArn"])
                # The cluster's ARN: its attribute, or built from its configured name (the VPC
                # CNI's role, created beside the control plane).
                by_name = f":cluster/{app.config.cluster_name}" in source and ":eks:" in source
                assert ("Cluster" in source and "Arn" in source) or by_name, source
                found += 1
    # The VPC CNI's, model-fetch in the warm-up and Ray namespaces, and every add-on's.
    assert found >= 3


# -- the evaluator itself --------------------------------------------------------------------


def _spec(**container: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "i", **container}]}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (_spec(), []),
        ({**_spec(), "hostNetwork": True}, ["hostNamespaces:hostNetwork"]),
        ({**_spec(), "hostPID": True}, ["hostNamespaces:hostPID"]),
        (_spec(securityContext={"privileged": True}), ["privileged:c"]),
        (_spec(securityContext={"capabilities": {"add": ["CHOWN"]}}), []),
        (
            _spec(securityContext={"capabilities": {"add": ["IPC_LOCK"]}}),
            ["capabilities_baseline:c:IPC_LOCK"],
        ),
        (_spec(ports=[{"containerPort": 80, "hostPort": 80}]), ["hostPorts:c"]),
        (_spec(ports=[{"containerPort": 80, "hostPort": 0}]), []),
        ({**_spec(), "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}, ["hostPathVolumes:v"]),
        ({**_spec(), "volumes": [{"name": "v", "emptyDir": {}}]}, []),
        (
            _spec(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            ["seccompProfile_baseline:c"],
        ),
        (_spec(securityContext={"procMount": "Unmasked"}), ["procMount:c"]),
        (_spec(securityContext={"seLinuxOptions": {"user": "u"}}), ["seLinuxOptions:c"]),
        (
            {**_spec(), "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
            ["sysctls:kernel.msgmax"],
        ),
        (
            {**_spec(), "initContainers": [{"name": "i", "securityContext": {"privileged": True}}]},
            ["privileged:i"],
        ),
    ],
)
def test_baseline_checks(spec: dict[str, Any], expected: list[str]) -> None:
    assert violations(spec, "baseline") == expected
    assert violations(spec, "privileged") == []


def test_restricted_checks_add_to_baseline() -> None:
    good: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                },
            }
        ],
        "volumes": [{"name": "t", "projected": {"sources": []}}],
    }
    assert violations(good, "restricted") == []
    root = copy.deepcopy(good)
    root["containers"][0]["securityContext"]["runAsUser"] = 0
    assert violations(root, "restricted") == ["runAsUser:c"]
    chown = copy.deepcopy(good)
    chown["containers"][0]["securityContext"]["capabilities"]["add"] = ["CHOWN"]
    assert "CHOWN" in BASELINE_CAPABILITIES
    assert violations(chown, "baseline") == []
    assert violations(chown, "restricted") == ["capabilities_restricted:c:add"]
    host = {**good, "volumes": [{"name": "h", "hostPath": {"path": "/x"}}]}
    assert violations(host, "restricted") == ["hostPathVolumes:h", "restrictedVolumes:h"]
    bare = {"containers": [{"name": "c"}]}
    assert violations(bare, "restricted") == [
        "allowPrivilegeEscalation:c",
        "capabilities_restricted:c:drop",
        "runAsNonRoot:c",
        "seccompProfile_restricted:c",
    ]
    with pytest.raises(ValueError, match="not one of"):
        violations(bare, "strict")
