"""The readiness custom resource's handler against a real HTTPS Kubernetes API on loopback.

Every behaviour of issue 4's waiter is driven through ``on_event``/``is_complete`` exactly as the
CDK Provider calls them; the fake server (``tests/fakes/kube_api.py``) verifies TLS with its own
CA, demands an EKS-style bearer token and records every request. ``sleep`` is a no-op recorder.
"""

from __future__ import annotations

import base64
import json
import logging
import string
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.fakes import kube_api as fake
from tests.fakes.kube_api import (
    FAKE_ACCESS_KEY_ID,
    FakeKubeApi,
    make_event,
    make_pod,
    make_rayservice,
)
from tests.lambda_handlers import load

pytest_plugins = ["tests.fakes.fixtures"]  # kube_api (a started fake server), eks_token, ...

handler = load("readiness", "readiness_handler")
kube, checks, kvproof = lambda_code.kube(), lambda_code.checks(), lambda_code.kvproof()
kv_probe, nixl_logs = lambda_code.kv_probe(), lambda_code.nixl_logs()
placement, properties = lambda_code.placement(), lambda_code.properties()
report, steps, terminal = lambda_code.report(), lambda_code.steps(), lambda_code.terminal()

GPU_RESOURCE_TEXT = "2 Insufficient nvidia.com/gpu"
EFA_RESOURCE_TEXT = "2 Insufficient vpc.amazonaws.com/efa"


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch, eks_token: str) -> list[float]:
    """Route the handler's client through a no-op sleep that records each backoff."""
    recorded: list[float] = []

    def factory(props: Any) -> Any:
        return kube.KubeClient(
            props.endpoint, props.ca_data, lambda: eks_token, sleep=recorded.append
        )

    monkeypatch.setattr(handler, "client_factory", factory)
    return recorded


def cfn_event(server: FakeKubeApi, request_type: str = "Create", **props: Any) -> dict[str, Any]:
    """A CloudFormation custom-resource event as the Provider framework forwards it."""
    event: dict[str, Any] = {
        "RequestType": request_type,
        "ServiceToken": "arn:aws:lambda:us-west-2:111111111111:function:provider",
        "ResponseURL": "...",
        "StackId": "arn:aws:cloudformation:us-west-2:111111111111:stack/Workload/1",
        "RequestId": "6d1c6b5a-0000-4000-8000-000000000001",
        "LogicalResourceId": "ReadinessCheck",
        "ResourceType": "Custom::PdReadiness",
        "ResourceProperties": server.props(**props),
    }
    if request_type != "Create":
        event["PhysicalResourceId"] = f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}"
    return event


def started(event: dict[str, Any], *, ago: float = 0.0) -> dict[str, Any]:
    """The event is_complete receives: the request merged with on_event's response."""
    merged = {**event, **handler.on_event(event, None)}
    merged[handler.STARTED_AT_KEY] = str(int(float(merged[handler.STARTED_AT_KEY]) - ago))
    return merged


def poll(event: dict[str, Any]) -> dict[str, Any]:
    return dict(handler.is_complete(event, None))


def completes(event: dict[str, Any]) -> dict[str, Any]:
    """A poll that must complete: its answer."""
    result = poll(event)
    assert result["IsComplete"] is True, result
    return result


def serving_completes(server: FakeKubeApi) -> dict[str, Any]:
    """The first poll of a deploy whose cluster serves, which must complete: its answer."""
    server.set_stage("serving")
    return completes(started(cfn_event(server)))


def probe_code(request: Any) -> str:
    """The random code a recorded integrity-probe request carried."""
    content = json.loads(request.body)["messages"][0]["content"]
    return content.split("access code exactly: ", 1)[1].split(".", 1)[0]


@pytest.fixture(autouse=True)
def no_counter_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The handler's waits between re-reads of the NIXL counters, recorded, not slept."""
    waits: list[float] = []
    monkeypatch.setattr(kv_probe, "counter_sleep", waits.append)
    return waits


def pending_check(caplog: pytest.LogCaptureFixture) -> str:
    """The check named by the last "poll: pending <check>" log line."""
    lines = [r.getMessage() for r in caplog.records if "poll: pending" in r.getMessage()]
    assert lines, "no pending poll was logged"
    return lines[-1].split("poll: pending ", 1)[1].split(" ", 1)[0]


def fail_message(event: dict[str, Any]) -> str:
    with pytest.raises(properties.ReadinessError) as info:
        poll(event)
    return str(info.value)


@pytest.fixture(autouse=True)
def _log_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="readiness")


# --- Provider contract ---------------------------------------------------------------------


def test_on_event_create_returns_physical_id_and_start_time(kube_api: FakeKubeApi) -> None:
    before = int(time.time())
    response = handler.on_event(cfn_event(kube_api), None)
    assert response["PhysicalResourceId"] == "ray-llm-multinode/inference/ray-llm"
    assert before <= int(response[handler.STARTED_AT_KEY]) <= int(time.time())
    assert "Data" not in response  # the start time must not leak into the resource's Data
    assert kube_api.requests == []


def test_on_event_update_keeps_the_same_physical_id(kube_api: FakeKubeApi) -> None:
    response = handler.on_event(cfn_event(kube_api, "Update", ConfigHash="new"), None)
    assert response["PhysicalResourceId"] == "ray-llm-multinode/inference/ray-llm"


def test_delete_returns_at_once_without_api_calls(
    kube_api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_client(props: Any) -> Any:
        raise AssertionError("Delete must not build a Kubernetes client")

    monkeypatch.setattr(handler, "client_factory", no_client)
    event = cfn_event(kube_api, "Delete")
    event["ResourceProperties"] = {"ServiceToken": "x"}  # even with properties gone
    assert handler.on_event(event, None) == {"PhysicalResourceId": event["PhysicalResourceId"]}
    assert handler.is_complete(event, None) == {"IsComplete": True}
    assert kube_api.requests == []


def test_missing_and_invalid_properties_fail_with_the_property_name(
    kube_api: FakeKubeApi,
) -> None:
    event = cfn_event(kube_api)
    del event["ResourceProperties"]["ModelId"]
    with pytest.raises(properties.ReadinessError, match="missing ModelId"):
        handler.on_event(event, None)
    with pytest.raises(properties.ReadinessError, match="KvBackend must be one of LIBFABRIC, UCX"):
        handler.on_event(cfn_event(kube_api, KvBackend="TCP"), None)
    with pytest.raises(properties.ReadinessError, match="ExpectedGpuNodes must be a positive"):
        handler.on_event(cfn_event(kube_api, ExpectedGpuNodes="two"), None)


@pytest.mark.parametrize("expected", ["2", 2])
def test_expected_gpu_nodes_accepts_cloudformation_strings_and_ints(
    kube_api: FakeKubeApi, expected: object
) -> None:
    props = properties.Props.from_properties(kube_api.props(ExpectedGpuNodes=expected))
    assert props.expected_gpu_nodes == 2
    assert props.timeout_seconds == 3300


def test_gpus_per_worker_is_optional_and_positive(kube_api: FakeKubeApi) -> None:
    assert properties.Props.from_properties(kube_api.props()).gpus_per_worker == 1
    props = properties.Props.from_properties(kube_api.props(GpusPerWorker="8"))
    assert props.gpus_per_worker == 8
    with pytest.raises(properties.ReadinessError, match="GpusPerWorker must be a positive"):
        properties.Props.from_properties(kube_api.props(GpusPerWorker="0"))


# --- the happy path, stage by stage --------------------------------------------------------


def test_happy_path_waits_through_each_stage_then_returns_data(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    event = started(cfn_event(kube_api))
    expected_pending = {
        "nodes-not-ready": "gpu-nodes",
        "deploying": "rayservice",
        "running": "models",
        "models": "chat-completion",
    }
    for stage, check_name in expected_pending.items():
        kube_api.set_stage(stage)
        assert poll(event) == {"IsComplete": False}, stage
        assert pending_check(caplog) == check_name, stage

    kube_api.set_stage("serving")
    result = poll(event)

    physical_id = result.pop("PhysicalResourceId")
    assert physical_id.startswith(f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}?")
    # The "models" stage answered the probe 503 (pending); the last request is the one served.
    chat = kube_api.requests_to("v1/chat/completions", "POST")[-1]
    code = probe_code(chat)
    tokens = len(json.loads(chat.body)["messages"][0]["content"]) // 4
    moved = tokens * kube_api.kv_bytes_per_token
    assert result == {
        "IsComplete": True,
        "Data": {
            "GpuNodes": f"{fake.GPU_NODE_A}:us-west-2a,{fake.GPU_NODE_B}:us-west-2a",
            "AppStatus": "RUNNING",
            "PrefillNode": fake.GPU_NODE_A,
            "DecodeNode": fake.GPU_NODE_B,
            "PlacementMethod": "serve-replicas",
            "Models": "qwen3.5-9b",
            "CompletionSample": f"The access code is {code}.",
            "KvBackend": "LIBFABRIC,LIBFABRIC",
            "KvProvider": "efa,efa",
            # The byte histogram's bucket around the truth (Ray's _sum is a midpoint guess).
            "KvTransfer": f"1 transfer(s), {bucket_mib(moved)} MiB for {tokens} prompt tokens",
            "IntegrityProbe": (
                f"code {code} returned ({tokens} prompt tokens; answer 'The access code is "
                f"{code}.')"
            ),
            "RayTokenEnforced": "yes: 401 without the token",
            "ServeService": "ray-llm-serve-svc.inference:8000",
        },
    }
    # Only the "no endpoints" 503 of /v1/models was retried (once); the completion is not.
    assert sleeps == [1.0]


def test_nodes_not_ready_status_names_the_missing_device_plugin(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.set_stage("nodes-not-ready")
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}
    line = next(r.getMessage() for r in caplog.records if "poll: pending" in r.getMessage())
    assert "0/2 GPU nodes Ready" in line
    assert "vpc.amazonaws.com/efa allocatable 0 (EFA device plugin not running?)" in line
    # Unschedulable while the nodes are still joining is expected, so it is reported, not fatal.
    assert "Insufficient nvidia.com/gpu" in line


def _gpu_node_without_efa(server: FakeKubeApi) -> None:
    server.nodes = [
        fake.make_node(fake.GPU_NODE_A, efa=0),
        fake.make_node(fake.GPU_NODE_B),
    ]


def _unschedulable_just_after_nodes_turned_ready(server: FakeKubeApi) -> None:
    server.nodes = [
        fake.make_node(fake.GPU_NODE_A, ready_ago=60),
        fake.make_node(fake.GPU_NODE_B, ready_ago=60),
    ]
    scheduler = f"0/3 nodes are available: {EFA_RESOURCE_TEXT}."
    server.pods[2] = make_pod(fake.WORKER_POD_B, unschedulable_message=scheduler)
    server.events = [make_event(fake.WORKER_POD_B, "FailedScheduling", scheduler, ago=10)]


def _chat_answers(status: int) -> Callable[[FakeKubeApi], None]:
    return lambda server: server.fail_chat(status, {"object": "error", "message": "busy"})


@pytest.mark.parametrize(
    ("stage", "arrange", "check", "logged"),
    [
        pytest.param(
            "serving",
            _gpu_node_without_efa,
            "gpu-nodes",
            "1/2 GPU nodes Ready",
            id="gpu-nodes-without-an-efa-device",
        ),
        pytest.param(
            "deploying",
            _unschedulable_just_after_nodes_turned_ready,
            "rayservice",
            "",
            id="unschedulable-just-after-nodes-turned-ready",
        ),
        # The API server's proxy and Serve answer these while no replica is reachable or free.
        *(
            pytest.param(
                "serving",
                _chat_answers(status),
                "chat-completion",
                "",
                id=f"a-proxy-or-serve-{status}-other-than-500",
            )
            for status in (502, 503, 504)
        ),
    ],
)
def test_a_poll_that_must_wait_names_the_check_it_waits_on(
    kube_api: FakeKubeApi,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
    stage: str,
    arrange: Callable[[FakeKubeApi], None],
    check: str,
    logged: str,
) -> None:
    kube_api.set_stage(stage)
    arrange(kube_api)
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}
    assert pending_check(caplog) == check
    assert logged in caplog.text


def test_requests_use_the_service_proxy_with_the_specified_completion(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    serving_completes(kube_api)

    models = kube_api.requests_to("/services/ray-llm-serve-svc:8000/proxy/v1/models", "GET")
    chats = kube_api.requests_to(
        "/api/v1/namespaces/inference/services/ray-llm-serve-svc:8000/proxy/v1/chat/completions",
        "POST",
    )
    assert len(models) == 1 and len(chats) == 1
    code = probe_code(chats[0])
    assert json.loads(chats[0].body) == {
        "model": "qwen3.5-9b",
        "messages": [{"role": "user", "content": kvproof.probe_prompt(code)}],
        "max_tokens": 48,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    serve_details = kube_api.requests_to("ray-llm-head-svc:8265/proxy/api/serve/applications/")
    # Once with the Ray token (placement), once without (it must be refused).
    assert [bool(r.headers.get("X-Ray-Authorization")) for r in serve_details] == [True, False]
    log_reads = kube_api.requests_to("ray-llm-head-svc:8265/proxy/api/v0/logs/file")
    assert {r.query["node_id"] for r in log_reads} == {fake.RAY_NODE_A, fake.RAY_NODE_B}
    assert all(r.authorization.startswith("Bearer k8s-aws-v1.") for r in kube_api.requests)
    assert not any("exec" in r.path for r in kube_api.requests)


def test_update_waits_while_the_status_describes_the_previous_spec(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.set_stage("serving")
    event = started(cfn_event(kube_api, "Update"))
    kube_api.rayservice = make_rayservice(generation=2, observed_generation=1)
    assert poll(event) == {"IsComplete": False}
    assert pending_check(caplog) == "rayservice"

    upgrading = {"type": "UpgradeInProgress", "status": "True", "reason": "BothActivePending"}
    kube_api.rayservice = make_rayservice(extra_conditions=[upgrading])
    assert poll(event) == {"IsComplete": False}

    kube_api.rayservice = make_rayservice(generation=2, observed_generation=2)
    assert poll(event)["IsComplete"] is True


def test_deploy_failed_of_an_older_generation_does_not_fail_the_new_one(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """The failed deploy left DEPLOY_FAILED behind; the update that fixes it must not be
    failed by it before KubeRay has even looked at the new spec."""
    kube_api.set_stage("deploying")
    event = started(cfn_event(kube_api, "Update"))
    kube_api.rayservice = make_rayservice(
        ready=False,
        app_status="DEPLOY_FAILED",
        app_message="ValueError: max_model_len too large",
        generation=3,
        observed_generation=2,
    )
    assert poll(event) == {"IsComplete": False}
    assert pending_check(caplog) == "rayservice"
    assert "status describes generation 2, not the latest 3" in caplog.text

    kube_api.set_stage("serving")
    kube_api.rayservice = make_rayservice(generation=3, observed_generation=3)
    assert poll(event)["IsComplete"] is True


def test_deploy_failed_of_the_current_generation_still_fails(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = make_rayservice(
        ready=False, app_status="DEPLOY_FAILED", generation=3, observed_generation=3
    )
    assert "is DEPLOY_FAILED" in fail_message(started(cfn_event(kube_api, "Update")))


def test_a_terminal_condition_of_an_older_generation_is_ignored(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """conditions[].observedGeneration says which spec a condition was computed for."""
    kube_api.set_stage("deploying")
    stale = {
        "type": "RayServiceReady",
        "status": "False",
        "reason": "InitializingTimeout",
        "message": "cluster did not start",
        "observedGeneration": 1,
        "lastTransitionTime": fake.ts(ago=600),
    }
    kube_api.rayservice = make_rayservice(
        ready=False, app_status="DEPLOYING", generation=2, extra_conditions=[stale]
    )
    assert kube_api.rayservice["status"]["observedGeneration"] == 1  # default: the spec's 1
    kube_api.rayservice["status"]["observedGeneration"] = 2
    assert poll(started(cfn_event(kube_api, "Update"))) == {"IsComplete": False}
    stale["observedGeneration"] = 2
    kube_api.rayservice = make_rayservice(
        ready=False,
        app_status="DEPLOYING",
        generation=2,
        observed_generation=2,
        extra_conditions=[stale],
    )
    assert "InitializingTimeout" in fail_message(started(cfn_event(kube_api, "Update")))


FORBIDDEN = (
    "Failed to create worker Pod for the cluster inference/ray-llm-x7k2p, pods "
    '"ray-llm-x7k2p-gpu-workers-worker-abcde" is forbidden: violates PodSecurity '
    '"baseline:latest": privileged (container "ray-worker" must not set '
    "securityContext.privileged=true)"
)


def _refused(server: FakeKubeApi, **event: Any) -> None:
    """Head running, no worker pod at all: the API server refuses to create them."""
    server.set_stage("deploying")
    server.pods = server.pods[:1]
    server.rayservice = make_rayservice(ready=False, app_status=None)
    server.events = [
        fake.make_object_event(
            event.pop("kind", "RayCluster"),
            event.pop("name", fake.RAY_CLUSTER),
            event.pop("reason", "FailedToCreateWorkerPod"),
            event.pop("message", FORBIDDEN),
            **{"count": 4, "ago": 3, **event},
        ),
        fake.make_object_event(
            "RayCluster",
            fake.RAY_CLUSTER,
            "CreatedHeadPod",
            "Created head Pod",
            event_type="Normal",
        ),
    ]


@pytest.mark.parametrize(
    "reason", ["FailedToCreateWorkerPod", "FailedToCreateHeadPod", "FailedCreate"]
)
def test_a_raycluster_warning_of_a_refused_pod_fails_fast_with_its_text(
    kube_api: FakeKubeApi, sleeps: list[float], reason: str
) -> None:
    _refused(kube_api, reason=reason)
    message = fail_message(started(cfn_event(kube_api), ago=60))
    assert f"RayCluster {fake.RAY_CLUSTER}: {reason} x4: {FORBIDDEN}" in message
    assert "Pod Security admission" in message
    assert kube_api.requests_to("/events")[0].query == {"fieldSelector": "type=Warning"}


def test_a_warning_that_is_not_a_refusal_keeps_the_wait_pending(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """KubeRay also warns when the dashboard is not up yet to take the Serve config: that is
    the normal start of a cluster, not a verdict."""
    _refused(
        kube_api,
        kind="RayService",
        name=fake.RAYSERVICE,
        reason="FailedToUpdateServeApplications",
        message="Failed to update serve applications: connection refused",
        count=9,
    )
    assert poll(started(cfn_event(kube_api), ago=60)) == {"IsComplete": False}


def test_a_single_refusal_is_retried_not_failed(kube_api: FakeKubeApi, sleeps: list[float]) -> None:
    _refused(kube_api, count=1)
    assert poll(started(cfn_event(kube_api), ago=60)) == {"IsComplete": False}


def test_a_refusal_last_seen_before_the_wait_started_is_history(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    _refused(kube_api, ago=300)
    assert poll(started(cfn_event(kube_api, "Update"), ago=60)) == {"IsComplete": False}


def test_warnings_of_another_raycluster_are_not_ours(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    _refused(kube_api, name="other-service-abcde")
    assert poll(started(cfn_event(kube_api), ago=60)) == {"IsComplete": False}


def test_an_invalid_rayservice_spec_fails_at_its_first_warning(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    text = "The RayService spec is invalid: spec.rayClusterConfig.headGroupSpec is required"
    _refused(
        kube_api,
        kind="RayService",
        name=fake.RAYSERVICE,
        reason="InvalidRayServiceSpec",
        message=text,
        count=1,
    )
    message = fail_message(started(cfn_event(kube_api), ago=60))
    assert f"RayService {fake.RAYSERVICE}: InvalidRayServiceSpec: {text}" in message


def test_deprecated_service_status_is_never_trusted(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.set_stage("serving")
    kube_api.rayservice = make_rayservice(ready=None, app_status=None)
    assert kube_api.rayservice is not None
    kube_api.rayservice["status"]["serviceStatus"] = "Running"
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}
    assert pending_check(caplog) == "rayservice"


# --- terminal failures ---------------------------------------------------------------------


def test_deploy_failed_fails_at_once_with_the_app_message(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = make_rayservice(
        ready=False,
        app_status="DEPLOY_FAILED",
        app_message="Failed to import ray.serve.llm:build_pd_openai_app",
        deployments={fake.PREFILL_DEPLOYMENT: "UNHEALTHY"},
    )
    message = fail_message(started(cfn_event(kube_api)))
    assert "Serve app qwen is DEPLOY_FAILED" in message
    assert "Failed to import ray.serve.llm:build_pd_openai_app" in message
    assert f"{fake.PREFILL_DEPLOYMENT}=UNHEALTHY" in message
    assert message.startswith("Readiness check failed for ray-llm-multinode/inference/ray-llm")


def unhealthy_rayservice() -> dict[str, Any]:
    """As KubeRay v1.7 copies Ray Serve 2.58's status of an app whose prefill deployment lost
    its replica after being HEALTHY (``ApplicationState._determine_app_status``'s message)."""
    return make_rayservice(
        ready=True,
        app_status="UNHEALTHY",
        app_message=f"The deployments ['{fake.PREFILL_DEPLOYMENT}'] are UNHEALTHY.",
        deployments={fake.PREFILL_DEPLOYMENT: "UNHEALTHY", fake.DECODE_DEPLOYMENT: "HEALTHY"},
    )


def test_unhealthy_is_pending_however_late_in_the_wait(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Serve is replacing the replicas: ten seconds short of the give-up point (2970 s by
    default) it still waits."""
    kube_api.set_stage("running")
    kube_api.rayservice = unhealthy_rayservice()
    assert poll(started(cfn_event(kube_api), ago=2960)) == {"IsComplete": False}
    assert pending_check(caplog) == "rayservice"


def test_unhealthy_at_the_timeout_fails_with_serves_message_and_deployments(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("running")
    kube_api.rayservice = unhealthy_rayservice()
    # The default give-up point, as above: 3300 s - (30 s + 300 s, the longest a poll lasts).
    message = fail_message(started(cfn_event(kube_api), ago=2970))
    assert "timed out for ray-llm-multinode/inference/ray-llm after 50 min" in message
    assert (
        "still failing: rayservice; last status: Ready=True/NonZeroServeEndpoints; app " in message
    )
    assert (
        f"app qwen=UNHEALTHY; message: The deployments ['{fake.PREFILL_DEPLOYMENT}'] are" in message
    )
    assert f"deployments {fake.PREFILL_DEPLOYMENT}=UNHEALTHY" in message


PULL_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
BACK_OFF = f'Back-off pulling image "{PULL_IMAGE}"'


def _pulling(server: FakeKubeApi, reason: str | None, *, first_failure_ago: float) -> None:
    """Worker A waiting in ``reason`` (None: running again), with kubelet's aggregated pull
    events: the first failure ``first_failure_ago`` seconds ago, the last 5 s ago."""
    server.set_stage("deploying")
    if reason is not None:
        server.pods[1] = make_pod(
            fake.WORKER_POD_A,
            node=fake.GPU_NODE_A,
            ip=fake.WORKER_IP_A,
            phase="Pending",
            waiting_reason=reason,
            waiting_message=BACK_OFF if reason == "ImagePullBackOff" else "reset by peer",
        )
    repeats = max(1, int(first_failure_ago // 60))
    server.events = [
        fake.make_object_event(
            "Pod",
            fake.WORKER_POD_A,
            "Failed",
            f'Failed to pull image "{PULL_IMAGE}": read: connection reset by peer',
            ago=5,
            count=repeats,
            first_ago=first_failure_ago,
        ),
        fake.make_object_event(
            "Pod",
            fake.WORKER_POD_A,
            "BackOff",
            BACK_OFF,
            ago=5,
            count=repeats,
            first_ago=max(5.0, first_failure_ago - 10),
        ),
        # Normal events are not warnings: the handler asks only for type=Warning.
        make_event(
            fake.WORKER_POD_A, "Pulling", f'Pulling image "{PULL_IMAGE}"', event_type="Normal"
        ),
    ]


def test_one_err_image_pull_then_success_completes(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """A 20 GB pull that hits a reset once is retried by the kubelet: pending, not failed;
    once the retry pulls the image the check completes, although the failure events (an hour's
    worth) are still listed."""
    _pulling(kube_api, "ErrImagePull", first_failure_ago=20)
    event = started(cfn_event(kube_api), ago=30)
    assert poll(event) == {"IsComplete": False}
    assert "ErrImagePull: reset by peer" in caplog.text
    pull_events = list(kube_api.events)
    kube_api.set_stage("serving")
    kube_api.events = pull_events
    assert poll(event)["IsComplete"] is True


def test_image_pull_backoff_within_the_grace_is_pending(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    _pulling(kube_api, "ImagePullBackOff", first_failure_ago=terminal.IMAGE_PULL_GRACE_SECONDS - 30)
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}


def test_image_pull_backoff_past_the_grace_fails_naming_the_pod_and_message(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    _pulling(kube_api, "ImagePullBackOff", first_failure_ago=terminal.IMAGE_PULL_GRACE_SECONDS + 30)
    message = fail_message(started(cfn_event(kube_api)))
    assert f"pod {fake.WORKER_POD_A} container ray-worker: ImagePullBackOff" in message
    assert BACK_OFF in message
    assert "cannot pull its image for 6" in message  # 630 s, judged from firstTimestamp
    assert "check the image URI and tag" in message


def test_image_pull_failure_without_a_pull_event_stays_pending(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """No event, no timestamp: the waiting state alone cannot say how long pulls have failed."""
    _pulling(kube_api, "ImagePullBackOff", first_failure_ago=3000)
    kube_api.events = []
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}


def test_crash_loop_backoff_fails_with_the_exit_code(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("deploying")
    kube_api.pods[2] = make_pod(
        fake.WORKER_POD_B,
        node=fake.GPU_NODE_B,
        ip=fake.WORKER_IP_B,
        waiting_reason="CrashLoopBackOff",
        waiting_message="back-off 40s restarting failed container",
        restart_count=4,
        last_exit_code=137,
    )
    kube_api.events = [
        make_event(fake.WORKER_POD_B, "BackOff", "Back-off restarting failed container ray-worker")
    ]
    message = fail_message(started(cfn_event(kube_api)))
    assert f"pod {fake.WORKER_POD_B} container ray-worker: CrashLoopBackOff" in message
    assert "restarted 4 times, last exit code 137" in message
    assert "Back-off restarting failed container ray-worker" in message
    assert f"kubectl logs -n inference {fake.WORKER_POD_B} -c ray-worker --previous" in message


@pytest.mark.parametrize("shortage", [GPU_RESOURCE_TEXT, EFA_RESOURCE_TEXT])
def test_unschedulable_after_gpu_nodes_are_ready_fails_quoting_the_scheduler(
    kube_api: FakeKubeApi, sleeps: list[float], shortage: str
) -> None:
    kube_api.set_stage("deploying")
    scheduler = f"0/3 nodes are available: 1 node(s) didn't match node selector, {shortage}."
    kube_api.pods[2] = make_pod(fake.WORKER_POD_B, unschedulable_message=scheduler)
    kube_api.events = [make_event(fake.WORKER_POD_B, "FailedScheduling", scheduler, ago=10)]
    message = fail_message(started(cfn_event(kube_api)))
    assert f"Ray pod cannot be scheduled: pod {fake.WORKER_POD_B}: Unschedulable" in message
    assert shortage in message


def setting(**attributes: Any) -> Callable[[FakeKubeApi], None]:
    """An arrangement that sets the fake API server's attributes."""

    def arrange(server: FakeKubeApi) -> None:
        for name, value in attributes.items():
            setattr(server, name, value)

    return arrange


def _count_stays_at_seven(server: FakeKubeApi) -> None:
    server.nixl_metrics[fake.WORKER_POD_B] = {"xfer": 7.0, "bytes": 1e9, "failed": 0.0}
    server.kv_transfers_per_chat = 0


def _tcp_line_with_fi_provider_efa(server: FakeKubeApi) -> None:
    server.set_nixl_backend("LIBFABRIC", provider="tcp")
    set_worker_env(server, FI_PROVIDER="efa")


@pytest.mark.parametrize(
    ("stage", "arrange", "said"),
    [
        # The first deploy's Serve app fails on the cluster KubeRay has not promoted yet (the
        # app is in pendingServiceStatus): the deploy fails then, not at the readiness time-out.
        pytest.param(
            "deploying",
            setting(
                rayservice=make_rayservice(
                    ready=False,
                    app_status="DEPLOY_FAILED",
                    app_message="ImportError: no module named vllm",
                    first_deploy=True,
                )
            ),
            ("Serve app qwen is DEPLOY_FAILED: ImportError: no module named vllm",),
            id="deploy-failed-on-the-first-cluster-at-once",
        ),
        pytest.param(
            "deploying",
            setting(
                rayservice=make_rayservice(
                    ready=False, ready_reason="InitializingTimeout", app_status=None
                )
            ),
            ("InitializingTimeout", "KubeRay gave up initialising the RayService"),
            id="initializing-timeout-at-once",
        ),
        pytest.param(
            "deploying",
            setting(rayservice=None),
            ("RayService inference/ray-llm not found", "RayServiceName and Namespace"),
            id="rayservice-not-found-names-the-properties",
        ),
        pytest.param(
            "serving",
            lambda server: server.set_nixl_backend("LIBFABRIC", "UCX"),
            (
                f"NIXL instantiated UCX on decode@{fake.WORKER_IP_B} although KvBackend is "
                "LIBFABRIC",
                "observed LIBFABRIC,UCX",
                'backends: ["LIBFABRIC"]',
            ),
            id="libfabric-configured-but-ucx-instantiated",
        ),
        pytest.param(
            "serving",
            _count_stays_at_seven,
            (
                "the NIXL transfer count did not rise during the probe",
                f"stayed at 7 on {fake.WORKER_POD_B}",
            ),
            id="a-transfer-count-that-did-not-rise",
        ),
        pytest.param(
            "serving",
            setting(kv_failed_per_chat=1),
            ("1 NIXL transfer(s) failed during the probe",),
            id="a-failed-transfer",
        ),
        # A transfer was counted but moved less than the prompt's KV cache needs.
        pytest.param(
            "serving",
            setting(kv_bytes_per_token=1024),
            ("less than the", "the prompt's KV did not move"),
            id="too-few-bytes-for-the-prompt",
        ),
        # NIXL's LIBFABRIC plugin on libfabric's tcp provider: the silent TCP fallback.
        pytest.param(
            "serving",
            lambda server: server.set_nixl_backend("LIBFABRIC", provider="tcp"),
            ("chose libfabric's TCP provider", f"decode@{fake.WORKER_IP_B}=tcp"),
            id="the-tcp-provider",
        ),
        pytest.param(
            "serving",
            _tcp_line_with_fi_provider_efa,
            ("chose libfabric's TCP provider",),
            id="a-tcp-provider-line-even-with-fi-provider-efa",
        ),
        pytest.param(
            "serving",
            lambda server: server.set_nixl_backend("LIBFABRIC", provider=None),
            ("no libfabric provider evidence", "Discovered <n> EFA devices", "looked at"),
            id="no-provider-evidence-with-libfabric",
        ),
        # Fluent but wrong: decode answered from KV that is not this prompt's.
        pytest.param(
            "serving",
            setting(chat_answer="The access code is 7QK2M9XD."),
            (
                "KV integrity probe failed: the answer does not contain the code",
                "'The access code is 7QK2M9XD.'",
            ),
            id="an-answer-without-the-code",
        ),
        # Ray older than 2.52 ignores authOptions and serves the dashboard open (without the
        # token, the fake dashboard answers every request).
        pytest.param(
            "serving",
            setting(ray_token=None),
            (
                "Ray token authentication is not enforced",
                "without the Ray token was answered, not refused with 401/403",
            ),
            id="a-dashboard-that-answers-without-the-token",
        ),
        pytest.param(
            "serving",
            setting(
                serve_applications=fake.make_pd_serve_applications(
                    prefill=(fake.RAY_NODE_A, fake.WORKER_IP_A),
                    decode=(fake.RAY_NODE_A, fake.WORKER_IP_A),
                )
            ),
            (f"prefill and decode replicas share node(s) {fake.GPU_NODE_A}",),
            id="prefill-and-decode-on-one-node",
        ),
        pytest.param(
            "serving",
            lambda server: server.set_proxy(
                server.serve_service, 8000, "v1/models", body={"data": [{"id": "other-model"}]}
            ),
            ("serves other-model but not ModelId qwen3.5-9b",),
            id="model-missing-from-the-endpoint",
        ),
    ],
)
def test_one_thing_wrong_fails_the_deploy_saying_what(
    kube_api: FakeKubeApi,
    sleeps: list[float],
    stage: str,
    arrange: Callable[[FakeKubeApi], object],
    said: tuple[str, ...],
) -> None:
    kube_api.set_stage(stage)
    arrange(kube_api)
    message = fail_message(started(cfn_event(kube_api)))
    for text in said:
        assert text in message


def test_timeout_names_the_still_failing_check_and_last_status(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("deploying")
    # Default give-up point: 3600 s - (30 s interval + 180 s poll budget + 60 s slowest call).
    event = started(cfn_event(kube_api), ago=3340)
    message = fail_message(event)
    assert (
        "Readiness check timed out for ray-llm-multinode/inference/ray-llm after 56 min" in message
    )
    assert "still failing: rayservice" in message
    assert "last status: Ready=False/Initializing; app qwen=DEPLOYING" in message


def test_no_timeout_while_well_inside_the_budget(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("deploying")
    assert poll(started(cfn_event(kube_api), ago=2900)) == {"IsComplete": False}
    # A shorter TimeoutSeconds moves the give-up point accordingly.
    short = started(cfn_event(kube_api, TimeoutSeconds="1200", QueryIntervalSeconds="30"), ago=960)
    assert "still failing: rayservice" in fail_message(short)


def test_ucx_configured_and_instantiated_is_reported(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend("UCX")
    result = poll(started(cfn_event(kube_api, KvBackend="UCX")))
    assert result["Data"]["KvBackend"] == "UCX,UCX"


def test_no_backend_evidence_fails_the_deploy_and_names_what_was_read(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """No 'Backend ... was instantiated' line is no proof: the deploy fails, naming the files."""
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend(None)
    message = fail_message(started(cfn_event(kube_api)))
    assert "no evidence that NIXL instantiated LIBFABRIC" in message
    assert f"prefill@{fake.WORKER_IP_A}: unknown: no 'Backend ... was instantiated' line" in message
    # Only the live processes' files: each node's replica and GPU worker, .out and .err (the
    # idle workers are no actors of the dashboard's ALIVE list).
    assert f"looked at 8 worker log file(s) of prefill@{fake.WORKER_IP_A}, decode@" in message

    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/logs", status=403, body=b"{}")
    blocked = fail_message(started(cfn_event(kube_api)))
    assert "unknown: cannot list logs" in blocked


def test_no_backend_evidence_and_no_counted_transfer_fails_the_deploy(
    kube_api: FakeKubeApi, sleeps: list[float], no_counter_waits: list[float]
) -> None:
    """The silent world: logs say nothing and the engines export no NIXL series."""
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend(None)
    kube_api.kv_decode_pod = ""  # nothing counts the probe
    original = fake.nixl_metrics_text
    try:
        fake.nixl_metrics_text = lambda counters: "# no NIXL series\nray_up 1\n"
        message = fail_message(started(cfn_event(kube_api)))
    finally:
        fake.nixl_metrics_text = original
    assert "no NIXL transfer was counted" in message
    assert f"decode engines' metrics ({fake.WORKER_POD_B})" in message
    assert "ray_vllm_nixl_xfer_time_seconds_count" in message
    # It re-read the counters (Ray exports them every 10 s) before giving its verdict.
    assert no_counter_waits == [kv_probe.COUNTER_WAIT_SECONDS] * (kv_probe.COUNTER_READS - 1)


# What a serving P/D endpoint answers when decode could not load the KV cache: vLLM 0.26's
# GenerationError (500) as Ray Serve LLM 2.58's ingress relays it (OpenAIHTTPException).
KV_LOAD_500 = {
    "object": "error",
    "message": "Internal server error",
    "type": "InternalServerError",
    "code": 500,
}


def test_a_500_from_the_serving_pd_endpoint_fails_at_once_as_a_kv_failure(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """vLLM's kv_load_failure_policy "fail" answers a failed KV load with HTTP 500; before, the
    check took it for "not ready yet" and the deploy ended only at the poll time-out."""
    kube_api.set_stage("serving")
    kube_api.fail_chat(500, KV_LOAD_500)
    message = fail_message(started(cfn_event(kube_api)))
    assert message.startswith(
        f"Readiness check failed for {fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}: "
        "KV transfer failed: POST /v1/chat/completions via ray-llm-serve-svc:8000 answered "
        "HTTP 500 to the KV integrity probe (Internal server error)"
    )
    assert "kv_load_failure_policy" in message and "decode worker's log" in message
    assert len(kube_api.requests_to("v1/chat/completions", "POST")) == 1  # no retry


def test_a_500_from_an_aggregated_endpoint_is_not_a_kv_failure(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """No KV moves in an aggregated app: the 500 is not read as a KV load failure."""
    kube_api.set_stage("serving")
    kube_api.set_aggregated()
    kube_api.fail_chat(500, KV_LOAD_500)
    event = started(cfn_event(kube_api, ServingMode="aggregated"))
    assert poll(event) == {"IsComplete": False}
    assert pending_check(caplog) == "chat-completion"


def bucket_mib(moved: float) -> str:
    """The byte histogram bucket ``moved`` falls in, as the verdict's summary prints it."""
    lower = 0.0
    for bound in fake.NIXL_BYTE_BUCKETS:
        if moved <= bound:
            return f"{lower / 1048576:.1f}-{bound / 1048576:.1f}"
        lower = bound
    return f"{lower / 1048576:.1f}-more"


def set_worker_env(kube_api: FakeKubeApi, **env: str) -> None:
    """Give the Ray worker pods this environment, as the RayService manifest renders it (the
    shared fake builds pods without env)."""
    for pod in kube_api.pods:
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker":
            pod["spec"]["containers"][0]["env"] = [
                {"name": name, "value": value} for name, value in env.items()
            ]


def test_libfabric_with_fi_provider_efa_proves_efa_without_nixls_info_line(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """NIXL 1.3.1 logs 'Discovered <n> EFA devices' at INFO, below its default C++ level
    (WARN): a worker that does not set NIXL_LOG_LEVEL=INFO never prints it. With
    FI_PROVIDER=efa libfabric offers NIXL no other provider, so LIBFABRIC instantiated is
    itself the proof (kvproof.implied_provider); before, every such deploy failed."""
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend("LIBFABRIC", provider=None)
    set_worker_env(kube_api, FI_PROVIDER="efa", NIXL_LOG_LEVEL="INFO")
    result = completes(started(cfn_event(kube_api)))
    assert result["Data"]["KvProvider"] == "efa,efa"
    # The backend line in the .out tail sufficed: no file's beginning was read for the
    # provider line.
    assert not [r for r in kube_api.requests_to("api/v0/logs/file") if r.query["lines"] == "-1"]


@pytest.mark.parametrize("fi_provider", ["", "tcp"])
def test_libfabric_without_fi_provider_efa_is_no_provider_evidence(
    kube_api: FakeKubeApi, sleeps: list[float], fi_provider: str
) -> None:
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend("LIBFABRIC", provider=None)
    if fi_provider:
        set_worker_env(kube_api, FI_PROVIDER=fi_provider)
    message = fail_message(started(cfn_event(kube_api)))
    assert "no libfabric provider evidence" in message
    assert f"FI_PROVIDER is {fi_provider or 'not efa on every worker pod'}" in message


def test_the_counters_are_read_from_the_decode_pod_through_the_pod_proxy(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    serving_completes(kube_api)
    reads = kube_api.requests_to("/proxy/metrics", "GET")
    assert [r.path for r in reads] == [
        f"/api/v1/namespaces/inference/pods/{fake.WORKER_POD_B}:8080/proxy/metrics"
    ] * 2  # before and after the probe


def test_placement_falls_back_to_worker_pods_when_serve_details_are_unreadable(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("serving")
    kube_api.set_proxy(kube_api.head_service, 8265, "api/serve/applications/", status=500)
    kube_api.ray_nodes = [
        fake.make_ray_node(fake.RAY_HEAD_ID, fake.HEAD_IP, head=True),
        fake.make_ray_node(fake.RAY_NODE_A, fake.WORKER_IP_A),
        fake.make_ray_node(fake.RAY_NODE_B, fake.WORKER_IP_B),
    ]
    data = poll(started(cfn_event(kube_api)))["Data"]
    assert data["PlacementMethod"] == "worker-pods"
    assert data["PrefillNode"] == f"unknown (worker nodes {fake.GPU_NODE_A} {fake.GPU_NODE_B})"
    # Logs are still read, per Ray worker node from the state API's node list.
    assert data["KvBackend"] == "LIBFABRIC,LIBFABRIC"


# --- transport: retries, auth, TLS, token --------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "backoff"),
    [(500, [1.0, 2.0]), (503, [1.0, 2.0]), (429, [0.0, 0.0]), ("reset", [1.0, 2.0])],
)
def test_transient_errors_are_retried_within_the_poll(
    kube_api: FakeKubeApi, sleeps: list[float], fault: object, backoff: list[float]
) -> None:
    kube_api.set_stage("serving")
    kube_api.inject_fault(fault, times=2, path_contains="/api/v1/nodes")  # type: ignore[arg-type]
    completes(started(cfn_event(kube_api)))
    assert len(kube_api.requests_to("/api/v1/nodes")) == 3
    assert sleeps == backoff  # 429 honours the server's Retry-After: 0


def test_retries_are_bounded_and_a_persistent_error_keeps_the_poll_pending(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.set_stage("serving")
    kube_api.inject_fault(503, times=100, path_contains="/api/v1/nodes")
    assert poll(started(cfn_event(kube_api))) == {"IsComplete": False}
    assert len(kube_api.requests_to("/api/v1/nodes")) == 4
    assert sleeps == [1.0, 2.0, 4.0]
    assert pending_check(caplog) == "kubernetes-api"


@pytest.mark.parametrize(
    ("status", "named"),
    [
        (401, ("401 Unauthorized", "EKS access entry")),
        (403, ('cannot list resource "nodes"', "RBAC")),
    ],
    ids=["401-names-the-access-entry", "403-names-rbac"],
)
def test_a_refused_call_fails_at_once_naming_what_to_fix(
    kube_api: FakeKubeApi, sleeps: list[float], status: int, named: tuple[str, str]
) -> None:
    kube_api.set_stage("serving")
    kube_api.inject_fault(status, path_contains="/api/v1/nodes")
    message = fail_message(started(cfn_event(kube_api)))
    for text in named:
        assert text in message
    assert sleeps == [] and len(kube_api.requests) == 1


def test_wrong_ca_fails_with_a_tls_message_and_no_retries(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("serving")
    event = started(
        cfn_event(kube_api, ClusterCertificateAuthorityData=FakeKubeApi.other_ca_data())
    )
    message = fail_message(event)
    assert f"TLS verification of {kube_api.url} failed" in message
    assert "ClusterCertificateAuthorityData" in message
    assert sleeps == [] and kube_api.requests == []


def test_ca_data_that_is_not_base64_pem_fails_clearly(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    event = started(cfn_event(kube_api, ClusterCertificateAuthorityData=kube_api.url))
    assert "not a base64-encoded PEM certificate" in fail_message(event)


@pytest.mark.usefixtures("fake_aws_env")
def test_token_is_a_presigned_get_caller_identity_url_bound_to_the_cluster() -> None:
    token = kube.eks_token("ray-llm-multinode")

    assert token.startswith("k8s-aws-v1.")
    payload = token.removeprefix("k8s-aws-v1.")
    assert "=" not in payload
    assert set(payload) <= set(string.ascii_letters + string.digits + "-_")
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    parsed = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    assert (parsed.scheme, parsed.netloc, parsed.path) == (
        "https",
        "sts.us-west-2.amazonaws.com",
        "/",
    )
    assert query["Action"] == "GetCallerIdentity"
    assert query["Version"] == "2011-06-15"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]
    assert query["X-Amz-Credential"].startswith(f"{FAKE_ACCESS_KEY_ID}/")
    assert query["X-Amz-Credential"].endswith("/us-west-2/sts/aws4_request")
    assert len(query["X-Amz-Signature"]) == 64


@pytest.mark.usefixtures("fake_aws_env")
def test_default_client_signs_with_the_lambda_credentials(kube_api: FakeKubeApi) -> None:
    kube_api.set_stage("deploying")
    props = properties.Props.from_properties(kube_api.props())
    client = handler.make_client(props, sleep=lambda _: None)
    assert client.get_json("/api/v1/nodes")["kind"] == "NodeList"
    bearer = kube_api.requests[0].authorization.removeprefix("Bearer ")
    payload = bearer.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    assert "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id" in url


def test_token_is_fetched_lazily_and_refreshed_after_ten_minutes(kube_api: FakeKubeApi) -> None:
    kube_api.set_stage("deploying")
    now = [1000.0]
    issued: list[str] = []

    def provider() -> str:
        issued.append(f"k8s-aws-v1.token{len(issued)}")
        return issued[-1]

    client = kube.KubeClient(kube_api.url, kube_api.ca_data, provider, clock=lambda: now[0])
    assert issued == []
    client.get_json("/api/v1/nodes")
    client.get_json("/api/v1/nodes")
    now[0] += 601
    client.get_json("/api/v1/nodes")
    assert issued == ["k8s-aws-v1.token0", "k8s-aws-v1.token1"]
    assert [r.authorization for r in kube_api.requests] == [
        "Bearer k8s-aws-v1.token0",
        "Bearer k8s-aws-v1.token0",
        "Bearer k8s-aws-v1.token1",
    ]


def test_requests_share_one_connection_until_the_server_closes_it(kube_api: FakeKubeApi) -> None:
    """Keep-alive: one TLS handshake for a poll's reads. A connection the server closed while
    idle is replaced before the next request, which neither fails nor waits."""
    kube_api.set_stage("deploying")
    slept: list[float] = []
    client = kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.x", sleep=slept.append
    )
    for _ in range(3):
        client.get_json("/api/v1/nodes")
    assert kube_api.connections == 1
    kube_api.drop_connections()
    assert client.get_json("/api/v1/nodes")["kind"] == "NodeList"
    assert (kube_api.connections, len(kube_api.requests), slept) == (2, 4, [])


def test_a_reset_or_a_partly_read_body_leaves_no_connection_to_reuse(
    kube_api: FakeKubeApi,
) -> None:
    kube_api.set_stage("deploying")
    client = kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.x", sleep=lambda _: None
    )
    kube_api.inject_fault("reset", times=1, path_contains="/api/v1/nodes")
    client.get_json("/api/v1/nodes")  # the reset attempt, then a new connection
    client.get_json("/api/v1/nodes")
    assert kube_api.connections == 2
    status, head = client.request("GET", "/api/v1/nodes", max_bytes=10)
    assert (status, len(head)) == (200, 10)
    client.get_json("/api/v1/nodes")
    assert (kube_api.connections, len(kube_api.requests)) == (3, 5)


def test_404_raises_at_once_with_the_status(kube_api: FakeKubeApi) -> None:
    slept: list[float] = []
    client = kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.x", sleep=slept.append
    )
    with pytest.raises(kube.KubeApiError) as info:
        client.get_json("/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm")
    assert info.value.status == 404
    assert info.value.reason == 'rayservices.ray.io "ray-llm" not found'
    assert str(info.value).endswith('returned 404: rayservices.ray.io "ray-llm" not found')
    assert slept == [] and len(kube_api.requests) == 1


def test_polls_log_one_line_without_credentials(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.set_stage("deploying")
    poll(started(cfn_event(kube_api)))
    kube_api.set_stage("serving")
    poll(started(cfn_event(kube_api)))
    polls = [r.getMessage() for r in caplog.records if r.getMessage().startswith("poll:")]
    assert len(polls) == 2 and all("\n" not in line for line in polls)
    assert "poll: COMPLETE" in polls[1]
    assert "k8s-aws-v1" not in caplog.text and "Bearer" not in caplog.text


# --- pure checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("2026-11-30 NIXL INFO _api.py:361 Backend LIBFABRIC was instantiated\n", "LIBFABRIC"),
        ("Backend UCX was instantiated", "UCX"),
        ("Backend UCX was instantiated\nBackend LIBFABRIC was instantiated\n", "LIBFABRIC"),
        ("Initializing NIXL wrapper\n", None),
        ("", None),
    ],
)
def test_nixl_backend_reads_the_instantiation_line(text: str, backend: str | None) -> None:
    assert nixl_logs.nixl_backend(text) == backend


def test_gpu_nodes_ignores_nodes_without_the_gpu_worker_label() -> None:
    nodes = {
        "items": [
            fake.make_node(fake.SYSTEM_NODE, role="system", gpus=1, efa=1),
            fake.make_node(fake.GPU_NODE_A),
        ]
    }
    result = checks.gpu_nodes(nodes, 2)
    assert [n.name for n in result.nodes] == [fake.GPU_NODE_A]
    assert result.ok is False
    assert result.why.startswith("1/2 GPU nodes Ready")
    node = result.nodes[0]
    assert (node.gpu_allocatable, node.efa_allocatable, node.instance_type, node.zone) == (
        1,
        1,
        "g6.8xlarge",
        "us-west-2a",
    )


def test_placement_maps_replica_ips_to_pods_and_nodes() -> None:
    server = FakeKubeApi()
    server.set_stage("serving")
    result = placement.placement({"items": server.pods}, server.serve_applications, "qwen")
    assert (result.method, result.ok) == ("serve-replicas", True)
    assert (result.prefill_nodes, result.decode_nodes) == ((fake.GPU_NODE_A,), (fake.GPU_NODE_B,))
    assert result.head_node == fake.SYSTEM_NODE


# --- servingMode aggregated: no prefill/decode split, no KV transfer ------------------------


def _serve_aggregated(server: FakeKubeApi, engines: Any = None) -> None:
    server.set_stage("serving")
    server.set_aggregated(*([engines] if engines is not None else []))


def test_aggregated_app_completes_without_reading_nixl_logs(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    _serve_aggregated(kube_api)
    result = poll(started(cfn_event(kube_api, ServingMode="aggregated")))
    code = probe_code(kube_api.requests_to("v1/chat/completions", "POST")[0])
    engines = f"aggregated: engines on {fake.GPU_NODE_A},{fake.GPU_NODE_B}"
    assert result["IsComplete"] is True
    assert result["Data"] == {
        "GpuNodes": f"{fake.GPU_NODE_A}:us-west-2a,{fake.GPU_NODE_B}:us-west-2a",
        "AppStatus": "RUNNING",
        "PrefillNode": engines,
        "DecodeNode": engines,
        "PlacementMethod": "serve-replicas",
        "Models": "qwen3.5-9b",
        "CompletionSample": f"The access code is {code}.",
        "KvBackend": "none (aggregated: no KV transfer)",
        "KvProvider": "none (aggregated: no KV transfer)",
        "KvTransfer": "none (aggregated: no KV transfer)",
        "IntegrityProbe": result["Data"]["IntegrityProbe"],
        "RayTokenEnforced": "yes: 401 without the token",
        "ServeService": "ray-llm-serve-svc.inference:8000",
    }
    assert result["Data"]["IntegrityProbe"].startswith(f"code {code} returned")
    assert kube_api.requests_to("api/v0/logs") == []
    assert kube_api.requests_to("/proxy/metrics") == []


def test_a_pd_check_of_an_aggregated_app_proves_no_kv_backend(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    # The same cluster checked as PD has no prefill/decode replicas: placement stays pending
    # on the weaker pod-level proof, which holds, then NIXL is unknown, never "aggregated".
    _serve_aggregated(kube_api)
    message = fail_message(started(cfn_event(kube_api)))
    assert "no evidence that NIXL instantiated LIBFABRIC" in message


def test_aggregated_engines_sharing_a_node_fail_the_deploy(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    both_on_a = ((fake.RAY_NODE_A, fake.WORKER_IP_A), (fake.RAY_NODE_A, fake.WORKER_IP_A))
    _serve_aggregated(kube_api, both_on_a)
    message = fail_message(started(cfn_event(kube_api, ServingMode="aggregated")))
    assert f"several engine replicas share node(s) {fake.GPU_NODE_A}" in message


def test_aggregated_without_running_engines_waits_on_placement(
    kube_api: FakeKubeApi, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    _serve_aggregated(kube_api, [])
    kube_api.pods = [p for p in kube_api.pods if p["metadata"]["name"] != fake.WORKER_POD_B]
    assert poll(started(cfn_event(kube_api, ServingMode="aggregated"))) == {"IsComplete": False}
    assert pending_check(caplog) == "placement"
    line = [r.getMessage() for r in caplog.records if "poll: pending" in r.getMessage()][-1]
    assert "no RUNNING engine replicas in app qwen" in line


def test_unknown_serving_mode_is_rejected(kube_api: FakeKubeApi) -> None:
    with pytest.raises(
        properties.ReadinessError, match="ServingMode must be one of pd, aggregated"
    ):
        handler.on_event(cfn_event(kube_api, ServingMode="disaggregated"), None)


def test_nixl_line_in_an_engine_worker_stdout_is_found_behind_many_idle_workers(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """The fake node has 14 idle workers' .err files: a reader that opened .err files first
    and stopped at a dozen would never reach the GPU worker's .out and report unknown."""
    result = serving_completes(kube_api)
    assert result["Data"]["KvBackend"] == "LIBFABRIC,LIBFABRIC"
    reads = [r.query["filename"] for r in kube_api.requests_to("api/v0/logs/file")]
    assert reads[0] == f"worker-{fake.PREFILL_WORKER_ID}-01000000-4242.out"
    assert reads[1] == f"worker-{fake.PREFILL_WORKER_ID[::-1]}-01000000-5151.out"
    # Then the .err of its own job, where NIXL's LIBFABRIC plugin logs the provider; never
    # an idle worker's.
    assert reads[2:4] == [
        f"worker-{fake.PREFILL_WORKER_ID}-01000000-4242.err",
        f"worker-{fake.PREFILL_WORKER_ID[::-1]}-01000000-5151.err",
    ]
    assert not any("9a9a" in name for name in reads)


# --- rollbacks -----------------------------------------------------------------------------


class FakeCloudFormation:
    """``describe_stacks`` as boto3 returns it, for one stack in one status (or an error)."""

    def __init__(self, status: str = "UPDATE_IN_PROGRESS", error: Exception | None = None):
        self.status = status
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def describe_stacks(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return {
            "Stacks": [
                {
                    "StackId": kwargs["StackName"],
                    "StackName": "RayPdEks-Workload",
                    "StackStatus": self.status,
                    "CreationTime": "2026-11-30T10:00:00Z",
                }
            ]
        }


@pytest.fixture
def cfn(monkeypatch: pytest.MonkeyPatch) -> FakeCloudFormation:
    stub = FakeCloudFormation()
    monkeypatch.setattr(handler, "cloudformation_client", lambda: stub)
    return stub


def _served_once(server: FakeKubeApi) -> dict[str, Any]:
    """A completed Create: its response as the Provider hands it to CloudFormation."""
    server.set_stage("serving")
    return poll(started(cfn_event(server)))


def test_success_carries_its_data_in_the_physical_id(
    kube_api: FakeKubeApi, sleeps: list[float], cfn: FakeCloudFormation
) -> None:
    done = _served_once(kube_api)
    physical_id = done["PhysicalResourceId"]
    assert physical_id.startswith(f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}?")
    carried = report.data_from_physical_id(physical_id)
    assert carried == {k: v for k, v in done["Data"].items() if k != "ServeService"}
    assert cfn.calls == []  # Create never asks CloudFormation


def test_rollback_update_answers_at_once_with_the_previous_data_and_no_kubernetes_call(
    kube_api: FakeKubeApi, sleeps: list[float], cfn: FakeCloudFormation
) -> None:
    previous = _served_once(kube_api)
    # The failed deploy left the cluster broken; the rollback must not look at it.
    kube_api.rayservice = make_rayservice(ready=False, app_status="DEPLOY_FAILED")
    kube_api.requests.clear()
    cfn.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    rollback = cfn_event(kube_api, "Update", ConfigHash="old-hash")
    rollback["OldResourceProperties"] = kube_api.props(ConfigHash="failed-hash")
    rollback["PhysicalResourceId"] = previous["PhysicalResourceId"]
    answer = handler.on_event(rollback, None)
    assert answer["PhysicalResourceId"] == previous["PhysicalResourceId"]
    assert answer["Data"] == previous["Data"]
    merged = {**rollback, **answer}
    assert poll(merged) == {"IsComplete": True, "Data": previous["Data"]}
    assert kube_api.requests == []
    assert cfn.calls == [{"StackName": rollback["StackId"]}]


def test_rollback_of_an_id_without_data_says_not_rechecked(
    kube_api: FakeKubeApi, cfn: FakeCloudFormation
) -> None:
    cfn.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    answer = handler.on_event(cfn_event(kube_api, "Update"), None)
    data = answer["Data"]
    assert set(data) == set(report.DATA_KEYS)
    assert data["AppStatus"] == report.NOT_RECHECKED
    assert data["ServeService"] == f"{fake.RAYSERVICE}-serve-svc.{fake.NAMESPACE}:8000"
    assert kube_api.requests == []


@pytest.mark.parametrize("status", ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS"])
def test_a_normal_update_still_checks(
    kube_api: FakeKubeApi, sleeps: list[float], cfn: FakeCloudFormation, status: str
) -> None:
    cfn.status = status
    kube_api.set_stage("deploying")
    kube_api.rayservice = make_rayservice(
        ready=False, app_status="DEPLOY_FAILED", generation=2, observed_generation=2
    )
    event = started(cfn_event(kube_api, "Update"))
    assert report.ROLLBACK_KEY not in event
    assert "DEPLOY_FAILED" in fail_message(event)
    assert len(cfn.calls) == 1


def test_describe_stacks_failing_treats_the_update_as_a_deploy(
    kube_api: FakeKubeApi, sleeps: list[float], cfn: FakeCloudFormation
) -> None:
    cfn.error = RuntimeError("Rate exceeded")
    kube_api.set_stage("serving")
    event = started(cfn_event(kube_api, "Update"))
    assert report.ROLLBACK_KEY not in event
    assert poll(event)["IsComplete"] is True


def test_update_keeps_the_current_id_until_the_check_passes(
    kube_api: FakeKubeApi, cfn: FakeCloudFormation
) -> None:
    update = cfn_event(kube_api, "Update")
    update["PhysicalResourceId"] += "?AppStatus=RUNNING"
    assert handler.on_event(update, None)["PhysicalResourceId"] == update["PhysicalResourceId"]
    renamed = cfn_event(kube_api, "Update", RayServiceName="other")
    renamed["PhysicalResourceId"] = update["PhysicalResourceId"]
    assert handler.on_event(renamed, None)["PhysicalResourceId"] == (
        f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/other"
    )


def test_the_physical_id_stays_within_cloudformations_limit() -> None:
    base = f"{fake.CLUSTER_NAME}/{fake.NAMESPACE}/{fake.RAYSERVICE}"
    data = {key: "x" * 300 for key in report.DATA_KEYS}
    data["GpuNodes"] = ",".join(
        f"ip-10-0-1-{i}.us-west-2.compute.internal:us-west-2a" for i in range(6)
    )
    physical_id = report.physical_id_with_data(base, data)
    assert len(physical_id) <= report.MAX_PHYSICAL_ID_CHARS
    carried = report.data_from_physical_id(physical_id)
    assert set(carried) == set(report.ID_DATA_KEYS)
    for key, value in carried.items():
        original = data[key]
        assert value == original or (original.startswith(value[:-3]) and value.endswith("..."))
    assert any(value.endswith("...") for value in carried.values())
    # The whole response CloudFormation receives stays under its 4 KiB limit.
    response = {
        "Status": "SUCCESS",
        "Reason": "SUCCESS",
        "StackId": "arn:aws:cloudformation:us-west-2:111111111111:stack/RayPdEks-Readiness/"
        + "0" * 36,
        "RequestId": "6d1c6b5a-0000-4000-8000-000000000001",
        "LogicalResourceId": "ReadinessResource" + "0" * 8,
        "PhysicalResourceId": physical_id,
        "Data": {k: v[: report.MAX_DATA_VALUE_CHARS] for k, v in data.items()},
    }
    assert len(json.dumps(response)) < 4096
    small = {"AppStatus": "RUNNING", "KvBackend": "LIBFABRIC,LIBFABRIC"}
    exact = report.data_from_physical_id(report.physical_id_with_data(base, small))
    assert exact["AppStatus"] == "RUNNING" and exact["KvBackend"] == "LIBFABRIC,LIBFABRIC"


def test_a_dashboard_that_cannot_answer_leaves_token_enforcement_unproven(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    """A 503 is neither a refusal nor an answer: the check stays pending on "ray-token"."""
    kube_api.set_stage("serving")
    kube_api.ray_token = None
    kube_api.set_proxy(kube_api.head_service, 8265, "api/serve/applications/", status=503)
    props = properties.Props.from_properties(kube_api.props())
    client = kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.t", sleep=sleeps.append
    )
    dashboard = lambda_code.ray_dashboard().RayDashboard(
        client, props.namespace, props.rayservice, token_secret="x"
    )
    assert steps.ray_token_enforced(dashboard).startswith("unknown: GET /api/serve/")
    for status in (200, 404):
        kube_api.set_proxy(
            kube_api.head_service, 8265, "api/serve/applications/", status=status, body={}
        )
        with pytest.raises(properties.ReadinessError, match="Ray token authentication is not"):
            steps.ray_token_enforced(dashboard)


# --- EFA memory registration and gpuWorkerPrivileged ------------------------------------------

# What Serve reports when vLLM's NIXL worker could not register the KV cache with EFA (NIXL
# 1.3.1's Python API raises the binding's nixlBackendError).
REGISTRATION_FAILED = (
    "The deployments ['PDDecode:qwen'] failed to start: nixlBackendError: NIXL_ERR_BACKEND "
    "in register_memory"
)


@pytest.mark.parametrize("privileged", ["false", "true"])
def test_a_failed_efa_registration_names_the_setting_that_restores_privileged_workers(
    kube_api: FakeKubeApi, sleeps: list[float], privileged: str
) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = make_rayservice(
        ready=False, app_status="DEPLOY_FAILED", app_message=REGISTRATION_FAILED
    )
    message = fail_message(started(cfn_event(kube_api, GpuWorkersPrivileged=privileged)))
    assert REGISTRATION_FAILED in message
    hint = "`ray-pd-eks settings --set gpuWorkerPrivileged=true`"
    assert (hint in message) is (privileged == "false")


def test_a_kv_load_failure_with_unprivileged_efa_workers_names_the_setting(
    kube_api: FakeKubeApi, sleeps: list[float]
) -> None:
    kube_api.set_stage("serving")
    kube_api.fail_chat(500, KV_LOAD_500)
    message = fail_message(started(cfn_event(kube_api, GpuWorkersPrivileged="false")))
    assert "KV transfer failed" in message
    assert "gpuWorkerPrivileged=false" in message
    assert "`ray-pd-eks settings --set gpuWorkerPrivileged=true`" in message


@pytest.mark.parametrize(
    ("given", "hinted"),
    [
        ({"GpuWorkersPrivileged": "false"}, True),
        ({"GpuWorkersPrivileged": "true"}, False),
        ({}, False),  # absent: privileged, as the construct's default deploys with EFA
        ({"GpuWorkersPrivileged": "false", "KvBackend": "UCX"}, False),
        ({"GpuWorkersPrivileged": "false", "ServingMode": "aggregated"}, False),
    ],
)
def test_the_privilege_hint_is_only_for_unprivileged_efa_workers(
    kube_api: FakeKubeApi, given: dict[str, str], hinted: bool
) -> None:
    props = properties.Props.from_properties({**kube_api.props(), **given})
    assert bool(terminal.efa_privilege_hint(props)) is hinted


@pytest.mark.parametrize(("raw", "value"), [("0", 0), ("32768", 32768), ("", 0)])
def test_kv_bytes_per_token_is_a_whole_number_from_zero(
    kube_api: FakeKubeApi, raw: str, value: int
) -> None:
    props = properties.Props.from_properties({**kube_api.props(), "KvBytesPerToken": raw})
    assert props.kv_bytes_per_token == value


@pytest.mark.parametrize("raw", ["-1", "x", "1.5"])
def test_a_bad_kv_bytes_per_token_is_refused_by_name(kube_api: FakeKubeApi, raw: str) -> None:
    with pytest.raises(properties.ReadinessError, match=f"KvBytesPerToken .* got '{raw}'"):
        properties.Props.from_properties({**kube_api.props(), "KvBytesPerToken": raw})
