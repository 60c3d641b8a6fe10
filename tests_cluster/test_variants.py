"""Each variant deployed on the real control plane: server-side apply of every manifest in
deploy order, Pod Security admission of every pod, the real KubeRay operator's objects, and the
real scheduler's placement on nodes shaped like ours."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pd_constructs.serving.workload import (
    CLUSTER_SPEC_ANNOTATION,
    cluster_spec_hash,
    head_service_account_name,
)
from ray_pd_eks.cli import coldstart
from ray_pd_eks.cli.status import WARM_SPARE_APP, WARMUP_NAMESPACE, spare_nodes
from tests import rbac
from tests_cluster import authz, variants
from tests_cluster.conftest import Applied, Deployer, events, pods
from tests_cluster.kube import Cluster, wait_until

POD_KINDS = ("DaemonSet", "Deployment", "Job", "StatefulSet")


@pytest.fixture(scope="module", params=list(variants.VARIANTS))
def variant(request: pytest.FixtureRequest, deployer: Deployer) -> str:
    deployer.ensure(request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def applied(variant: str, deployer: Deployer) -> Applied:
    return deployer.ensure(variant)


def _config(variant: str) -> Any:
    return variants.app(variant).config


def _raycluster(cluster: Cluster, variant: str) -> dict[str, Any]:
    config = _config(variant)

    def found() -> dict[str, Any] | None:
        items = cluster.items("rayclusters.ray.io", "-n", config.namespace)
        return items[0] if items else None

    return dict(wait_until("the operator to create the RayCluster", found, timeout_s=60))


def _ray_pods(cluster: Cluster, variant: str) -> dict[str, list[dict[str, Any]]]:
    """head and worker pods of the RayCluster, once the operator made them all and the
    scheduler placed them."""
    config = _config(variant)
    rayservice = variants.of_kind(variants.app(variant), "RayService")[0]
    workers = sum(g["replicas"] for g in rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"])

    def placed() -> dict[str, list[dict[str, Any]]] | None:
        found = pods(cluster, config.namespace, "ray.io/node-type")
        head = [p for p in found if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        worker = [p for p in found if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        scheduled = all(p["spec"].get("nodeName") for p in head + worker)
        if len(head) == 1 and len(worker) == workers and scheduled:
            return {"head": head, "worker": worker}
        return None

    return dict(
        wait_until(
            f"the head and {workers} worker pods to be created and scheduled "
            f"(events: {events(cluster, config.namespace)[-8:]})",
            placed,
            timeout_s=90,
        )
    )


def test_every_manifest_is_stored_as_applied(cluster: Cluster, variant: str) -> None:
    """Server-side apply accepted every object against the real schemas and our pinned CRDs
    (an apply that fails raises in the deployer); here each object is read back."""
    objects = variants.objects(variants.app(variant))
    stored = cluster.kubectl(
        "get", "-o", "name", "-f", "-", stdin="\n".join(_json(o) for o in objects)
    )
    assert len(stored.stdout.split()) == len(objects), stored.stdout


def test_pod_security_admits_every_pod(cluster: Cluster, variant: str) -> None:
    """Every workload's pods exist (Pod Security refusing one leaves its controller with a
    FailedCreate event instead), and a Pod made of each pod template passes a server-side
    dry-run create under the namespace's real enforce level."""
    app = variants.app(variant)
    refused = []
    for obj in variants.objects(app):
        template = _pod_template(obj)
        if template is None:
            continue
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"psa-{obj['metadata']['name']}"[:63],
                "namespace": obj["metadata"].get("namespace", _config(variant).namespace),
            },
            "spec": template["spec"],
        }
        done = cluster.kubectl(
            "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=_json(pod), check=False
        )
        # A Pod made here by the admin is not one the app's controllers make: the app's own
        # admission policies may refuse it (tests_cluster/test_admission_cases_real.py asks
        # them as the real creators); only a Pod Security refusal counts here, and the events
        # below prove the real controllers' pods were admitted by every plugin.
        if done.returncode != 0 and "ValidatingAdmissionPolicy 'ray-pd-eks-" not in done.stderr:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {done.stderr.strip()}")
    assert not refused, refused
    _ray_pods(cluster, variant)
    problems = [
        e
        for ns in {o["metadata"]["name"] for o in variants.of_kind(app, "Namespace")}
        for e in events(cluster, ns)
        if "FailedCreate" in e or "PodSecurity" in e
    ]
    assert not problems, problems


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _pod_template(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj["kind"] in POD_KINDS:
        if obj["kind"] == "Job":
            return dict(obj["spec"]["template"])
        return dict(obj["spec"]["template"])
    if obj["kind"] == "RayService":
        return dict(obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"])
    return None


def test_operator_creates_the_raycluster_pods_and_services(cluster: Cluster, variant: str) -> None:
    """The names the readiness check, the CLI and the NetworkPolicies use: the RayCluster
    `<name>-<suffix>` owned by the RayService, its own head Service with the dashboard port,
    head and worker pods labelled `ray.io/node-type`. The RayService's `<name>-head-svc` and
    `<name>-serve-svc` come only once Serve answers as ready (KubeRay's RayService controller
    reconciles them for a ready cluster only), so while it cannot answer neither exists."""
    config = _config(variant)
    raycluster = _raycluster(cluster, variant)
    owners = raycluster["metadata"].get("ownerReferences", [])
    assert [(o["kind"], o["name"]) for o in owners] == [("RayService", config.ray_service_name)]
    assert raycluster["metadata"]["name"].startswith(config.ray_service_name + "-")

    own = f"{raycluster['metadata']['name']}-head-svc"
    service = wait_until(
        f"the RayCluster's head Service {own}",
        lambda: (
            cluster.get("service", own, "-n", config.namespace, "--ignore-not-found")
            if cluster.kubectl(
                "get", "service", own, "-n", config.namespace, "--ignore-not-found", "-o", "name"
            ).stdout.strip()
            else None
        ),
    )
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports.get("dashboard") == 8265, ports
    names = {s["metadata"]["name"] for s in cluster.items("services", "-n", config.namespace)}
    assert f"{config.ray_service_name}-head-svc" not in names, names
    assert f"{config.ray_service_name}-serve-svc" not in names, names
    _ray_pods(cluster, variant)


def test_cluster_spec_hash_reaches_the_raycluster_and_the_head_pod(
    cluster: Cluster, variant: str
) -> None:
    config = _config(variant)
    expected = cluster_spec_hash(config)
    raycluster = _raycluster(cluster, variant)
    head_template = raycluster["spec"]["headGroupSpec"]["template"]
    assert head_template["metadata"]["annotations"][CLUSTER_SPEC_ANNOTATION] == expected
    (head,) = _ray_pods(cluster, variant)["head"]
    assert head["metadata"]["annotations"][CLUSTER_SPEC_ANNOTATION] == expected


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_token_env_lands_in_every_ray_container(cluster: Cluster, variant: str) -> None:
    """authOptions (mode token): the operator puts RAY_AUTH_MODE and RAY_AUTH_TOKEN (from the
    Secret's auth_token key) into the head, the workers, and the autoscaler sidecar."""
    config = _config(variant)
    ray_pods = _ray_pods(cluster, variant)
    for pod in ray_pods["head"] + ray_pods["worker"]:
        for container in pod["spec"]["containers"]:
            env = _env(container)
            where = f"{pod['metadata']['name']}/{container['name']}"
            assert env.get("RAY_AUTH_MODE") == "token", (where, env)
            ref = env.get("RAY_AUTH_TOKEN")
            assert ref == {
                "secretKeyRef": {"name": config.ray_auth_secret_name, "key": "auth_token"}
            }, (where, ref)


def test_autoscaler_sidecar_is_on_the_head_exactly_when_decode_autoscales(
    cluster: Cluster, variant: str
) -> None:
    config = _config(variant)
    (head,) = _ray_pods(cluster, variant)["head"]
    containers = [c["name"] for c in head["spec"]["containers"]]
    assert ("autoscaler" in containers) == config.decode_autoscales, containers


# KubeRay's Role for the autoscaler, bound to the head pod's account when autoscaling is on:
# its rules as ray-operator/controllers/ray/common/rbac.go BuildRole writes them (v1.6.1, the
# operator the tier runs, and v1.7.0, the product's: the same three rules).
KUBERAY_AUTOSCALER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "patch"]},
]


def autoscaler_requests(namespace: str, raycluster: str, head_pod: str) -> list[rbac.Attributes]:
    """What Ray 2.58's autoscaler asks of the Kubernetes API, the one KubeRay runs when
    ``autoscalerOptions.version`` is unset (v1; ray 2.58.0 wheel,
    ``ray/autoscaler/_private/kuberay/``): ``autoscaling_config.py`` GETs the RayCluster;
    ``node_provider.py``'s ``get_node_data`` GETs it again, GETs the head pod (its
    resourceVersion, ``RAY_HEAD_POD_NAME``) and LISTs the pods labelled
    ``ray.io/cluster=<cluster>``; ``submit_scale_request`` PATCHes the RayCluster (replicas,
    ``workersToDelete``). All in the cluster's namespace, through the in-cluster token."""
    return [
        authz.attrs("get", "rayclusters", raycluster, namespace, group="ray.io"),
        authz.attrs("patch", "rayclusters", raycluster, namespace, group="ray.io"),
        authz.attrs("get", "pods", head_pod, namespace),
        authz.attrs("list", "pods", namespace=namespace),
    ]


def autoscaler_beyond_its_requests(
    namespace: str, raycluster: str, worker_pod: str
) -> dict[rbac.Attributes, str]:
    """What KubeRay's Role grants that Ray 2.58's v1 autoscaler never asks, and why it is
    left so: the Role is KubeRay's (created per RayCluster, no setting narrows it)."""
    return {
        authz.attrs("watch", "pods", namespace=namespace): "read-only",
        authz.attrs("patch", "pods", worker_pod, namespace): (
            "the v2 autoscaler's pod annotations; the ray-pods admission policy refuses an "
            "image change by anyone but the operator"
        ),
        authz.attrs("patch", "pods", worker_pod, namespace, sub="resize"): (
            "the v2 autoscaler's in-place resize (ippr_provider.py)"
        ),
        authz.attrs("get", "rayclusters", raycluster + "x", namespace, group="ray.io"): (
            "no resourceNames in the Role: the namespace holds only this RayService's clusters"
        ),
        authz.attrs("patch", "rayclusters", raycluster + "x", namespace, group="ray.io"): (
            "no resourceNames; the rayclusters admission policy lets others change replicas only"
        ),
    }


def autoscaler_must_not(
    namespace: str, account: str, raycluster: str, head_pod: str, rayservice: str
) -> list[rbac.Attributes]:
    """Neighbours of the autoscaler's requests that its account must be denied."""
    other = "default"
    return [
        *(
            rbac.Attributes(a.verb, a.api_group, a.resource, a.subresource, a.name, other)
            for a in autoscaler_requests(namespace, raycluster, head_pod)
        ),
        authz.attrs("get", "secrets", f"{rayservice}-ray-token", namespace),
        authz.attrs("list", "secrets", namespace=namespace),
        authz.attrs("create", "pods", head_pod, namespace, sub="exec"),
        authz.attrs("create", "pods", head_pod, namespace, sub="portforward"),
        authz.attrs("get", "pods", head_pod, namespace, sub="log"),
        authz.attrs("patch", "pods", head_pod, namespace, sub="ephemeralcontainers"),
        authz.attrs("delete", "pods", head_pod, namespace),
        authz.attrs("update", "pods", head_pod, namespace),
        authz.attrs("create", "rayclusters", namespace=namespace, group="ray.io"),
        authz.attrs("delete", "rayclusters", raycluster, namespace, group="ray.io"),
        authz.attrs("update", "rayclusters", raycluster, namespace, group="ray.io"),
        authz.attrs("patch", "rayclusters", raycluster, namespace, group="ray.io", sub="status"),
        authz.attrs("get", "rayservices", rayservice, namespace, group="ray.io"),
        authz.attrs("patch", "rayservices", rayservice, namespace, group="ray.io"),
        authz.attrs("list", "nodes"),
        *authz.escalations(namespace, account),
    ]


def test_the_head_account_holds_the_autoscaler_role_exactly_when_decode_autoscales(
    cluster: Cluster, variant: str
) -> None:
    """KubeRay's autoscaler sidecar runs as the head pod's account. When decode scales, that
    account (``<rayService>-ray-head``, the workers' never) is bound to KubeRay's Role, exactly
    its three rules; the real authorizer allows every request Ray 2.58's autoscaler makes and
    what the Role grants beyond them (each listed, with why), and denies the neighbours: other
    namespaces, Secrets, exec, logs, debug containers, creating or deleting pods and
    RayClusters, the RayService, nodes and every escalation. Otherwise the head's account may
    do none of it. tests/rbac.py, over every RBAC object the server holds, answers alike."""
    config = _config(variant)
    ns, rs = config.namespace, config.ray_service_name
    account = head_service_account_name(config)
    raycluster = _raycluster(cluster, variant)["metadata"]["name"]
    ray_pods = _ray_pods(cluster, variant)
    (head,) = ray_pods["head"]
    assert head["spec"].get("serviceAccountName", "default") == account
    worker_accounts = {p["spec"].get("serviceAccountName", "default") for p in ray_pods["worker"]}
    if config.decode_autoscales:
        assert account not in worker_accounts, worker_accounts

        def bound() -> dict[str, Any] | None:
            listed = cluster.kubectl(
                "get", "rolebinding", raycluster, "-n", ns, "--ignore-not-found", "-o", "json"
            ).stdout
            return json.loads(listed) if listed.strip() else None

        binding = wait_until("KubeRay's autoscaler RoleBinding", bound, timeout_s=30)
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": ns}
        ], binding["subjects"]
        assert binding["roleRef"]["name"] == raycluster
        role = cluster.get("role", raycluster, "-n", ns)
        assert role["rules"] == KUBERAY_AUTOSCALER_RULES, role["rules"]
    needs = autoscaler_requests(ns, raycluster, head["metadata"]["name"])
    beyond = autoscaler_beyond_its_requests(
        ns, raycluster, ray_pods["worker"][0]["metadata"]["name"]
    )
    must_not = autoscaler_must_not(ns, account, raycluster, head["metadata"]["name"], rs)
    subject = authz.service_account(ns, account)
    real, differ = authz.disagreements(
        cluster, authz.live_authorizer(cluster), subject, [*needs, *beyond, *must_not]
    )
    assert not differ, f"tests/rbac.py disagrees with the real authorizer: {differ}"
    allowed = {str(a) for a, yes in real.items() if yes}
    expected = {str(a) for a in (*needs, *beyond)} if config.decode_autoscales else set()
    assert allowed == expected, (
        f"allowed but not expected: {sorted(allowed - expected)}; "
        f"expected but denied: {sorted(expected - allowed)}"
    )


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(cluster.get("node", name))


def test_scheduler_places_head_on_a_system_node_and_workers_on_distinct_gpu_nodes(
    cluster: Cluster, variant: str
) -> None:
    ray_pods = _ray_pods(cluster, variant)
    (head,) = ray_pods["head"]
    head_node = _node(cluster, head["spec"]["nodeName"])
    assert head_node["metadata"]["labels"]["role"] == "system"
    worker_nodes = [p["spec"]["nodeName"] for p in ray_pods["worker"]]
    assert len(set(worker_nodes)) == len(worker_nodes), f"two workers share a node: {worker_nodes}"
    for name in worker_nodes:
        assert _node(cluster, name)["metadata"]["labels"]["role"] == "gpu-worker"


def _selected(ds: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet's nodeSelector and required node affinity select a node (the
    operators In and Exists, which are the ones the app uses)."""
    spec = ds["spec"]["template"]["spec"]
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    for term in required["nodeSelectorTerms"]:
        exprs = term.get("matchExpressions", [])
        if all(
            (e["operator"] == "In" and labels.get(e["key"]) in e["values"])
            or (e["operator"] == "Exists" and e["key"] in labels)
            for e in exprs
        ):
            return True
    return False


def test_warmup_daemonsets_run_a_pod_on_every_gpu_node(cluster: Cluster, variant: str) -> None:
    """The real DaemonSet controller and scheduler put one pod of each warm-up DaemonSet on
    every node it selects, and every GPU node is among them (the taint tolerated)."""
    app = variants.app(variant)
    all_nodes = cluster.items("nodes", "-l", "type=kwok")
    gpu_nodes = {
        n["metadata"]["name"] for n in all_nodes if n["metadata"]["labels"]["role"] == "gpu-worker"
    }
    for ds in variants.of_kind(app, "DaemonSet"):
        namespace, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        want = sorted(n["metadata"]["name"] for n in all_nodes if _selected(ds, n))
        assert gpu_nodes <= set(want), f"{name} does not select every GPU node: {want}"
        selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())

        def on_every(
            namespace: str = namespace, selector: str = selector, want: list[str] = want
        ) -> list[str] | None:
            found = pods(cluster, namespace, selector)
            placed = sorted(p["spec"].get("nodeName", "") for p in found)
            running = all(p["status"].get("phase") == "Running" for p in found)
            return placed if placed == want and running else None

        wait_until(f"DaemonSet {name}'s pods Running on {want}", on_every, timeout_s=60)


def test_coldstart_measures_every_gpu_node_from_the_stored_objects(
    cluster: Cluster, variant: str
) -> None:
    """``coldstart`` measures from what the real API server stores: the node's Ready, the
    warm-up pods' and the Ray worker's container starts (KWOK writes the statuses a kubelet
    would; the field paths and formats are the API server's). Every Kubernetes step of every
    GPU node that runs a worker is measured, in order, from the node's registration on. The
    engine's and Serve's steps come from Serve's logs, which no process writes here (KWOK
    runs no Ray): tests/test_cli_coldstart.py reads them from the fake dashboard."""
    config = _config(variant)
    workers = _ray_pods(cluster, variant)["worker"]
    nodes = {
        n["metadata"]["name"]: n
        for n in cluster.items("nodes", "-l", "role=gpu-worker")
        if any(w["spec"].get("nodeName") == n["metadata"]["name"] for w in workers)
    }
    assert nodes

    def measured() -> list[coldstart.NodeColdStart] | None:
        warm = pods(cluster, WARMUP_NAMESPACE)
        ray = pods(cluster, config.namespace)
        found = [
            coldstart.measure(node, None, "the node's registration", warm, ray, [])
            for node in nodes.values()
        ]
        done = all(step.end is not None for f in found for step in f.steps[:4])
        return found if done else None

    found = wait_until(f"every step measured on {sorted(nodes)}", measured, timeout_s=60)
    for node in found:
        joined, image, weights, worker, engine, serving = node.steps
        assert (engine.note, serving.end) == ("Serve not read", None), node
        times = [joined.end, image.start, image.end, weights.start, weights.end, worker.end]
        assert all(t is not None for t in times), node
        assert node.launch <= joined.end <= image.end, node
        assert image.start <= image.end and weights.start <= weights.end, node
        assert weights.name.endswith(("prefetch-model)", "stage-model)")), node
        assert node.instance_type == config.gpu_node_type, node


def test_no_pod_of_the_variant_is_left_pending(cluster: Cluster, variant: str) -> None:
    app = variants.app(variant)
    _ray_pods(cluster, variant)
    namespaces = {o["metadata"]["name"] for o in variants.of_kind(app, "Namespace")}
    pending = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}: {p['status'].get('conditions')}"
        for ns in namespaces
        for p in pods(cluster, ns)
        if p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName")
    ]
    assert not pending, pending


def _placeholders(cluster: Cluster) -> list[dict[str, Any]]:
    return pods(cluster, WARMUP_NAMESPACE, f"app.kubernetes.io/name={WARM_SPARE_APP}")


@pytest.mark.parametrize("variant", ["warm-spares"], indirect=True)
def test_a_new_worker_preempts_a_warm_spares_placeholder(cluster: Cluster, variant: str) -> None:
    """Warm spares (``gpuWarmSpareNodes``): the placeholder holds the GPU node the workers
    leave free; a new Ray worker (decode scaling out: Ray's autoscaler raises the worker
    group's replicas) takes that node through the real scheduler's preemption, and the
    ReplicaSet's next placeholder waits, Pending, for the node the Cluster Autoscaler would
    add. Last of the module: it leaves the variant one worker up."""
    config = _config(variant)
    assert config.gpu_warm_spare_nodes, variant
    ns = config.namespace
    workers = _ray_pods(cluster, variant)["worker"]
    worker_nodes = {w["spec"]["nodeName"] for w in workers}

    def held() -> list[dict[str, Any]] | None:
        running = [
            p
            for p in _placeholders(cluster)
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")
        ]
        return running if len(running) == config.gpu_warm_spare_nodes else None

    (placeholder,) = wait_until(
        f"the placeholder to hold a GPU node (events: {events(cluster, WARMUP_NAMESPACE)[-6:]})",
        held,
        timeout_s=60,
    )
    spare = placeholder["spec"]["nodeName"]
    assert spare not in worker_nodes, (spare, worker_nodes)
    assert spare in {n["metadata"]["name"] for n in cluster.items("nodes", "-l", "role=gpu-worker")}
    # status marks it and bench leaves it out by this rule, read here from the real objects.
    assert spare_nodes({"items": pods(cluster, WARMUP_NAMESPACE)}) == {spare}

    raycluster = _raycluster(cluster, variant)
    replicas = raycluster["spec"]["workerGroupSpecs"][0]["replicas"]
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas + 1}]
    cluster.kubectl(
        "patch", "raycluster", raycluster["metadata"]["name"], "-n", ns, "--type=json",
        "-p", json.dumps(patch),
    )  # fmt: skip
    before = {w["metadata"]["name"] for w in workers}

    def scheduled() -> dict[str, Any] | None:
        new = [
            p
            for p in pods(cluster, ns, "ray.io/node-type=worker")
            if p["metadata"]["name"] not in before and p["spec"].get("nodeName")
        ]
        return new[0] if new else None

    new_worker = wait_until(
        f"the new worker to be scheduled (events: {events(cluster, ns)[-6:]})",
        scheduled,
        timeout_s=90,
    )
    assert new_worker["spec"]["nodeName"] == spare

    def replaced() -> list[dict[str, Any]] | None:
        found = _placeholders(cluster)
        if any(p["metadata"]["name"] == placeholder["metadata"]["name"] for p in found):
            return None
        pending = [p for p in found if not p["spec"].get("nodeName")]
        return pending if len(pending) == config.gpu_warm_spare_nodes else None

    wait_until("the preempted placeholder to be replaced by a Pending one", replaced, timeout_s=60)
    preempted = [
        e
        for e in cluster.items("events", "-n", WARMUP_NAMESPACE)
        if e["involvedObject"]["name"] == placeholder["metadata"]["name"]
        and e["reason"] == "Preempted"
    ]
    assert preempted, events(cluster, WARMUP_NAMESPACE)
    assert spare_nodes({"items": pods(cluster, WARMUP_NAMESPACE)}) == set()
