"""RBAC proven sufficient and minimal: every request each identity makes is allowed by the
Roles/ClusterRoles the app renders, and every permission they grant is used.

Each identity is a row of ``IDENTITIES``: how to find its Kubernetes subject in the synthesized
templates (an access entry's groups, a service account), and how to make it talk to the fake API
server (``tests/fakes/kube_api.py`` records every request). The recorded requests are turned into
RBAC attributes and evaluated with ``tests/rbac.py`` against every Role, ClusterRole and binding
the templates deploy. Adding an identity (a token Secret's reader, a bench Job's service
account) is one more row: its subject and a driver that runs its code.

``exact`` rows also fail when a rule grants a verb, resource or name no request used: a widened
Role is caught like a narrowed one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests import rbac
from tests.cli_fixtures import cli_harness
from tests.fakes.kube_api import (
    RAY_CLUSTER,
    STAGES,
    FakeKubeApi,
    make_pod,
    make_raycluster,
    make_secret,
)
from tests.readiness import kube, kv_probe, nixl_logs, properties, ray_dashboard, steps
from tests.synth import Synthesized, resolve

pytest_plugins = ["tests.fakes.fixtures"]

MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"


def rendered_objects(app: Synthesized) -> list[dict[str, Any]]:
    """Every Kubernetes object the app's stacks deploy through KubernetesManifest."""
    objects: list[dict[str, Any]] = []
    for stack in app.templates:
        for resource in app.resources(stack, MANIFEST_TYPE).values():
            objects += json.loads(resolve(resource["Properties"]["Manifest"]))
    return objects


def access_entries(app: Synthesized) -> dict[str, dict[str, Any]]:
    """EKS access entries by logical id, across the stacks."""
    found: dict[str, dict[str, Any]] = {}
    for stack in app.templates:
        found |= app.resources(stack, "AWS::EKS::AccessEntry")
    return found


def entry_groups(app: Synthesized, logical_id_prefix: str) -> rbac.Subject:
    """The Kubernetes groups of the one access entry whose logical id starts with the prefix."""
    (entry,) = [v for k, v in access_entries(app).items() if k.startswith(logical_id_prefix)]
    return rbac.Subject(user="", groups=tuple(entry["Properties"]["KubernetesGroups"]))


def _text(value: Any) -> str:
    """An ARN as text, with the partition (or any other intrinsic) as a placeholder."""
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(p if isinstance(p, str) else "<token>" for p in parts)
    return str(value)


def admin_grants(app: Synthesized) -> list[rbac.Grant]:
    """The rules of the access policies associated with the admin principals' entries."""
    grants = []
    for logical_id, entry in access_entries(app).items():
        for association in entry["Properties"].get("AccessPolicies") or []:
            scope = association["AccessScope"]
            assert scope["Type"] == "cluster", (logical_id, scope)
            for rule in rbac.access_policy_rules(_text(association["PolicyArn"])):
                grants.append(rbac.Grant(rule, "", f"access policy of {logical_id}"))
    return grants


# --- drivers: run an identity's code against the fake API server ---------------------------


def drive_readiness(server: FakeKubeApi, tmp_path: Path) -> None:
    """Every poll of a deploy, stage by stage, and the NIXL reader's fallback to the dashboard's
    node list (no Serve details): every kind of request the Lambda makes."""
    props = properties.Props.from_properties(server.props())
    client = kube.KubeClient(server.url, server.ca_data, lambda: "k8s-aws-v1.t", sleep=lambda _: 0)
    for stage in STAGES:
        server.set_stage(stage)
        steps.check(props, client, now=time.time(), started=time.time())
    dashboard = ray_dashboard.RayDashboard(
        client, props.namespace, props.rayservice, token_secret=props.ray_auth_secret
    )
    report = nixl_logs.read_nixl_backends(dashboard, None, props.app_name)
    assert report.value() == "LIBFABRIC,LIBFABRIC"  # the fallback really read the logs
    server.rayservice = None
    with pytest.raises(properties.ReadinessError, match="not found"):
        steps.check(props, client, now=time.time())


def drive_token_writer(server: FakeKubeApi, tmp_path: Path) -> None:
    """The Ray token writer on an empty Secret (read, then patch) and on a filled one (read)."""
    writer = lambda_code.ray_token()
    client = kube.KubeClient(server.url, server.ca_data, lambda: "k8s-aws-v1.t", sleep=lambda _: 0)
    name = next(iter(server.secrets))
    server.secrets[name] = make_secret(name)
    assert writer.ensure_token(client, server.namespace, name) == "written"
    assert writer.ensure_token(client, server.namespace, name) == "kept"


def drive_cli(server: FakeKubeApi, tmp_path: Path) -> None:
    """The operator commands that talk to Kubernetes: status and efa-check."""
    server.set_stage("serving")
    for i, command in enumerate(("status", "efa-check")):
        folder = tmp_path / str(i)
        folder.mkdir()
        harness = cli_harness(server, folder)
        if command == "status":  # status ends with the alarms in ALARM (not Kubernetes)
            harness.session.stub("cloudwatch").add_response(
                "describe_alarms", {"MetricAlarms": [], "CompositeAlarms": []}
            )
        result = harness.run(command)
        # 0 or 1 is a verdict on the cluster; 3 would be an access error.
        assert result.code in (0, 1), (command, result.out, result.err)


def drive_drill(server: FakeKubeApi, tmp_path: Path) -> None:
    """``drill decode-restart``: delete the decode pod, wait, probe (a replacement appears)."""
    server.set_stage("serving")
    harness = cli_harness(server, tmp_path)
    replacement = f"{RAY_CLUSTER}-gpu-workers-worker-n3wp0"

    def replaced() -> None:
        server.pods.append(make_pod(replacement, node="gpu-b", ip="10.0.1.21"))
        server.nixl_metrics[replacement] = {"xfer": 0.0, "bytes": 0.0, "failed": 0.0}
        server.kv_decode_pod = replacement

    harness.clock.on_sleep = [replaced]
    waits = getattr(kv_probe, "counter_sleep")  # noqa: B009  (a module loaded by path)
    setattr(kv_probe, "counter_sleep", lambda _: None)  # noqa: B010
    try:
        result = harness.run("drill", "decode-restart", "--yes")
    finally:
        setattr(kv_probe, "counter_sleep", waits)  # noqa: B010
    assert result.code == 0, (result.out, result.err)


def drive_bench(server: FakeKubeApi, tmp_path: Path) -> None:
    """``bench``: create the Job, follow its pod and log, delete it (the Job controller's part
    played here as the fake's helpers do)."""
    from tests.fakes.kube_api import finish_job, make_job_pod

    server.set_stage("serving")
    harness = cli_harness(server, tmp_path)
    harness.session.stub("pricing").add_client_error("get_products", "AccessDeniedException")

    def ends() -> None:
        job = next(iter(server.jobs.values()))
        pod = make_job_pod(job, state="terminated")
        server.pods.append(pod)
        server.pod_logs[pod["metadata"]["name"]] = "[bench] level concurrency=1: started\n"
        finish_job(job, succeeded=True)

    harness.clock.on_sleep = [ends]
    assert server.rayservice is not None
    server.rayservice["spec"]["rayClusterConfig"] = {
        "headGroupSpec": {"template": {"spec": {"containers": [{"image": "img:1"}]}}}
    }
    result = harness.run("bench", "--concurrency", "1", "--out", str(tmp_path / "out"))
    # 1: the Job ended without results (this driver's log has none); 3 would be access.
    assert result.code == 1 and "no results" in result.err, (result.out, result.err)


def drive_recreate(server: FakeKubeApi, tmp_path: Path) -> None:
    """A Ray cluster change from start to end: read the RayService and the running RayCluster,
    delete the RayService, wait for its pods; then a Serve-only change (nothing deleted)."""
    recreate = lambda_code.recreate()
    server.set_stage("serving")
    server.rayclusters = {RAY_CLUSTER: make_raycluster(spec_hash="old")}
    client = kube.KubeClient(server.url, server.ca_data, lambda: "k8s-aws-v1.t", sleep=lambda _: 0)
    props = recreate.Props.from_properties(
        {
            "ClusterName": server.cluster_name,
            "ClusterEndpoint": server.url,
            "ClusterCertificateAuthorityData": server.ca_data,
            "Namespace": server.namespace,
            "RayServiceName": server.rayservice_name,
            "ClusterSpecHash": "new",
        }
    )
    assert recreate.poll(props, client)[0] is None  # deleted, waiting
    server.rayservice = None
    assert recreate.poll(props, client)[0] is None  # its pods are still there
    server.pods = []
    assert recreate.poll(props, client)[0] == "absent"
    server.set_stage("serving")
    server.rayclusters = {RAY_CLUSTER: make_raycluster(spec_hash="new")}
    assert recreate.poll(props, client)[0] == "unchanged"


@dataclass(frozen=True)
class Identity:
    name: str
    subject: Callable[[Synthesized], rbac.Subject]
    drive: Callable[[FakeKubeApi, Path], None]
    exact: bool  # every granted (verb, resource, name) must be used by some request
    extra: Callable[[Synthesized], list[rbac.Grant]] = lambda app: []
    # Verbs this identity may use; anything else is a finding even if RBAC allows it.
    verbs: frozenset[str] = frozenset({"get", "list", "watch", "create"})


def _operator(name: str, drive: Callable[[FakeKubeApi, Path], None], verbs: set[str]) -> Identity:
    """A CLI command run by a person in adminPrincipalArns: its grants are the cluster admin's,
    so the row checks only what the command asks for (``exact`` False)."""
    return Identity(
        name,
        subject=lambda app: rbac.Subject(user="arn:aws:iam::123456789012:role/Admin"),
        drive=drive,
        exact=False,
        extra=admin_grants,
        verbs=frozenset(verbs),
    )


IDENTITIES = [
    Identity(
        "readiness-lambda",
        subject=lambda app: entry_groups(app, "ProvidersReadinessAccessEntry"),
        drive=drive_readiness,
        exact=True,
    ),
    Identity(
        "ray-token-writer",
        subject=lambda app: entry_groups(app, "WorkloadRayAuthToken"),
        drive=drive_token_writer,
        exact=True,
        verbs=frozenset({"get", "patch"}),
    ),
    # Deletes exactly the one RayService, nothing else; reads what tells a cluster change.
    Identity(
        "recreate-lambda",
        subject=lambda app: entry_groups(app, "ProvidersRecreateAccessEntry"),
        drive=drive_recreate,
        exact=True,
        verbs=frozenset({"get", "list", "delete"}),
    ),
    # The CLI runs as a person in adminPrincipalArns (AmazonEKSClusterAdminPolicy): RBAC cannot
    # narrow that, so this row proves it suffices and that the CLI itself only reads, but for
    # efa-check's KV integrity probe (a POST through Serve's proxy, RBAC "create").
    _operator("operator-cli", drive_cli, {"get", "list", "create"}),
    # `drill` deletes one engine's pod (tests/test_cli_drill.py proves DRILL_RULES exact).
    _operator("operator-cli-drill", drive_drill, {"get", "list", "create", "delete"}),
    # `bench` is the one command that writes: it creates and deletes its Job.
    _operator("operator-cli-bench", drive_bench, {"get", "list", "create", "delete"}),
]


@pytest.fixture(scope="module")
def app(variant_app: Synthesized) -> Synthesized:
    # variant_app has an admin principal (the CLI's identity) besides everything default_app has.
    return variant_app


@pytest.mark.parametrize("identity", IDENTITIES, ids=[i.name for i in IDENTITIES])
def test_every_request_is_allowed_and_every_grant_is_used(
    identity: Identity, app: Synthesized, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    authorizer = rbac.Authorizer(rendered_objects(app), identity.extra(app))
    subject = identity.subject(app)
    identity.drive(kube_api, tmp_path)
    requests = [rbac.attributes(r.method, r.path, r.query) for r in kube_api.requests]
    assert requests, "the driver made no request"

    denied = sorted({str(a) for a in requests if not authorizer.allows(subject, a)})
    assert not denied, f"{identity.name} would get 403 Forbidden for: {denied}"
    unexpected = sorted({str(a) for a in requests if a.verb not in identity.verbs})
    assert not unexpected, f"{identity.name} should not: {unexpected}"

    if not identity.exact:
        return
    unused = []
    for grant in authorizer.grants_for(subject):
        for verb, group, resource, name in grant.rule.grants():
            assert "*" not in (verb, group, resource, name), f"wildcard in {grant.source}"
            used = any(
                a.verb == verb
                and a.api_group == group
                and a.resource + (f"/{a.subresource}" if a.subresource else "") == resource
                and (not name or a.name == name)
                and (not grant.namespace or a.namespace == grant.namespace)
                for a in requests
            )
            if not used:
                unused.append(f"{verb} {resource} {name!r} ({grant.source})")
    assert not unused, f"{identity.name} is granted more than it uses: {unused}"


def test_the_proxy_posts_of_the_readiness_check_are_creates_on_the_serve_service(
    app: Synthesized, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """The one write the readiness identity may make, with the name RBAC checks."""
    drive_readiness(kube_api, tmp_path)
    posts = {
        str(rbac.attributes(r.method, r.path, r.query)) for r in kube_api.requests_to("", "POST")
    }
    assert posts == {"create services/proxy 'ray-llm-serve-svc:8000' in namespace inference"}


def test_the_only_writes_of_bench_are_its_job(
    app: Synthesized, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    drive_bench(kube_api, tmp_path)
    writes = {
        (a.verb, a.api_group, a.resource, a.namespace)
        for r in kube_api.requests
        if (a := rbac.attributes(r.method, r.path, r.query)).verb in ("create", "delete")
    }
    assert writes == {
        ("create", "batch", "jobs", "inference"),
        ("delete", "batch", "jobs", "inference"),
    }


# --- the evaluator's own semantics ---------------------------------------------------------


ROLE = {
    "kind": "Role",
    "metadata": {"name": "r", "namespace": "inference"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {
            "apiGroups": [""],
            "resources": ["services/proxy"],
            "resourceNames": ["ray-llm-head-svc:8265"],
            "verbs": ["get"],
        },
        {"apiGroups": ["ray.io"], "resources": ["rayservices"], "verbs": ["get"]},
    ],
}
CLUSTER_ROLE = {
    "kind": "ClusterRole",
    "metadata": {"name": "c"},
    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
}
GROUP = [{"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}]
BINDINGS = [
    {
        "kind": "RoleBinding",
        "metadata": {"name": "r", "namespace": "inference"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": GROUP,
    },
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "c"},
        "roleRef": {"kind": "ClusterRole", "name": "c"},
        "subjects": GROUP,
    },
]
NS = "/api/v1/namespaces/inference"


@pytest.mark.parametrize(
    ("method", "path", "query", "allowed"),
    [
        ("GET", f"{NS}/pods", {}, True),  # list
        ("GET", f"{NS}/pods/p1", {}, True),  # get
        ("GET", f"{NS}/pods", {"watch": "true"}, False),  # watch is its own verb
        ("GET", f"{NS}/pods/p1/log", {}, False),  # pods/log is not pods
        ("DELETE", f"{NS}/pods/p1", {}, False),
        ("GET", "/api/v1/namespaces/other/pods", {}, False),  # a Role stays in its namespace
        ("GET", f"{NS}/services/ray-llm-head-svc:8265/proxy/api/v0/nodes", {}, True),
        ("GET", f"{NS}/services/ray-llm-head-svc/proxy/api/v0/nodes", {}, False),  # name as written
        ("GET", f"{NS}/services/ray-llm-head-svc:8000/proxy/", {}, False),
        ("POST", f"{NS}/services/ray-llm-head-svc:8265/proxy/x", {}, False),  # create
        ("GET", f"{NS}/services/ray-llm-head-svc:8265", {}, False),  # services is not the proxy
        ("GET", "/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm", {}, True),
        ("GET", "/apis/other.io/v1/namespaces/inference/rayservices/ray-llm", {}, False),
        ("GET", "/api/v1/nodes", {"labelSelector": "role=gpu-worker"}, True),
        ("GET", "/api/v1/nodes/n1", {}, False),  # get is not list
        ("GET", "/version", {}, False),  # non-resource URL
    ],
)
def test_evaluator_follows_kubernetes_rule_semantics(
    method: str, path: str, query: dict[str, str], allowed: bool
) -> None:
    authorizer = rbac.Authorizer([ROLE, CLUSTER_ROLE, *BINDINGS])
    attrs = rbac.attributes(method, path, query)
    assert authorizer.allows(rbac.Subject(groups=("g",)), attrs) is allowed, attrs
    assert not authorizer.allows(rbac.Subject(groups=("someone-else",)), attrs)


def test_a_rolebinding_never_grants_cluster_scoped_resources() -> None:
    as_role_binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "c", "namespace": "inference"},
        "roleRef": {"kind": "ClusterRole", "name": "c"},
        "subjects": GROUP,
    }
    authorizer = rbac.Authorizer([CLUSTER_ROLE, as_role_binding])
    assert not authorizer.allows(
        rbac.Subject(groups=("g",)), rbac.attributes("GET", "/api/v1/nodes")
    )


def test_service_accounts_match_by_namespace_and_name() -> None:
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "r", "namespace": "inference"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "bench"}],  # namespace: the binding's
    }
    authorizer = rbac.Authorizer([ROLE, binding])
    pods = rbac.attributes("GET", f"{NS}/pods")
    assert authorizer.allows(rbac.Subject.service_account("inference", "bench"), pods)
    assert not authorizer.allows(rbac.Subject.service_account("default", "bench"), pods)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        (
            "GET",
            "/api/v1/namespaces/inference",
            "get namespaces 'inference' in namespace inference",
        ),
        ("POST", f"{NS}/pods", "create pods in namespace inference"),
        ("DELETE", f"{NS}/pods", "deletecollection pods in namespace inference"),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/x/daemonsets/d",
            "patch daemonsets.apps 'd' in namespace x",
        ),
        ("GET", f"{NS}/pods/p/log", "get pods/log 'p' in namespace inference"),
    ],
)
def test_request_attributes(method: str, path: str, expected: str) -> None:
    assert str(rbac.attributes(method, path)) == expected
