"""ValidatingAdmissionPolicies: what pods of our namespaces may ask of their nodes, who may
change the Ray cluster's shape, and that the GPU nodes serve only our pods.

Pod Security admission works per namespace and level; both of ours must enforce `privileged`
(the node cache is a hostPath, which `baseline` forbids), which alone would admit any pod the
namespace's writers create. These policies (Kubernetes >= 1.30, GA) narrow that to exactly our
pods, told apart by the identity that creates them: KubeRay creates the Ray pods with its own
service account, the DaemonSet controller the warm-up pods. Each file under
``assets/manifests/admission/`` is a policy and its binding (``validationActions: [Deny]``,
``failurePolicy: Fail``); its header says what it admits and why. Rendering is pure, like
:mod:`pd_constructs.serving.workload`; ``tests/admission_cases.py`` holds the requests each policy
must admit or refuse, for the test evaluator and for the real API server.
"""

from __future__ import annotations

from typing import Any

from pd_constructs.common.helm import kuberay_operator_identity
from pd_constructs.common.namespaces import OPERATOR_NAMESPACE, WARMUP_NAMESPACE
from pd_constructs.common.templates import render
from ray_pd_eks.config import AppConfig

# The KubeRay operator as the API server knows it: the chart's service account in the release's
# namespace, derived from the release and the chart's naming rules
# (pd_constructs/common/helm.py), so these policies, the identities table and the chart cannot
# name different accounts.
OPERATOR = kuberay_operator_identity()
OPERATOR_SERVICE_ACCOUNT = OPERATOR.service_account
OPERATOR_USER = OPERATOR.user
# Who creates a DaemonSet's pods: the controller's own account when kube-controller-manager
# runs with --use-service-account-credentials, else the controller manager itself.
DAEMONSET_CONTROLLER_USERS = (
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:kube-controller-manager",
)
# Who creates a Deployment's pods (the warm spares' placeholders): the ReplicaSet controller,
# in the same two forms.
REPLICASET_CONTROLLER_USERS = (
    "system:serviceaccount:kube-system:replicaset-controller",
    "system:kube-controller-manager",
)
# Who binds pods to nodes: kube-scheduler's user, the subject of Kubernetes' bootstrap
# ClusterRoleBinding system:kube-scheduler (the only binder here: no Fargate profile, no
# second scheduler).
SCHEDULER_USER = "system:kube-scheduler"
WORKER_GROUP = "gpu-workers"  # assets/manifests/rayservice.yaml, workerGroupSpecs[0].groupName
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"  # the observability add-on's agents


def _cel_list(values: list[str]) -> str:
    """A CEL list literal of strings (each a Kubernetes name or capability: no quotes in it)."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def worker_capabilities(config: AppConfig) -> list[str]:
    """Capabilities a GPU worker may add
    (pd_constructs/serving/workload.worker_security_context)."""
    return ["IPC_LOCK"] if config.uses_efa_transport and not config.workers_privileged else []


def _ray_policy_values(config: AppConfig) -> dict[str, str]:
    """What both policies of the Ray namespace name: the namespace, the RayService, and the
    KubeRay operator's user (the one exempt)."""
    return {
        "NAMESPACE": config.namespace,
        "RAY_SERVICE": config.ray_service_name,
        "OPERATOR": OPERATOR_USER,
    }


def render_ray_pod_policy(config: AppConfig) -> list[dict[str, Any]]:
    return list(
        render(
            "manifests/admission/ray-pods.yaml",
            {
                **_ray_policy_values(config),
                "WORKER_GROUP": WORKER_GROUP,
                "CACHE_DIR": config.node_cache_dir,
                "WORKER_CAPABILITIES": _cel_list(worker_capabilities(config)),
                "PRIVILEGED_WORKERS": "true" if config.workers_privileged else "false",
            },
        )
    )


# The worker-group fields of a RayCluster that KubeRay's autoscaler changes (Ray 2.58,
# ray/autoscaler/_private/kuberay/node_provider.py: worker_replica_patch replaces
# /spec/workerGroupSpecs/<i>/replicas, worker_delete_patch /spec/workerGroupSpecs/<i>/
# scaleStrategy; v2's KubeRayProvider sends the same patches). Everything else of a RayCluster
# is frozen for anyone but the operator (assets/manifests/admission/rayclusters.yaml).
AUTOSCALED_GROUP_FIELDS = ("replicas", "scaleStrategy")


def render_raycluster_policy(config: AppConfig) -> list[dict[str, Any]]:
    return list(
        render(
            "manifests/admission/rayclusters.yaml",
            {
                **_ray_policy_values(config),
                "AUTOSCALED": _cel_list(list(AUTOSCALED_GROUP_FIELDS)),
                "AUTOSCALED_TEXT": " and ".join(AUTOSCALED_GROUP_FIELDS),
            },
        )
    )


def render_warmup_pod_policy(config: AppConfig) -> list[dict[str, Any]]:
    return list(
        render(
            "manifests/admission/warmup-pods.yaml",
            {
                "NAMESPACE": WARMUP_NAMESPACE,
                "CONTROLLERS": _cel_list(list(DAEMONSET_CONTROLLER_USERS)),
                "SPARE_CONTROLLERS": _cel_list(list(REPLICASET_CONTROLLER_USERS)),
                "CACHE_DIR": config.node_cache_dir,
            },
        )
    )


def gpu_namespaces(config: AppConfig) -> list[str]:
    """Namespaces whose pods may request GPUs or EFA, tolerate the GPU taint, name their node
    and be bound by anyone: ours, the system's (device plugins, node agents, the Cluster
    Autoscaler) and the CloudWatch agents'."""
    namespaces = [config.namespace, WARMUP_NAMESPACE, "kube-system"]
    if config.observability_enabled:
        namespaces.append(CLOUDWATCH_NAMESPACE)
    return namespaces


def render_gpu_node_policy(config: AppConfig) -> list[dict[str, Any]]:
    return list(
        render(
            "manifests/admission/gpu-nodes.yaml",
            {
                "EXEMPT_NAMESPACES": gpu_namespaces(config),
                "SCHEDULER": SCHEDULER_USER,
                "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
            },
        )
    )
