"""The admission case table: requests the ValidatingAdmissionPolicies under
assets/manifests/admission/ must admit or refuse, as data.

``cases(config)`` builds each request from the objects the app really renders (the RayService's
head and worker templates as KubeRay turns them into pods and a RayCluster, the warm-up
DaemonSets' pod templates), so a policy and the manifests cannot drift apart unnoticed. Each
case names who sends the request (``username``, to impersonate on a real API server), the
namespace, the operation, the object (and the old one for an UPDATE) and the verdict; a
refusal also names the policy expected to refuse. ``tests/test_admission_policies.py`` runs
the table through the evaluator in tests/admission.py; the cluster integration tier can run
the same table against a real kube-apiserver (create the policies, then send each request
as ``username`` with ``--as``, dry-run, and compare the verdict).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pd_constructs.common.namespaces import OPERATOR_NAMESPACE, WARMUP_NAMESPACE
from pd_constructs.common.templates import load_yaml
from pd_constructs.serving.admission import (
    CLOUDWATCH_NAMESPACE,
    DAEMONSET_CONTROLLER_USERS,
    OPERATOR_USER,
    REPLICASET_CONTROLLER_USERS,
    SCHEDULER_USER,
    WORKER_GROUP,
    render_gpu_node_policy,
    render_ray_pod_policy,
    render_raycluster_policy,
    render_warmup_pod_policy,
)
from pd_constructs.serving.warmup import (
    render_image_prepull,
    render_model_prefetch,
    render_warm_spares,
)
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.config import DEFAULTS, AppConfig
from tests.admission import Request

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
ATTACKER_IMAGE = "attacker.example.com/shell:latest"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
# Who creates a Deployment's pods (through its ReplicaSet), with per-controller credentials.
REPLICASET_CONTROLLER = REPLICASET_CONTROLLER_USERS[0]
ADMIN = "arn:aws:iam::123456789012:role/admin"  # how EKS names an access entry's user


@dataclass(frozen=True)
class AdmissionCase:
    name: str
    request: Request
    admit: bool
    refused_by: str = ""  # the policy expected to refuse (refusals only)
    notes: str = field(default="", compare=False)


def admission_objects(config: AppConfig) -> list[dict[str, Any]]:
    """Every admission policy and binding the app deploys for ``config``."""
    return [
        *render_ray_pod_policy(config),
        *render_raycluster_policy(config),
        *render_warmup_pod_policy(config),
        *render_gpu_node_policy(config),
    ]


def _pod(template: dict[str, Any], namespace: str, name: str, labels: dict[str, str]) -> dict:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(template.get("metadata") or {}).get("labels", {}), **labels},
        },
        "spec": copy.deepcopy(template["spec"]),
    }
    return pod


def ray_pods(config: AppConfig) -> dict[str, dict[str, Any]]:
    """The head and a GPU worker pod as KubeRay 1.7 creates them (its labels; the worker's
    wait-gcs-ready init container with the Ray container's securityContext)."""
    rs = render_rayservice(config, image=IMAGE, region="us-west-2")
    cluster = rs["spec"]["rayClusterConfig"]
    name = config.ray_service_name
    head = _pod(
        cluster["headGroupSpec"]["template"],
        config.namespace,
        f"{name}-abcde-head-x1",
        {
            "ray.io/cluster": f"{name}-abcde",
            "ray.io/node-type": "head",
            "ray.io/group": "headgroup",
        },
    )
    (group,) = cluster["workerGroupSpecs"]
    worker = _pod(
        group["template"],
        config.namespace,
        f"{name}-abcde-{WORKER_GROUP}-worker-y2",
        {
            "ray.io/cluster": f"{name}-abcde",
            "ray.io/node-type": "worker",
            "ray.io/group": group["groupName"],
        },
    )
    ray = worker["spec"]["containers"][0]
    worker["spec"]["initContainers"] = [
        *(worker["spec"].get("initContainers") or []),
        {
            "name": "wait-gcs-ready",
            "image": ray["image"],
            "securityContext": copy.deepcopy(ray.get("securityContext")),
        },
    ]
    return {"head": head, "worker": worker}


def raycluster(config: AppConfig, owner: str | None = None) -> dict[str, Any]:
    """The RayCluster KubeRay creates for the RayService: ``rayClusterConfig`` as its spec,
    owned by the RayService (``owner``, default ours)."""
    rs = render_rayservice(config, image=IMAGE, region="us-west-2")
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": f"{config.ray_service_name}-abcde",
            "namespace": config.namespace,
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayService",
                    "name": owner or config.ray_service_name,
                    "uid": "00000000-0000-0000-0000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(rs["spec"]["rayClusterConfig"]),
    }


def warmup_pods(config: AppConfig) -> dict[str, dict[str, Any]]:
    prefetch = render_model_prefetch(config, region="us-west-2")
    prepull = render_image_prepull(image=IMAGE)
    # The warm spares' placeholder (gpuWarmSpareNodes), rendered whatever ``config`` says: with
    # decode 1..3 on 2..4 nodes and one spare.
    spare_config = DEFAULTS.with_overrides(
        {"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4, "gpuWarmSpareNodes": 1}
    )
    (_, spare) = render_warm_spares(spare_config, image="pause@sha256:" + "0" * 64)
    # The policies do not judge priority; without the PriorityClass (the cluster tier creates
    # only the policies) the API server's Priority plugin would refuse the pod before them.
    del spare["spec"]["template"]["spec"]["priorityClassName"]
    return {
        "prefetch": _pod(prefetch["spec"]["template"], WARMUP_NAMESPACE, "model-prefetch-a", {}),
        "prepull": _pod(prepull["spec"]["template"], WARMUP_NAMESPACE, "image-prepull-a", {}),
        "spare": _pod(spare["spec"]["template"], WARMUP_NAMESPACE, "gpu-warm-spare-a", {}),
    }


def _plain_pod(namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "busybox"}], **spec},
    }


def _with(obj: dict[str, Any], change: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    change(out)
    return out


def _pod_request(op: str, ns: str, user: str, obj: dict, old: dict | None = None, sub: str = ""):
    return Request(op, "pods", "", ns, user, obj, old, sub)


def _cluster_request(op: str, ns: str, user: str, obj: dict, old: dict | None = None):
    return Request(op, "rayclusters", "ray.io", ns, user, obj, old)


def cases(config: AppConfig) -> list[AdmissionCase]:
    """The table for ``config`` (run it for the defaults, privileged GPU workers with EFA, and
    for ``gpuWorkerPrivileged=false``)."""
    ns = config.namespace
    head_sa = f"system:serviceaccount:{ns}:{config.ray_service_name}-ray-head"
    pods = ray_pods(config)
    head, worker = pods["head"], pods["worker"]
    ray_pods_policy = f"ray-pd-eks-ray-pods.{ns}"
    clusters_policy = f"ray-pd-eks-rayclusters.{ns}"
    warmup_policy = f"ray-pd-eks-warmup-pods.{WARMUP_NAMESPACE}"
    out: list[AdmissionCase] = []

    def case(name: str, request: Request, admit: bool, refused_by: str = "") -> None:
        out.append(AdmissionCase(name, request, admit, refused_by))

    # -- Ray pods ---------------------------------------------------------------------------
    case("operator creates the GPU worker", _pod_request("CREATE", ns, OPERATOR_USER, worker), True)
    case("operator creates the head", _pod_request("CREATE", ns, OPERATOR_USER, head), True)
    case(
        "another identity creates a copy of the GPU worker",
        _pod_request("CREATE", ns, head_sa, worker),
        False,
        ray_pods_policy,
    )

    def root_host_path(p: dict) -> None:
        p["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})

    case(
        "operator creates a GPU worker that mounts the node's /",
        _pod_request("CREATE", ns, OPERATOR_USER, _with(worker, root_host_path)),
        False,
        ray_pods_policy,
    )

    def cache_on_head(p: dict) -> None:
        p["spec"].setdefault("volumes", []).append(
            {"name": "cache", "hostPath": {"path": config.node_cache_dir}}
        )

    case(
        "operator creates a head that mounts the node cache",
        _pod_request("CREATE", ns, OPERATOR_USER, _with(head, cache_on_head)),
        False,
        ray_pods_policy,
    )

    def privileged(p: dict) -> None:
        p["spec"]["containers"][0]["securityContext"] = {"privileged": True}

    def sys_admin(p: dict) -> None:
        p["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}

    if config.workers_privileged:
        case(
            "operator creates the privileged GPU worker (gpuWorkerPrivileged)",
            _pod_request("CREATE", ns, OPERATOR_USER, _with(worker, privileged)),
            True,
        )
    else:
        case(
            "operator creates a privileged GPU worker without gpuWorkerPrivileged or EFA",
            _pod_request("CREATE", ns, OPERATOR_USER, _with(worker, privileged)),
            False,
            ray_pods_policy,
        )
    case(
        "operator creates a privileged head",
        _pod_request("CREATE", ns, OPERATOR_USER, _with(head, privileged)),
        False,
        ray_pods_policy,
    )
    case(
        "operator creates a GPU worker that adds SYS_ADMIN",
        _pod_request("CREATE", ns, OPERATOR_USER, _with(worker, sys_admin)),
        False,
        ray_pods_policy,
    )
    case(
        "operator creates a head on the host network",
        _pod_request(
            "CREATE", ns, OPERATOR_USER, _with(head, lambda p: p["spec"].update(hostNetwork=True))
        ),
        False,
        ray_pods_policy,
    )

    def new_image(p: dict) -> None:
        p["spec"]["containers"][0]["image"] = ATTACKER_IMAGE

    def new_label(p: dict) -> None:
        p["metadata"]["labels"]["example.com/touched"] = "yes"

    case(
        "the autoscaler's account swaps a running worker's image",
        _pod_request("UPDATE", ns, head_sa, _with(worker, new_image), worker),
        False,
        ray_pods_policy,
    )
    case(
        "the autoscaler's account labels a running worker",
        _pod_request("UPDATE", ns, head_sa, _with(worker, new_label), worker),
        True,
    )
    case(
        "operator changes a running worker's image",
        _pod_request("UPDATE", ns, OPERATOR_USER, _with(worker, new_image), worker),
        True,
    )

    def debug(privileged_debug: bool) -> Any:
        def change(p: dict) -> None:
            container: dict[str, Any] = {"name": "debugger", "image": "busybox"}
            if privileged_debug:
                container["securityContext"] = {"privileged": True}
            p["spec"]["ephemeralContainers"] = [container]

        return change

    case(
        "an admin adds a privileged debug container to a worker",
        _pod_request(
            "UPDATE", ns, ADMIN, _with(worker, debug(True)), worker, "ephemeralcontainers"
        ),
        False,
        ray_pods_policy,
    )
    case(
        "an admin adds a plain debug container to a worker",
        _pod_request(
            "UPDATE", ns, ADMIN, _with(worker, debug(False)), worker, "ephemeralcontainers"
        ),
        True,
    )
    case("the bench Job's pod", _pod_request("CREATE", ns, JOB_CONTROLLER, _plain_pod(ns)), True)

    # -- RayClusters ------------------------------------------------------------------------
    ours = raycluster(config)
    case(
        "operator creates the RayCluster of our RayService",
        _cluster_request("CREATE", ns, OPERATOR_USER, ours),
        True,
    )
    case(
        "operator creates a RayCluster for another RayService",
        _cluster_request("CREATE", ns, OPERATOR_USER, raycluster(config, owner="other")),
        False,
        clusters_policy,
    )
    case(
        "the autoscaler's account creates a RayCluster",
        _cluster_request("CREATE", ns, head_sa, ours),
        False,
        clusters_policy,
    )

    def scale(c: dict) -> None:
        group = c["spec"]["workerGroupSpecs"][0]
        group["replicas"] = group["replicas"] + 1
        group["scaleStrategy"] = {"workersToDelete": [f"{config.ray_service_name}-w-1"]}

    case(
        "the autoscaler's account scales the worker group",
        _cluster_request("UPDATE", ns, head_sa, _with(ours, scale), ours),
        True,
    )

    def add_group(c: dict) -> None:
        evil = copy.deepcopy(c["spec"]["workerGroupSpecs"][0])
        evil["groupName"] = "escape"
        evil["template"]["spec"]["nodeSelector"] = {"role": "system"}
        evil["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        evil["template"]["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
        c["spec"]["workerGroupSpecs"].append(evil)

    def group_image(c: dict) -> None:
        c["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = (
            ATTACKER_IMAGE
        )

    def group_security(c: dict) -> None:
        container = c["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
        container["securityContext"] = {"privileged": True, "capabilities": {"add": ["ALL"]}}

    def group_volume(c: dict) -> None:
        spec = c["spec"]["workerGroupSpecs"][0]["template"]["spec"]
        spec["volumes"].append({"name": "root", "hostPath": {"path": "/"}})

    def group_bound(c: dict) -> None:
        c["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 64

    def head_node(c: dict) -> None:
        c["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"role": "gpu-worker"}

    def suspend(c: dict) -> None:
        c["spec"]["suspend"] = True

    def group_resources(c: dict) -> None:
        c["spec"]["workerGroupSpecs"][0]["resources"] = {"GPU": "8"}

    def overwrite_command(c: dict) -> None:
        c["metadata"]["annotations"] = {"ray.io/overwrite-container-cmd": "true"}

    for name, change in (
        ("adds a worker group", add_group),
        ("suspends the RayCluster", suspend),
        ("changes the worker group's Ray resources", group_resources),
        ("annotates the RayCluster (ray.io/overwrite-container-cmd)", overwrite_command),
        ("changes the worker group's image", group_image),
        ("changes the worker group's security context", group_security),
        ("adds a volume to the worker group", group_volume),
        ("raises the worker group's maxReplicas", group_bound),
        ("moves the head group", head_node),
    ):
        case(
            f"the autoscaler's account {name}",
            _cluster_request("UPDATE", ns, head_sa, _with(ours, change), ours),
            False,
            clusters_policy,
        )
    case(
        "operator changes the worker group's image for our RayService",
        _cluster_request("UPDATE", ns, OPERATOR_USER, _with(ours, group_image), ours),
        True,
    )

    # -- warm-up pods -----------------------------------------------------------------------
    warm = warmup_pods(config)
    for user in DAEMONSET_CONTROLLER_USERS:
        case(
            f"{user} creates the prefetch pod",
            _pod_request("CREATE", WARMUP_NAMESPACE, user, warm["prefetch"]),
            True,
        )
    controller = DAEMONSET_CONTROLLER_USERS[0]
    case(
        "the DaemonSet controller creates the pre-pull pod",
        _pod_request("CREATE", WARMUP_NAMESPACE, controller, warm["prepull"]),
        True,
    )
    case(
        "the DaemonSet controller creates a pre-pull pod that mounts the node cache",
        _pod_request("CREATE", WARMUP_NAMESPACE, controller, _with(warm["prepull"], cache_on_head)),
        False,
        warmup_policy,
    )
    case(
        "another identity creates a copy of the prefetch pod",
        _pod_request("CREATE", WARMUP_NAMESPACE, ADMIN, warm["prefetch"]),
        False,
        warmup_policy,
    )
    case(
        "the DaemonSet controller creates a privileged pre-pull pod",
        _pod_request("CREATE", WARMUP_NAMESPACE, controller, _with(warm["prepull"], privileged)),
        False,
        warmup_policy,
    )
    # A warm spare's placeholder asks for GPUs and EFA and tolerates the GPU taint: admitted in
    # the warm-up namespace (exempt from the GPU-node policy), refused anywhere else.
    for user in REPLICASET_CONTROLLER_USERS:
        case(
            f"{user} creates a warm spare's placeholder",
            _pod_request("CREATE", WARMUP_NAMESPACE, user, warm["spare"]),
            True,
        )
    elsewhere = _with(warm["spare"], lambda p: p["metadata"].update(namespace="default"))
    case(
        "the ReplicaSet controller creates a copy of the placeholder in namespace default",
        _pod_request("CREATE", "default", REPLICASET_CONTROLLER, elsewhere),
        False,
        "ray-pd-eks-gpu-nodes",
    )
    case(
        "an admin creates a copy of the placeholder (GPUs and EFA) in the warm-up namespace",
        _pod_request("CREATE", WARMUP_NAMESPACE, ADMIN, warm["spare"]),
        False,
        warmup_policy,
    )
    unlabelled = _with(warm["spare"], lambda p: p["metadata"].update(labels={}))
    case(
        "the ReplicaSet controller creates a GPU pod of another Deployment in the warm-up "
        "namespace",
        _pod_request("CREATE", WARMUP_NAMESPACE, REPLICASET_CONTROLLER, unlabelled),
        False,
        warmup_policy,
    )

    def gpu_limit_only(p: dict) -> None:
        p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}

    case(
        "the DaemonSet controller creates a pre-pull pod with a GPU limit",
        _pod_request(
            "CREATE", WARMUP_NAMESPACE, controller, _with(warm["prepull"], gpu_limit_only)
        ),
        False,
        warmup_policy,
    )
    case(
        "the ReplicaSet controller creates a privileged placeholder",
        _pod_request(
            "CREATE", WARMUP_NAMESPACE, REPLICASET_CONTROLLER, _with(warm["spare"], privileged)
        ),
        False,
        warmup_policy,
    )

    # -- GPU nodes: only our namespaces ------------------------------------------------------
    out.extend(gpu_node_cases(config))
    return out


GPU_NODE = "ip-10-0-192-10.us-west-2.compute.internal"  # a GPU node's name (its private DNS)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pinned_to(node: str) -> dict[str, Any]:
    """The node affinity the DaemonSet controller gives each daemon pod instead of nodeName
    (kubernetes pkg/controller/daemon/util, ReplaceDaemonSetPodNodeNameNodeAffinity)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _daemon_pod(namespace: str, values_file: str) -> dict[str, Any]:
    """A device plugin's pod as the DaemonSet controller creates it on a GPU node: the node
    selection and tolerations of our values file, pinned to the node by affinity."""
    values = load_yaml(f"helm-values/{values_file}")
    return _plain_pod(
        namespace,
        nodeSelector=values["nodeSelector"],
        tolerations=values["tolerations"],
        affinity=_pinned_to(GPU_NODE),
    )


def gpu_node_cases(config: AppConfig) -> list[AdmissionCase]:
    """The cluster-wide GPU-node policy: what a pod outside our namespaces may not do to reach
    a GPU node (tolerate its taint at CREATE or by UPDATE, request a GPU or EFA, name its node),
    and what must still be admitted (the pods that run on GPU nodes today, in their
    namespaces; a daemon pod pinned by affinity; a node's mirror pod)."""
    gpu_policy = "ray-pd-eks-gpu-nodes"
    controller = DAEMONSET_CONTROLLER_USERS[0]
    out: list[AdmissionCase] = []

    def case(name: str, request: Request, admit: bool, refused_by: str = "") -> None:
        out.append(AdmissionCase(name, request, admit, refused_by))

    gpu_request = {"resources": {"limits": {"nvidia.com/gpu": 1}}}
    # Extended resources must carry a limit (the API server refuses a request alone, before
    # admission: found against the real one); requests then default to the limits.
    efa_request = {
        "resources": {
            "limits": {"vpc.amazonaws.com/efa": 1},
            "requests": {"vpc.amazonaws.com/efa": 1},
        }
    }

    def container(extra: dict) -> dict:
        return {"containers": [{"name": "app", "image": "busybox", **extra}]}

    for name, spec in (
        ("requests a GPU", container(gpu_request)),
        ("requests an EFA interface", container(efa_request)),
        ("tolerates the GPU taint", {"tolerations": [GPU_TOLERATION]}),
        (
            "tolerates the GPU taint by value",
            {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}]},
        ),
        ("tolerates every taint", {"tolerations": [{"operator": "Exists"}]}),
        ("tolerates every taint (empty key)", {"tolerations": [{"key": "", "operator": "Exists"}]}),
        ("names a GPU node (spec.nodeName)", {"nodeName": GPU_NODE}),
    ):
        case(
            f"a pod in namespace default {name}",
            _pod_request("CREATE", "default", ADMIN, _plain_pod("default", **spec)),
            False,
            gpu_policy,
        )
    case(
        "the KubeRay operator creates a pod in its own namespace that names a GPU node",
        _pod_request(
            "CREATE",
            OPERATOR_NAMESPACE,
            OPERATOR_USER,
            _plain_pod(OPERATOR_NAMESPACE, nodeName=GPU_NODE),
        ),
        False,
        gpu_policy,
    )
    case(
        "a plain pod in namespace default",
        _pod_request("CREATE", "default", ADMIN, _plain_pod("default")),
        True,
    )
    case(
        "a pod in namespace default tolerates another taint",
        _pod_request(
            "CREATE",
            "default",
            ADMIN,
            _plain_pod(
                "default",
                tolerations=[{"key": "example.com/dedicated", "operator": "Exists"}],
            ),
        ),
        True,
    )
    # What the kubelet sends (NodeRestriction lets a node create only such pods, bound to it).
    mirror = _plain_pod("default", nodeName=GPU_NODE)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "0123456789abcdef"}
    case(
        "a node creates the mirror pod of its static pod in namespace default",
        _pod_request("CREATE", "default", f"system:node:{GPU_NODE}", mirror),
        True,
    )
    case(
        "the DaemonSet controller creates a daemon pod in namespace default, pinned by affinity",
        _pod_request(
            "CREATE", "default", controller, _plain_pod("default", affinity=_pinned_to(GPU_NODE))
        ),
        True,
    )
    # What runs on a GPU node today, each in its namespace (docs/security.md).
    for values_file in ("nvidia-device-plugin.yaml", "efa-device-plugin.yaml"):
        case(
            f"the DaemonSet controller creates the {values_file[:-5]} pod on a GPU node",
            _pod_request(
                "CREATE", "kube-system", controller, _daemon_pod("kube-system", values_file)
            ),
            True,
        )
    case(
        "a pod in kube-system names a GPU node (kube-system is trusted)",
        _pod_request("CREATE", "kube-system", ADMIN, _plain_pod("kube-system", nodeName=GPU_NODE)),
        True,
    )
    if config.observability_enabled:
        case(
            "the CloudWatch agent tolerates every taint",
            _pod_request(
                "CREATE",
                CLOUDWATCH_NAMESPACE,
                controller,
                _plain_pod(
                    CLOUDWATCH_NAMESPACE,
                    tolerations=[{"operator": "Exists"}],
                    affinity=_pinned_to(GPU_NODE),
                ),
            ),
            True,
        )
    else:
        case(
            "without observability a pod in amazon-cloudwatch tolerates every taint",
            _pod_request(
                "CREATE",
                CLOUDWATCH_NAMESPACE,
                controller,
                _plain_pod(CLOUDWATCH_NAMESPACE, tolerations=[{"operator": "Exists"}]),
            ),
            False,
            gpu_policy,
        )

    # UPDATE: Kubernetes lets an update add tolerations to a pod (and nothing else of these).
    plain = _plain_pod("default")
    for name, toleration in (
        ("the GPU taint", GPU_TOLERATION),
        ("every taint", {"operator": "Exists"}),
    ):
        case(
            f"an update adds a toleration of {name} to a pod in namespace default",
            _pod_request(
                "UPDATE",
                "default",
                ADMIN,
                _with(plain, lambda p, t=toleration: p["spec"].update(tolerations=[t])),
                plain,
            ),
            False,
            gpu_policy,
        )
    other = {"key": "example.com/dedicated", "operator": "Exists"}
    case(
        "an update adds another toleration to a pod in namespace default",
        _pod_request(
            "UPDATE",
            "default",
            ADMIN,
            _with(plain, lambda p: p["spec"].update(tolerations=[other])),
            plain,
        ),
        True,
    )
    # A pod that tolerated the taint before the policy existed keeps its toleration.
    older = _plain_pod("default", tolerations=[GPU_TOLERATION])
    case(
        "an update labels a pod in namespace default that already tolerates the GPU taint",
        _pod_request(
            "UPDATE",
            "default",
            ADMIN,
            _with(older, lambda p: p["metadata"].update(labels={"example.com/touched": "yes"})),
            older,
        ),
        True,
    )
    worker = ray_pods(config)["worker"]
    case(
        "an update adds a toleration of every taint to a GPU worker (our namespace)",
        _pod_request(
            "UPDATE",
            config.namespace,
            OPERATOR_USER,
            _with(worker, lambda p: p["spec"]["tolerations"].append({"operator": "Exists"})),
            worker,
        ),
        True,
    )
    return out


def _binding(namespace: str, pod: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def binding_cases(config: AppConfig) -> list[AdmissionCase]:
    """Binding a pending pod to a node, through ``pods/binding`` and the older ``bindings``
    resource: outside our namespaces only the scheduler may. Kept apart from :func:`cases`: a
    dry-run Binding needs an existing pending pod and ``create`` on bindings, which the cluster
    tier's CREATE run does not set up."""
    gpu_policy = "ray-pd-eks-gpu-nodes"
    names = {
        SCHEDULER_USER: "the scheduler",
        ADMIN: "an admin",
        OPERATOR_USER: "the operator",
        "system:serviceaccount:kube-system:other-scheduler": "a scheduler of another name",
    }
    out: list[AdmissionCase] = []
    for label, resource, sub in (("pods/binding", "pods", "binding"), ("bindings", "bindings", "")):
        for user, namespace, admit in (
            (SCHEDULER_USER, "default", True),
            (ADMIN, "default", False),
            (OPERATOR_USER, "default", False),
            (ADMIN, config.namespace, True),
            # The operator's own pod must be bound before anyone can confirm the scheduler's
            # user name on a new cluster: bindings in its namespace are not judged (whoever
            # binds there still needs RBAC's `create` on bindings: administrators, the
            # scheduler), and a pod created there is still judged like any other.
            ("system:serviceaccount:kube-system:other-scheduler", OPERATOR_NAMESPACE, True),
            (ADMIN, OPERATOR_NAMESPACE, True),
        ):
            out.append(
                AdmissionCase(
                    f"{names[user]} binds a pod in {namespace} to a GPU node ({label})",
                    Request(
                        "CREATE",
                        resource,
                        "",
                        namespace,
                        user,
                        _binding(namespace, "app", GPU_NODE),
                        None,
                        sub,
                    ),
                    admit,
                    "" if admit else gpu_policy,
                )
            )
    return out
