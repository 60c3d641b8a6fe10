"""Ray cluster changes are applied: the recreate custom resource's handler against the loopback
Kubernetes API, and the synthesized wiring (hash, annotation, order, permissions).

Under ``upgradeStrategy: None`` KubeRay never rolls out a ``rayClusterConfig`` change, so the
deploy deletes the RayService (and waits for its pods) when the rendered cluster spec changed,
and leaves it alone for Serve-only changes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pd_constructs.serving.workload import CLUSTER_SPEC_ANNOTATION, cluster_spec_hash
from ray_pd_eks import lambda_code
from ray_pd_eks.config import AppConfig
from tests.fakes import kube_api as fake
from tests.fakes.kube_api import FakeKubeApi, make_raycluster, make_rayservice
from tests.lambda_handlers import load
from tests.synth import Synthesized, cdk_json_context, resolve

pytest_plugins = ["tests.fakes.fixtures"]

recreate = load("readiness", "recreate_handler", "recreate")
kube = lambda_code.kube()

OLD, NEW = "0ld0ld0ld0ld0ld0", "4e54e54e54e54e54"
PODS = (fake.HEAD_POD, fake.WORKER_POD_A, fake.WORKER_POD_B)


@pytest.fixture
def api(kube_api: FakeKubeApi, eks_token: str, monkeypatch: pytest.MonkeyPatch) -> FakeKubeApi:
    """The fake API, running the old cluster (spec OLD) and serving; handler wired to it."""
    kube_api.set_stage("serving")
    kube_api.rayservice = make_rayservice()
    kube_api.rayclusters = {fake.RAY_CLUSTER: make_raycluster(spec_hash=OLD)}

    def factory(props: Any) -> Any:
        return kube.KubeClient(
            props.endpoint, props.ca_data, lambda: eks_token, sleep=lambda _: None
        )

    monkeypatch.setattr(recreate, "client_factory", factory)
    monkeypatch.setattr(recreate, "stack_rolling_back", lambda event: False)
    return kube_api


def event(server: FakeKubeApi, request: str = "Update", spec: str = NEW, old: str = OLD) -> dict:
    properties = {
        "ServiceToken": "arn:aws:lambda:us-west-2:111111111111:function:provider",
        "ClusterName": server.cluster_name,
        "ClusterEndpoint": server.url,
        "ClusterCertificateAuthorityData": server.ca_data,
        "Namespace": server.namespace,
        "RayServiceName": server.rayservice_name,
        "ClusterSpecHash": spec,
        "TimeoutSeconds": "900",
    }
    out: dict[str, Any] = {
        "RequestType": request,
        "StackId": "arn:aws:cloudformation:us-west-2:111111111111:stack/RayPdEks-Workload/1",
        "RequestId": "6d1c6b5a-0000-4000-8000-000000000002",
        "LogicalResourceId": "WorkloadRecreate",
        "ResourceType": "Custom::RayServiceRecreate",
        "ResourceProperties": properties,
    }
    if request != "Create":
        out["PhysicalResourceId"] = f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}"
        out["OldResourceProperties"] = {**properties, "ClusterSpecHash": old}
    return {**out, **recreate.on_event(out, None)}


def deletes(server: FakeKubeApi) -> list[Any]:
    return [r for r in server.requests if r.method == "DELETE"]


# --- the handler ---------------------------------------------------------------------------


def test_a_serve_only_change_leaves_the_running_cluster_alone(api: FakeKubeApi) -> None:
    done = recreate.is_complete(event(api, spec=OLD, old=OLD), None)
    assert done["IsComplete"] is True
    assert done["Data"]["Action"] == "unchanged"
    assert done["Data"]["Summary"].startswith(f"unchanged: Ray cluster spec {OLD} already running")
    assert deletes(api) == []


def test_a_cluster_change_deletes_the_rayservice_and_waits_for_its_pods(
    api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    update = event(api)
    assert recreate.is_complete(update, None) == {"IsComplete": False}
    (delete,) = deletes(api)
    assert (
        delete.path == f"/apis/ray.io/v1/namespaces/{fake.NAMESPACE}/rayservices/{fake.RAYSERVICE}"
    )
    assert json.loads(delete.body)["propagationPolicy"] == "Foreground"
    assert f"Ray cluster spec changed ({OLD} -> {NEW})" in caplog.text

    # Foreground deletion: the RayService stays (deletionTimestamp) until its dependents go.
    assert recreate.is_complete(update, None) == {"IsComplete": False}
    assert "is being deleted" in caplog.records[-1].getMessage()
    assert len(deletes(api)) == 1  # never deleted twice

    api.rayservice = None  # gone; its pods still terminating
    for pod in api.pods:
        pod["metadata"]["deletionTimestamp"] = fake.ts()
    assert recreate.is_complete(update, None) == {"IsComplete": False}
    assert f"waiting for 3 pod(s) to go: {', '.join(sorted(PODS))}" in caplog.text

    api.pods = []
    done = recreate.is_complete(update, None)
    assert done["IsComplete"] is True
    assert done["Data"]["Action"] == "recreated"
    assert f"({OLD} -> {NEW})" in done["Data"]["Summary"]
    assert "the endpoint is down until the readiness check passes" in done["Data"]["Summary"]
    assert recreate.data_from_physical_id(done["PhysicalResourceId"]) == done["Data"]


def test_a_cluster_without_the_annotation_counts_as_changed(api: FakeKubeApi) -> None:
    """A RayService deployed before the annotation existed: its spec is unknown, recreate."""
    api.rayclusters = {fake.RAY_CLUSTER: make_raycluster(spec_hash=None)}
    assert recreate.is_complete(event(api, request="Create"), None) == {"IsComplete": False}
    assert len(deletes(api)) == 1


def test_before_kuberay_made_a_cluster_the_rayservice_spec_says_what_will_run(
    api: FakeKubeApi,
) -> None:
    api.rayclusters = {}
    api.rayservice = make_rayservice(ready=None, app_status=None)
    api.rayservice["spec"]["rayClusterConfig"] = {
        "headGroupSpec": {"template": {"metadata": {"annotations": {CLUSTER_SPEC_ANNOTATION: NEW}}}}
    }
    assert recreate.is_complete(event(api), None)["Data"]["Action"] == "unchanged"
    assert deletes(api) == []


def test_first_deploy_has_nothing_to_delete(api: FakeKubeApi) -> None:
    api.rayservice = None
    api.pods = []
    done = recreate.is_complete(event(api, request="Create"), None)
    assert done["Data"]["Action"] == "created"
    assert deletes(api) == []


def test_rollback_answers_at_once_from_the_physical_id(
    api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = {"Action": "recreated", "ClusterSpecHash": OLD, "Summary": "recreated: ..."}
    current = recreate.physical_id_with_data(
        f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}", "recreated", previous
    )
    monkeypatch.setattr(recreate, "stack_rolling_back", lambda e: True)
    rollback = {
        "RequestType": "Update",
        "PhysicalResourceId": current,
        "ResourceProperties": {"ClusterSpecHash": OLD},
        "OldResourceProperties": {"ClusterSpecHash": NEW},
    }
    answer = recreate.on_event(rollback, None)
    assert answer["PhysicalResourceId"] == current and answer["Data"] == previous
    assert recreate.is_complete({**rollback, **answer}, None) == {
        "IsComplete": True,
        "Data": previous,
    }
    assert api.requests == []


def test_delete_never_touches_the_cluster(api: FakeKubeApi) -> None:
    delete = {"RequestType": "Delete", "PhysicalResourceId": "x/y/z?Action=created"}
    assert recreate.on_event(delete, None) == {"PhysicalResourceId": "x/y/z?Action=created"}
    assert recreate.is_complete(delete, None) == {"IsComplete": True}
    assert api.requests == []


def test_pods_that_never_go_fail_the_deploy_with_their_names(
    api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    update = event(api)
    api.rayservice = None
    monkeypatch.setattr(recreate, "clock", lambda: float(update[recreate.STARTED_AT_KEY]) + 800)
    with pytest.raises(recreate.RecreateError, match=f"timed out after 13 min: .*{fake.HEAD_POD}"):
        recreate.is_complete(update, None)


def test_missing_permission_fails_at_once(api: FakeKubeApi) -> None:
    api.inject_fault(403, times=10, path_contains="/rayservices/")
    with pytest.raises(recreate.RecreateError, match="403 Forbidden"):
        recreate.is_complete(event(api), None)


# --- the synthesized wiring ------------------------------------------------------------------


def _config(**overrides: Any) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **overrides})


@pytest.mark.parametrize(
    ("overrides", "recreates"),
    [
        ({"dlcImage": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray:custom"}, True),
        ({"gpuNodeCount": 3, "decodeReplicas": 2}, True),
        ({"kvBackend": "UCX"}, True),
        ({"rayClusterRevision": 1}, True),
        ({"rayClusterRevision": 0}, False),
        ({"maxModelLen": 8192}, False),
        ({"gpuMemoryUtilization": 0.85}, False),
    ],
)
def test_cluster_level_changes_change_the_trigger_and_serve_changes_do_not(
    overrides: dict[str, Any], recreates: bool
) -> None:
    assert (cluster_spec_hash(_config(**overrides)) != cluster_spec_hash(_config())) is recreates


def _recreate(app: Synthesized) -> tuple[str, dict[str, Any]]:
    (found,) = app.resources("Workload", "Custom::RayServiceRecreate").items()
    return found


def _rayservice_manifest(app: Synthesized) -> tuple[str, dict[str, Any]]:
    for logical_id, resource in app.resources(
        "Workload", "Custom::AWSCDK-EKS-KubernetesResource"
    ).items():
        text = resolve(resource["Properties"]["Manifest"])
        if '"kind": "RayService"' in text or '"kind":"RayService"' in text:
            return logical_id, json.loads(text)[0]
    raise AssertionError("no RayService manifest")


def test_the_synthesized_trigger_is_the_manifests_annotation_and_runs_first(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    hashes = []
    for app in (default_app, variant_app):
        recreate_id, resource = _recreate(app)
        manifest_id, manifest = _rayservice_manifest(app)
        expected = cluster_spec_hash(app.config)
        head = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
        assert head["metadata"]["annotations"][CLUSTER_SPEC_ANNOTATION] == expected
        assert resource["Properties"]["ClusterSpecHash"] == expected
        manifest_resource = app.templates["Workload"]["Resources"][manifest_id]
        assert recreate_id in manifest_resource["DependsOn"]
        hashes.append(expected)
    # The variant has more workers, UCX and S3 staging: a different Ray cluster.
    assert hashes[0] != hashes[1]


def test_the_deploy_output_says_what_happened_to_the_ray_cluster(
    default_app: Synthesized,
) -> None:
    recreate_id, _ = _recreate(default_app)
    output = default_app.templates["Workload"]["Outputs"]["RayClusterChange"]
    assert output["Value"] == {"Fn::GetAtt": [recreate_id, "Summary"]}
    assert "recreated = downtime" in output["Description"]


def test_the_recreate_role_may_delete_only_the_one_rayservice(default_app: Synthesized) -> None:
    manifests = default_app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource")
    (role,) = [
        doc
        for r in manifests.values()
        for doc in json.loads(resolve(r["Properties"]["Manifest"]))
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "ray-pd-eks-recreate"
    ]
    deleting = [rule for rule in role["rules"] if "delete" in rule["verbs"]]
    assert deleting == [
        {
            "apiGroups": ["ray.io"],
            "resources": ["rayservices"],
            "resourceNames": [default_app.config.ray_service_name],
            "verbs": ["get", "delete"],
        }
    ]
