"""Every identity the app creates, asked of the real authorizer (SubjectAccessReview) with the
Roles and bindings the app deployed: allowed every request its code makes (recorded by driving
the code against the fake API server, as tests/test_rbac.py does), denied the neighbours of
those requests (other verbs, other names, other namespaces, Secrets), and tests/rbac.py's
evaluator giving the same answer as the real one for every request asked.

The bench Job's pod runs as its namespace's ``default`` account with no token mounted: it
calls the model, never the Kubernetes API, so the account may do nothing at all (asked here,
with the evaluator over every RBAC object the server holds). KubeRay's autoscaler sidecar,
the other identity of a pod, is asked in test_variants.py, where the variant that scales
decode is deployed anyway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks.bench import job as bench_job
from tests import rbac
from tests.fakes.kube_api import FakeKubeApi
from tests.test_rbac import IDENTITIES, Identity, access_entries, rendered_objects
from tests_cluster import authz, variants
from tests_cluster.conftest import Deployer, bind_admin_cli
from tests_cluster.kube import Cluster, tokens

pytest_plugins = ["tests.fakes.fixtures"]

ADMIN = "arn:aws:iam::123456789012:role/Admin"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@pytest.fixture(scope="module")
def deployed(deployer: Deployer) -> Cluster:
    deployer.ensure("default")
    cluster = deployer.cluster
    assert bind_admin_cli(cluster) == ADMIN
    return cluster


def _neighbours(a: rbac.Attributes) -> list[rbac.Attributes]:
    if not a.resource_request:
        return []
    found = [
        rbac.Attributes(v, a.api_group, a.resource, a.subresource, a.name, a.namespace)
        for v in VERBS
        if v != a.verb
    ]
    if a.name:
        found.append(
            rbac.Attributes(
                a.verb, a.api_group, a.resource, a.subresource, a.name + "x", a.namespace
            )
        )
    if a.namespace:
        found.append(
            rbac.Attributes(a.verb, a.api_group, a.resource, a.subresource, a.name, "default")
        )
    found.append(rbac.Attributes("get", "", "secrets", "", "other", a.namespace or "default"))
    return found


def test_token_identities_are_the_access_entries_groups() -> None:
    """tokens.csv's groups are exactly the synthesized access entries' groups, both ways."""
    app = variants.app("default")
    entries = {
        g for e in access_entries(app).values() for g in e["Properties"].get("KubernetesGroups", [])
    }
    rows = {g for t in tokens().values() for g in t.groups}
    assert rows == entries, (
        f"only in tokens.csv: {rows - entries}; only in the templates: {entries - rows}"
    )


@pytest.mark.parametrize("identity", IDENTITIES, ids=[i.name for i in IDENTITIES])
def test_real_authorizer_allows_what_the_code_does_and_denies_the_rest(
    identity: Identity, deployed: Cluster, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    app = variants.app("default")
    subject = (
        identity.subject(app)
        if identity.name not in ("operator-cli", "operator-cli-bench")
        else rbac.Subject(user=ADMIN)
    )
    extra = (
        [
            rbac.Grant(r, "", "AmazonEKSClusterAdminPolicy")
            for r in rbac.access_policy_rules("x/AmazonEKSClusterAdminPolicy")
        ]
        if subject.user == ADMIN
        else []
    )
    evaluator = rbac.Authorizer(rendered_objects(app), extra)
    identity.drive(kube_api, tmp_path)
    used = {rbac.attributes(r.method, r.path, r.query) for r in kube_api.requests}
    assert used, "the driver made no request"

    def real(a: rbac.Attributes) -> bool:
        return deployed.can(subject.user, subject.groups, authz.sar(a))

    denied = sorted(str(a) for a in used if not real(a))
    assert not denied, f"{identity.name}: the real authorizer denies {denied}"

    def key(a: rbac.Attributes) -> tuple[str, ...]:
        return (a.verb, a.api_group, a.resource, a.subresource, a.name, a.namespace)

    used_keys = {key(a) for a in used}
    probes = {n for a in used for n in _neighbours(a) if key(n) not in used_keys}
    disagree = []
    widened = []
    for a in sorted(probes, key=str):
        answer = real(a)
        if answer != evaluator.allows(subject, a):
            disagree.append(f"{a}: real {answer}")
        # Another name of the same resource is allowed exactly when a rule names no
        # resourceNames (the recreate reads whichever RayCluster KubeRay made): the evaluator
        # check above covers it; another verb, namespace or a Secret must be denied.
        other_name_only = any(key(a)[:4] == k[:4] and key(a)[5] == k[5] for k in used_keys)
        if answer and identity.exact and not other_name_only:
            widened.append(str(a))
    assert not disagree, f"tests/rbac.py disagrees with the real authorizer: {disagree}"
    assert not widened, f"{identity.name} may do more than its code does: {widened}"


LONGEST_RAY_SERVICE = "r" * 47  # rayServiceName's limit (ray_pd_eks/config/limits.py)


def _bench_job(config: Any) -> dict[str, Any]:
    """The Job ``bench`` creates, for the longest RayService name the settings allow."""
    sweep = bench_job.Sweep(
        base_url=f"http://{config.ray_service_name}-serve-svc.{config.namespace}:8000",
        model="qwen3.5-9b",
        tokenizer="Qwen/Qwen3.5-9B",
        tokenizer_revision=config.model_revision,
        concurrency=(1, 4),
        prompts=(8, 32),
        input_len=1024,
        output_len=128,
        seed=1,
        label="pd-LIBFABRIC",
    )
    return bench_job.render_job(
        sweep,
        name=bench_job.job_name(LONGEST_RAY_SERVICE, "20261201120000"),
        namespace=config.namespace,
        image="763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0",
        deadline_seconds=3600,
    )


def test_the_bench_job_is_valid_and_its_pod_holds_no_token(deployed: Cluster) -> None:
    """The real API server takes bench's Job (its name at the 63-byte limit of the Job
    controller's pod label, test_fake_vs_real.py has one byte more refused), and a pod made
    from its template, as the Job controller makes it, gets no service-account token: the
    ServiceAccount admission plugin adds no token volume."""
    config = variants.app("default").config
    manifest = _bench_job(config)
    assert len(manifest["metadata"]["name"]) == bench_job.MAX_NAME == 63
    deployed.kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=json.dumps(manifest)
    )
    template = manifest["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "bench-pod",
            "namespace": config.namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }
    made = json.loads(
        deployed.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "--as=system:serviceaccount:kube-system:job-controller",
            "--as-group=system:serviceaccounts",
            "-f",
            "-",
            stdin=json.dumps(pod),
        ).stdout
    )
    assert made["spec"]["serviceAccountName"] == "default"
    volumes = [v["name"] for v in made["spec"].get("volumes") or []]
    assert not [v for v in volumes if v.startswith("kube-api-access")], volumes
    mounts = [
        m["mountPath"] for c in made["spec"]["containers"] for m in c.get("volumeMounts") or []
    ]
    assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts, mounts


def test_the_bench_jobs_account_may_do_nothing(deployed: Cluster) -> None:
    """Its account (``default``: the template names none) is denied every request a reader of
    the cluster would make and every escalation, by the real authorizer and by tests/rbac.py
    over the same objects; only what Kubernetes grants every authenticated identity (asking
    what it may do) is allowed, to both."""
    config = variants.app("default").config
    ns, rs = config.namespace, config.ray_service_name
    account = _bench_job(config)["spec"]["template"]["spec"].get("serviceAccountName", "default")
    subject = authz.service_account(ns, account)
    reads = [
        authz.attrs(verb, resource, namespace=where, group=group)
        for verb in ("get", "list", "watch")
        for resource, group in (
            ("pods", ""),
            ("secrets", ""),
            ("events", ""),
            ("services", ""),
            ("configmaps", ""),
            ("rayservices", "ray.io"),
            ("rayclusters", "ray.io"),
            ("jobs", "batch"),
        )
        for where in (ns, "default")
    ]
    named = [
        authz.attrs("get", "secrets", f"{rs}-ray-token", ns),
        authz.attrs("get", "services", f"{rs}-serve-svc:8000", ns, sub="proxy"),
        authz.attrs("create", "services", f"{rs}-serve-svc:8000", ns, sub="proxy"),
        authz.attrs("get", "services", f"{rs}-head-svc:8265", ns, sub="proxy"),
        authz.attrs("get", "pods", "p", ns, sub="log"),
        authz.attrs("create", "pods", "p", ns, sub="exec"),
        authz.attrs("patch", "rayclusters", "c", ns, group="ray.io"),
        authz.attrs("delete", "jobs", "j", ns, group="batch"),
        authz.attrs("list", "nodes"),
    ]
    probes = [*reads, *named, *authz.escalations(ns, account)]
    everyone = authz.attrs("create", "selfsubjectaccessreviews", group="authorization.k8s.io")
    authorizer = authz.live_authorizer(deployed)
    real, differ = authz.disagreements(deployed, authorizer, subject, [*probes, everyone])
    assert not differ, differ
    assert real[everyone], "the control question: every authenticated identity may ask"
    allowed = [str(a) for a in probes if real[a]]
    assert not allowed, f"the bench Job's account {account} may {allowed}"
