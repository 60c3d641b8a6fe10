"""The fake API server (tests/fakes/kube_api.py) against the real one, where both answer: the
same request gets the same status code and the same body. For errors (401, 403, 404, 409,
422, 503) that is the whole ``Status`` object, whose ``message`` the app's KubeClient quotes
and whose ``kind`` tells the API server's refusals from the proxied service's. For objects
and events it is the shape the app's readers see: the RayService status as the readiness
check reads it, the RayCluster as the recreate reads it, and an Event of each recorder the
app's readers meet (KubeRay's, the scheduler's, the Job controller's), field by field.
A difference found here is fixed in the fake; docs/testing.md lists them."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.fakes.kube_api import (
    WARMUP_NAMESPACE,
    FakeKubeApi,
    make_event,
    make_object_event,
    make_raycluster,
    make_rayservice,
)
from tests_cluster.conftest import Deployer, bind_admin_cli
from tests_cluster.kube import Cluster, https_call, tokens, wait_until

pytest_plugins = ["tests.fakes.fixtures"]

checks = lambda_code.checks()
NS = "inference"
SCRATCH = "tier-fake-vs-real"  # where this module makes a pod fail to schedule, a Job fail
FAKE_TOKEN = "k8s-aws-v1.fake"  # any EKS-shaped token authenticates to the fake
JOB_NAME_LIMIT = 63  # the Job controller puts the name in a label of each pod it makes

Answer = tuple[int, Any]


@pytest.fixture(scope="module")
def deployed(deployer: Deployer) -> Iterator[Cluster]:
    deployer.ensure("default")
    cluster = deployer.cluster
    bind_admin_cli(cluster)
    cluster.kubectl("create", "namespace", SCRATCH, check=False)
    yield cluster
    cluster.kubectl("delete", "namespace", SCRATCH, "--ignore-not-found", "--wait=false")


def real(cluster: Cluster, identity: str, method: str, path: str, body: Any = None) -> Answer:
    """As one identity of tokens.csv (``""``: a token the server does not know)."""
    token = tokens()[identity].token if identity else "not-a-token-of-this-cluster"
    content = "application/merge-patch+json" if method == "PATCH" else "application/json"
    return https_call(cluster.url, cluster.ca_pem, token, method, path, body, content)


def fake(server: FakeKubeApi, method: str, path: str, body: Any = None, token: str = "") -> Answer:
    content = "application/merge-patch+json" if method == "PATCH" else "application/json"
    ca = base64.b64decode(server.ca_data)
    return https_call(server.url, ca, token or FAKE_TOKEN, method, path, body, content)


def job(name: str, namespace: str = NS, *, suspend: bool = True) -> dict[str, Any]:
    """A Job shaped like bench's (suspended: the Job controller then makes no pod)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "bench", "image": "busybox"}],
                }
            },
        },
    }


JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
TOKEN_SECRET = f"/api/v1/namespaces/{NS}/secrets/ray-llm-ray-token"


def _readiness_user(server: FakeKubeApi) -> None:
    server.user = tokens()["readiness"].user


def _unauthorized(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
    return real(cluster, "", "GET", "/api/v1/nodes"), fake(
        server, "GET", "/api/v1/nodes", token="not-an-eks-token"
    )


def _forbidden(identity: str, method: str, path: str) -> Callable[..., tuple[Answer, Answer]]:
    """A request RBAC denies the identity; the fake, told who asks, refuses it (inject_fault)."""

    def run(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
        server.user = tokens()[identity].user
        server.inject_fault(403, path_contains=path)
        body: dict[str, Any] | None = {} if method in ("POST", "PATCH") else None
        return real(cluster, identity, method, path, body), fake(server, method, path, body)

    return run


def _not_found(real_path: str, fake_path: str) -> Callable[..., tuple[Answer, Answer]]:
    def run(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
        server.set_stage("deploying")
        server.rayservice = None
        return real(cluster, "admin-cli", "GET", real_path), fake(server, "GET", fake_path)

    return run


def _already_exists(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
    name = "tier-bench-twice"
    first_real = real(cluster, "admin-cli", "POST", JOBS, job(name))
    first_fake = fake(server, "POST", JOBS, job(name))
    try:
        assert (first_real[0], first_fake[0]) == (201, 201), (first_real, first_fake)
        return real(cluster, "admin-cli", "POST", JOBS, job(name)), fake(
            server, "POST", JOBS, job(name)
        )
    finally:
        real(cluster, "admin-cli", "DELETE", f"{JOBS}/{name}?propagationPolicy=Background")


def _stale_patch(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
    """The token writer's merge patch carrying a resourceVersion the Secret has left behind."""
    patch = {"metadata": {"resourceVersion": "1"}, "data": {"auth_token": "c3RhbGU="}}
    return real(cluster, "token-writer", "PATCH", TOKEN_SECRET, patch), fake(
        server, "PATCH", TOKEN_SECRET, patch
    )


def _invalid_job(name: str) -> Callable[..., tuple[Answer, Answer]]:
    def run(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
        return real(cluster, "admin-cli", "POST", JOBS, job(name)), fake(
            server, "POST", JOBS, job(name)
        )

    return run


def _deleted_at_once(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
    """bench's delete (propagationPolicy=Background) of a Job the longest name it may have."""
    name = "tier-bench-" + "x" * (JOB_NAME_LIMIT - len("tier-bench-"))
    created = (
        real(cluster, "admin-cli", "POST", JOBS, job(name)),
        fake(server, "POST", JOBS, job(name)),
    )
    assert [c[0] for c in created] == [201, 201], created
    path = f"{JOBS}/{name}?propagationPolicy=Background"
    answers = real(cluster, "admin-cli", "DELETE", path), fake(server, "DELETE", path)
    for status, body in answers:  # the uid is the object's own
        if status == 200 and isinstance(body.get("details"), dict):
            body["details"]["uid"] = "<uid>" if body["details"].get("uid") else ""
    return answers


def _raycluster(cluster: Cluster) -> dict[str, Any]:
    """The one RayCluster the operator made for the RayService, once it reports a state."""

    def found() -> dict[str, Any] | None:
        items = cluster.items("rayclusters.ray.io", "-n", NS)
        return items[0] if len(items) == 1 and items[0].get("status", {}).get("state") else None

    return dict(wait_until("the operator's RayCluster", found, timeout_s=60))


def _no_endpoints(cluster: Cluster, server: FakeKubeApi) -> tuple[Answer, Answer]:
    """A proxy call to a Service with no ready endpoint: the real one's is the RayCluster's
    head Service (loopback pod IPs never become endpoints), the fake's the Serve Service before
    it has one; the message names the Service, so the real name is put in the fake's place."""
    raycluster = _raycluster(cluster)
    service = f"{raycluster['metadata']['name']}-head-svc"
    proxy = "/api/v1/namespaces/inference/services/{}:{}/proxy/api/serve/applications/"
    status, body = real(cluster, "admin-cli", "GET", proxy.format(service, 8265))
    server.set_stage("deploying")
    fake_status, fake_body = fake(server, "GET", proxy.format("ray-llm-serve-svc", 8000))
    text = json.dumps(fake_body).replace("ray-llm-serve-svc", service)
    return (status, body), (fake_status, json.loads(text))


# (what, run) -> both answers; each must be an error the app's code meets.
ERRORS: dict[str, Callable[[Cluster, FakeKubeApi], tuple[Answer, Answer]]] = {
    "401 for a token the server does not know": _unauthorized,
    "403 for a named object in the namespace": _forbidden(
        "readiness", "GET", f"/api/v1/namespaces/{NS}/secrets/other"
    ),
    "403 for a collection in another namespace": _forbidden(
        "readiness", "GET", "/api/v1/namespaces/default/pods"
    ),
    "403 for a cluster-scoped object": _forbidden("readiness", "GET", "/api/v1/nodes/n1"),
    "403 for a subresource": _forbidden("readiness", "GET", f"/api/v1/namespaces/{NS}/pods/p1/log"),
    "403 for a custom resource": _forbidden(
        "token-writer", "GET", f"/apis/ray.io/v1/namespaces/{NS}/rayservices/ray-llm"
    ),
    "403 for the Serve proxy, named as written": _forbidden(
        "token-writer",
        "POST",
        f"/api/v1/namespaces/{NS}/services/ray-llm-serve-svc:8000/proxy/v1/chat/completions",
    ),
    "404 for a RayService that does not exist": _not_found(
        "/apis/ray.io/v1/namespaces/default/rayservices/ray-llm",
        f"/apis/ray.io/v1/namespaces/{NS}/rayservices/ray-llm",
    ),
    "404 for the Serve proxy before KubeRay made the Service": _not_found(
        f"/api/v1/namespaces/{NS}/services/ray-llm-serve-svc:8000/proxy/v1/models",
        f"/api/v1/namespaces/{NS}/services/ray-llm-serve-svc:8000/proxy/v1/models",
    ),
    "404 for the dashboard proxy before KubeRay made the Service": _not_found(
        f"/api/v1/namespaces/{NS}/services/ray-llm-head-svc:8265/proxy/api/serve/applications/",
        f"/api/v1/namespaces/{NS}/services/ray-llm-head-svc:8265/proxy/api/serve/applications/",
    ),
    "404 for a Job that does not exist": _not_found(f"{JOBS}/nope", f"{JOBS}/nope"),
    "404 for a Secret that does not exist": _not_found(
        f"/api/v1/namespaces/{NS}/secrets/nope", f"/api/v1/namespaces/{NS}/secrets/nope"
    ),
    "404 for the metrics proxy of a pod that does not exist": _not_found(
        f"/api/v1/namespaces/{NS}/pods/nope:8080/proxy/metrics",
        f"/api/v1/namespaces/{NS}/pods/nope:8080/proxy/metrics",
    ),
    "409 AlreadyExists for a second Job of one name": _already_exists,
    "409 Conflict for a patch on a stale resourceVersion": _stale_patch,
    "422 for a Job name one byte over the label limit": _invalid_job(
        "tier-bench-" + "x" * (JOB_NAME_LIMIT + 1 - len("tier-bench-"))
    ),
    "422 for a Job name that is no DNS subdomain": _invalid_job("Tier_Bench"),
    "200 Status for a Job deleted at once (at the name limit)": _deleted_at_once,
    "503 for a Service without endpoints": _no_endpoints,
}


@pytest.mark.parametrize("run", ERRORS.values(), ids=list(ERRORS))
def test_the_fake_answers_as_the_real_api_server(
    deployed: Cluster, kube_api: FakeKubeApi, run: Callable[..., tuple[Answer, Answer]]
) -> None:
    real_answer, fake_answer = run(deployed, kube_api)
    assert real_answer[0] != 0 and isinstance(real_answer[1], dict), real_answer
    assert fake_answer == real_answer, f"fake {fake_answer}\n!= real {real_answer}"


def test_the_app_reads_the_same_error_from_both(deployed: Cluster, kube_api: FakeKubeApi) -> None:
    """The readiness client's view of one refusal (status, the quoted message, and that it is
    the API server's own refusal, not the proxied service's): equal on both."""
    kube = lambda_code.kube()
    path = f"/api/v1/namespaces/{NS}/secrets/other"
    identity = tokens()["readiness"]
    real_client = kube.KubeClient(
        deployed.url, base64.b64encode(deployed.ca_pem).decode(), lambda: identity.token, retries=0
    )
    fake_client = kube.KubeClient(kube_api.url, kube_api.ca_data, lambda: FAKE_TOKEN, retries=0)
    kube_api.user = identity.user
    kube_api.inject_fault(403, path_contains=path)
    seen = []
    for client in (real_client, fake_client):
        with pytest.raises(kube.KubeAuthError) as refused:
            client.get_json(path)
        seen.append((type(refused.value).__name__, refused.value.status, refused.value.reason))
    assert seen[0] == seen[1]


# --- objects and events, as the app's readers see them --------------------------------------


def test_an_initializing_rayservice_reads_the_same(deployed: Cluster) -> None:
    """The real operator's RayService before Serve runs (the tier never gets Serve running) and
    the fake's of the same moment (``make_rayservice(ready=False, app_status=None)``, the
    ``nodes-not-ready`` stage): the same conditions (type, status, reason, message) and the
    same verdict of ``checks.rayservice_state``, cluster names aside."""
    real_rs = deployed.get("rayservices.ray.io", "ray-llm", "-n", NS)
    fake_rs = make_rayservice(ready=False, app_status=None)

    def conditions(rs: dict[str, Any]) -> list[tuple[str, ...]]:
        return [
            (c["type"], c["status"], c["reason"], c["message"], str(c["observedGeneration"]))
            for c in rs["status"]["conditions"]
        ]

    def state(rs: dict[str, Any]) -> dict[str, Any]:
        found = checks.rayservice_state(rs, "qwen")
        view = {k: v for k, v in vars(found).items() if k not in ("ready_since",)}
        view["pending_cluster"] = bool(view["pending_cluster"])
        view["active_cluster"] = bool(view["active_cluster"])
        return view

    assert conditions(fake_rs) == conditions(real_rs)
    assert state(fake_rs) == state(real_rs)
    assert checks.rayservice_state(real_rs, "qwen").ready_since is not None


def test_the_raycluster_reads_the_same(deployed: Cluster) -> None:
    """What the recreate reads of the RayCluster KubeRay made for the RayService: its owner,
    the labels naming the RayService, the spec hash on the head template, its state."""
    real_rc = _raycluster(deployed)
    spec_hash = real_rc["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"][
        "ray-pd-eks/cluster-spec-hash"
    ]
    fake_rc = make_raycluster(real_rc["metadata"]["name"], spec_hash=spec_hash)

    def view(rc: dict[str, Any]) -> dict[str, Any]:
        labels = rc["metadata"]["labels"]
        owners = [
            {
                k: o.get(k)
                for k in ("apiVersion", "kind", "name", "controller", "blockOwnerDeletion")
            }
            for o in rc["metadata"]["ownerReferences"]
        ]
        head = rc["spec"]["headGroupSpec"]["template"]
        return {
            "name": rc["metadata"]["name"],
            "origin": {k: v for k, v in labels.items() if k.startswith("ray.io/originated-from")},
            "owners": owners,
            "hash": head["metadata"]["annotations"]["ray-pd-eks/cluster-spec-hash"],
            "state": rc["status"]["state"],
        }

    assert view(fake_rc) == view(real_rc)


EVENT_FIELDS = (
    "apiVersion",
    "kind",
    "involvedObject.apiVersion",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "reason",
    "message",
    "type",
    "count",
    "series",
    "series.count",
    "series.lastObservedTime",
    "eventTime",
    "firstTimestamp",
    "lastTimestamp",
    "metadata.creationTimestamp",
    "metadata.namespace",
    "reportingComponent",
    "source.component",
)


# Fields whose value (not only type) must agree: the kinds and who recorded the event.
VALUE_FIELDS = (
    "apiVersion",
    "kind",
    "type",
    "involvedObject.apiVersion",
    "involvedObject.kind",
    "reportingComponent",
    "source.component",
)


def event_shape(event: dict[str, Any]) -> dict[str, str]:
    """Each field an event reader (checks.pod_problems, ray_object_warnings, event_time,
    bench's failed_create, drill's last_warning) may read: absent, null, or its JSON type;
    the recorder's name and the kinds themselves as values."""
    shape = {}
    for field in EVENT_FIELDS:
        value: Any = event
        present = True
        for part in field.split("."):
            if not isinstance(value, dict) or part not in value:
                present = False
                break
            value = value[part]
        if not present:
            shape[field] = "absent"
        elif value is None:
            shape[field] = "null"
        elif field in VALUE_FIELDS:
            shape[field] = str(value)
        else:
            shape[field] = type(value).__name__
    # What the readers make of it: a last and a first sighting, in order, and a count.
    last, first = checks.event_time(event), checks.event_first_time(event)
    ordered = first is not None and last is not None and first <= last
    shape["readers"] = f"ordered={ordered} count={checks.event_count(event)}"
    return shape


def _event(cluster: Cluster, namespace: str, selector: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        items = cluster.items("events", "-n", namespace, "--field-selector", selector)
        return items[-1] if items else None

    return dict(wait_until(f"an event with {selector} in {namespace}", found, timeout_s=45))


def _unschedulable_pod(cluster: Cluster) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-node-fits", "namespace": SCRATCH},
        "spec": {
            "nodeSelector": {"ray-pd-eks.test/no-such-node": "x"},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    cluster.apply([pod], manager="tier")
    return _event(cluster, SCRATCH, "reason=FailedScheduling,involvedObject.name=no-node-fits")


def _refused_job(cluster: Cluster) -> dict[str, Any]:
    """A Job whose pod the API server refuses (a quota of no pods), as bench meets it when
    admission refuses its pod: the Job controller's FailedCreate."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": SCRATCH},
        "spec": {"hard": {"pods": "0"}},
    }
    cluster.apply([quota], manager="tier")

    # Quota admission enforces a quota only once its controller has filled in status.hard; on
    # a busy machine that comes after the Job controller's first pod, which then runs.
    def counted() -> bool:
        status = cluster.get("resourcequota", "no-pods", "-n", SCRATCH).get("status", {})
        return bool(status.get("hard", {}).get("pods") == "0")

    wait_until("the quota of no pods in force", counted, timeout_s=45)
    cluster.apply([job("refused", SCRATCH, suspend=False)], manager="tier")
    return _event(cluster, SCRATCH, "reason=FailedCreate,involvedObject.name=refused")


# (what, the real event, the fake's event of the same recorder and kind)
EVENTS: dict[str, tuple[Callable[[Cluster], dict[str, Any]], Callable[[dict], dict]]] = {
    "KubeRay on a RayCluster": (
        lambda c: _event(c, NS, "involvedObject.kind=RayCluster,reason=CreatedHeadPod"),
        lambda e: make_object_event(
            "RayCluster",
            e["involvedObject"]["name"],
            e["reason"],
            e["message"],
            event_type="Normal",
        ),
    ),
    "KubeRay on a RayService": (
        lambda c: _event(c, NS, "involvedObject.kind=RayService,reason=CreatedRayCluster"),
        lambda e: make_object_event(
            "RayService", "ray-llm", e["reason"], e["message"], event_type="Normal"
        ),
    ),
    "the scheduler on a pod": (
        _unschedulable_pod,
        lambda e: make_event(
            e["involvedObject"]["name"], e["reason"], e["message"], namespace=SCRATCH
        ),
    ),
    "the Job controller on a Job": (
        _refused_job,
        lambda e: make_object_event(
            "Job",
            e["involvedObject"]["name"],
            e["reason"],
            e["message"],
            namespace=SCRATCH,
            api_version="batch/v1",
        ),
    ),
}


@pytest.mark.parametrize("pair", EVENTS.values(), ids=list(EVENTS))
def test_an_event_has_the_shape_the_fake_gives_it(
    deployed: Cluster, pair: tuple[Callable[[Cluster], dict[str, Any]], Callable[[dict], dict]]
) -> None:
    real_event = pair[0](deployed)
    fake_event = pair[1](copy.deepcopy(real_event))
    assert event_shape(fake_event) == event_shape(real_event), json.dumps(real_event)


def test_the_event_list_and_its_field_selectors_match(
    deployed: Cluster, kube_api: FakeKubeApi
) -> None:
    """The list envelope and the selectors the readers send (``type=Warning``;
    ``involvedObject.kind=Job,involvedObject.name=<job>``): the fake, holding the same
    events, selects the same ones."""
    _unschedulable_pod(deployed)
    _refused_job(deployed)
    path = f"/api/v1/namespaces/{SCRATCH}/events"
    everything = deployed.get("events", "-n", SCRATCH)["items"]
    kube_api.namespace = SCRATCH
    kube_api.events = everything
    for selector in ("type=Warning", "involvedObject.kind=Job,involvedObject.name=refused"):
        query = f"{path}?fieldSelector={selector}"
        status, listed = real(deployed, "admin-cli", "GET", query)
        fake_status, fake_listed = fake(kube_api, "GET", query)
        assert (status, fake_status) == (200, 200)
        assert {k: listed[k] for k in ("kind", "apiVersion")} == {
            k: fake_listed[k] for k in ("kind", "apiVersion")
        }
        names = sorted(e["metadata"]["name"] for e in listed["items"])
        assert names, f"the real server listed no event for {selector}"
        assert sorted(e["metadata"]["name"] for e in fake_listed["items"]) == names, selector


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/apis/apps/v1/namespaces/{}/daemonsets", "DaemonSetList"),
        ("/api/v1/namespaces/{}/pods", "PodList"),
    ],
)
def test_a_namespace_that_does_not_exist_lists_empty_on_both(
    deployed: Cluster, kube_api: FakeKubeApi, path: str, kind: str
) -> None:
    """``status`` and ``coldstart`` list the warm-up namespace, which an older deployment does
    not have: the real API server answers an empty list (200), not 404, and so does the fake
    for its warm-up namespace when nothing is set."""
    status, listed = real(deployed, "admin-cli", "GET", path.format("tier-no-such-namespace"))
    fake_status, fake_listed = fake(kube_api, "GET", path.format(WARMUP_NAMESPACE))
    assert (status, listed["kind"], listed["items"]) == (200, kind, [])
    assert (fake_status, fake_listed["kind"], fake_listed["items"]) == (200, kind, [])
