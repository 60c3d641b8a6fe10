"""Every terminal and pending branch of the readiness verdicts, each pinned on both sides.

A deploy fails at once on a state that waiting cannot fix and waits on one that it can; flipping
a branch either fails healthy deploys or lets broken ones burn the hour. Each row here is one
branch: the state as the API reports it (real field names and timestamps) and the verdict,
``PENDING`` or a fragment of the terminal message. Time edges are exact: timestamps are fixed
relative to ``NOW`` rather than the wall clock, so "299 s" and "300 s" are never one second off.

The readiness handler's loopback tests (``test_readiness_handler.py``) drive whole polls; these
call ``terminal_failure``/``placement``/``_chat_completion`` directly, so each row is cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.fakes.kube_api import (
    DECODE_DEPLOYMENT,
    GPU_NODE_A,
    GPU_NODE_B,
    HEAD_POD,
    PREFILL_DEPLOYMENT,
    RAY_CLUSTER,
    RAYSERVICE,
    SYSTEM_NODE,
    WORKER_IP_A,
    WORKER_IP_B,
    WORKER_POD_A,
    WORKER_POD_B,
    FakeKubeApi,
    make_event,
    make_node,
    make_object_event,
    make_pd_serve_applications,
    make_pod,
    make_rayservice,
    ts,
)
from tests.readiness import checks, handler, kube, kv_probe, placement, properties, terminal

pytest_plugins = ["tests.fakes.fixtures"]

NOW_DT = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NOW = NOW_DT.timestamp()
PENDING = None
NO_ROOM = "0/3 nodes are available: 2 Insufficient nvidia.com/gpu."


def at(ago: float) -> str:
    """A Kubernetes timestamp ``ago`` seconds before NOW."""
    return ts(NOW_DT, ago=ago)


def _retime(obj: Any, path: tuple[str, ...], ago: float) -> None:
    for key in path[:-1]:
        obj = obj[key] if not isinstance(obj, list) else obj[int(key)]
    obj[path[-1]] = at(ago)


# --- building the state the handler sees ---------------------------------------------------


def nodes(*, usable: int = 2, ready_ago: float = 3600.0) -> dict[str, Any]:
    """The GPU node list: ``usable`` of 2 nodes Ready with GPU and EFA since ``ready_ago``."""
    items = []
    for i, name in enumerate((GPU_NODE_A, GPU_NODE_B)):
        node = make_node(name, ready=i < usable, efa=1 if i < usable else 0)
        _retime(node, ("status", "conditions", "0", "lastTransitionTime"), ready_ago)
        items.append(node)
    return {"items": items}


def rayservice(**kwargs: Any) -> dict[str, Any]:
    """``make_rayservice``; ``generation`` 2 with ``observed_generation`` 1 makes the status
    describe the previous spec."""
    return make_rayservice(**kwargs)


def condition(reason: str, *, observed_generation: int | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": "RayServiceReady" if reason == "ValidationFailed" else "Ready",
        "status": "False",
        "reason": reason,
        "message": "spec.rayClusterConfig.headGroupSpec is invalid",
        "lastTransitionTime": at(60),
    }
    if observed_generation is not None:
        cond["observedGeneration"] = observed_generation
    return cond


def unschedulable(name: str, *, head: bool = False, since_ago: float, seen_ago: float) -> list[Any]:
    """A pending pod (PodScheduled=False since ``since_ago``) and its FailedScheduling event
    last seen ``seen_ago`` seconds before NOW."""
    pod = make_pod(name, node_type="head" if head else "worker", unschedulable_message=NO_ROOM)
    _retime(pod, ("status", "conditions", "0", "lastTransitionTime"), since_ago)
    event = make_event(name, "FailedScheduling", NO_ROOM, now=NOW_DT, ago=seen_ago)
    return [pod, event]


def pulling(reason: str, *, first_failure_ago: float | None) -> list[Any]:
    """A worker waiting in ``reason`` whose first pull failure event is ``first_failure_ago``
    seconds old (None: no pull event at all)."""
    pod = make_pod(WORKER_POD_A, node=GPU_NODE_A, waiting_reason=reason, waiting_message="denied")
    if first_failure_ago is None:
        return [pod]
    event = make_event(WORKER_POD_A, "Failed", "Failed to pull image: denied", count=5)
    event["firstTimestamp"] = event["metadata"]["creationTimestamp"] = at(first_failure_ago)
    event["lastTimestamp"] = at(5)
    return [pod, event]


def object_warning(reason: str, *, count: int, seen_ago: float) -> dict[str, Any]:
    event = make_object_event("RayCluster", RAY_CLUSTER, reason, "pods is forbidden", count=count)
    event["lastTimestamp"] = at(seen_ago)
    event["firstTimestamp"] = event["metadata"]["creationTimestamp"] = at(seen_ago + 60)
    return event


@dataclass
class Scenario:
    rs: dict[str, Any] = field(default_factory=lambda: rayservice(ready=False, app_status=None))
    nodes: dict[str, Any] = field(default_factory=nodes)
    objects: list[Any] = field(default_factory=list)  # pods and events, mixed
    started: float | None = NOW - 600  # when the wait started (on_event)

    def verdict(self) -> str | None:
        props = _props_with()
        pods = {"items": [o for o in self.objects if o.get("kind") == "Pod"]}
        events = {"items": [o for o in self.objects if o.get("kind") == "Event"]}
        state = checks.rayservice_state(self.rs, "qwen")
        result: str | None = terminal.terminal_failure(
            props,
            checks.gpu_nodes(self.nodes, 2),
            state,
            checks.pod_problems(pods, events),
            NOW,
            warnings=checks.ray_object_warnings(events, RAYSERVICE, state.cluster_names),
            started=self.started,
        )
        return result


def _rows() -> Iterator[tuple[str, Callable[[], Scenario], str | None]]:
    # KubeRay's own terminal conditions.
    yield (
        "validation-failed-fails-at-once",
        lambda: Scenario(
            rs=rayservice(ready=False, extra_conditions=[condition("ValidationFailed")])
        ),
        "KubeRay rejected the RayService spec (ValidationFailed)",
    )
    yield (
        "initializing-timeout-fails-at-once",
        lambda: Scenario(
            rs=rayservice(ready=None, extra_conditions=[condition("InitializingTimeout")])
        ),
        "KubeRay gave up initialising the RayService (InitializingTimeout)",
    )
    yield (
        "validation-failed-of-the-previous-spec-waits",
        lambda: Scenario(
            rs=rayservice(
                ready=False,
                generation=2,
                observed_generation=2,
                extra_conditions=[condition("ValidationFailed", observed_generation=1)],
            )
        ),
        PENDING,
    )
    yield (
        "validation-failed-while-the-status-is-stale-waits",
        lambda: Scenario(
            rs=rayservice(
                ready=False,
                generation=2,
                observed_generation=1,
                extra_conditions=[condition("ValidationFailed")],
            )
        ),
        PENDING,
    )
    yield ("ready-false-initializing-waits", lambda: Scenario(), PENDING)
    # The Serve app's own states.
    yield (
        "deploy-failed-fails-at-once",
        lambda: Scenario(
            rs=rayservice(ready=False, app_status="DEPLOY_FAILED", app_message="boom")
        ),
        "Serve app qwen is DEPLOY_FAILED: boom",
    )
    yield (
        "deploy-failed-of-the-previous-spec-waits",
        lambda: Scenario(
            rs=rayservice(
                ready=False, app_status="DEPLOY_FAILED", generation=2, observed_generation=1
            )
        ),
        PENDING,
    )
    for app_status in ("DEPLOYING", "NOT_STARTED", "RUNNING", "DELETING"):
        yield (
            f"{app_status.lower()}-waits",
            lambda s=app_status: Scenario(rs=rayservice(ready=False, app_status=s)),  # type: ignore[misc]
            PENDING,
        )
    # UNHEALTHY is Serve replacing replicas of a deployment that was healthy: never terminal,
    # whether or not KubeRay still counts serve endpoints (Ready True or False).
    for ready in (True, False):
        yield (
            f"unhealthy-with-ready-{str(ready).lower()}-waits",
            lambda r=ready: Scenario(  # type: ignore[misc]
                rs=rayservice(
                    ready=r,
                    app_status="UNHEALTHY",
                    deployments={PREFILL_DEPLOYMENT: "UNHEALTHY", DECODE_DEPLOYMENT: "HEALTHY"},
                )
            ),
            PENDING,
        )
    # Scheduling: GPU pods wait while GPU nodes are still coming; CPU pods get a grace.
    sched = terminal.UNSCHEDULABLE_GRACE_SECONDS
    yield (
        "gpu-pod-unschedulable-while-only-some-gpu-nodes-are-usable-waits",
        lambda: Scenario(
            nodes=nodes(usable=1, ready_ago=3600),
            objects=unschedulable(WORKER_POD_A, since_ago=3000, seen_ago=1),
        ),
        PENDING,
    )
    yield (
        "gpu-pod-unschedulable-the-whole-grace-after-all-nodes-are-usable-fails",
        lambda: Scenario(
            nodes=nodes(ready_ago=sched + 10),
            objects=unschedulable(WORKER_POD_A, since_ago=600, seen_ago=10),
        ),
        "Ray pod cannot be scheduled: pod " + WORKER_POD_A,
    )
    yield (
        "gpu-pod-unschedulable-one-second-short-of-the-grace-waits",
        lambda: Scenario(
            nodes=nodes(ready_ago=sched + 10),
            objects=unschedulable(WORKER_POD_A, since_ago=600, seen_ago=11),
        ),
        PENDING,
    )
    yield (
        "cpu-pod-unschedulable-for-the-grace-fails",
        lambda: Scenario(objects=unschedulable(HEAD_POD, head=True, since_ago=sched, seen_ago=1)),
        "Ray pod cannot be scheduled: pod " + HEAD_POD,
    )
    yield (
        "cpu-pod-unschedulable-one-second-short-of-the-grace-waits",
        lambda: Scenario(
            objects=unschedulable(HEAD_POD, head=True, since_ago=sched - 1, seen_ago=1)
        ),
        PENDING,
    )
    # Image pulls: retried by the kubelet; terminal only after the grace.
    pull = terminal.IMAGE_PULL_GRACE_SECONDS
    yield (
        "image-pull-backoff-for-the-grace-fails",
        lambda: Scenario(objects=pulling("ImagePullBackOff", first_failure_ago=pull)),
        f"Ray pod cannot pull its image for {pull} s",
    )
    yield (
        "image-pull-backoff-one-second-short-of-the-grace-waits",
        lambda: Scenario(objects=pulling("ImagePullBackOff", first_failure_ago=pull - 1)),
        PENDING,
    )
    yield (
        "image-pull-backoff-without-a-pull-event-waits",
        lambda: Scenario(objects=pulling("ImagePullBackOff", first_failure_ago=None)),
        PENDING,
    )
    yield (
        "err-image-pull-is-one-attempt-and-waits",
        lambda: Scenario(objects=pulling("ErrImagePull", first_failure_ago=10 * pull)),
        PENDING,
    )
    # Containers that cannot start: terminal at once.
    yield (
        "crash-loop-backoff-fails-at-once",
        lambda: Scenario(
            objects=[
                make_pod(
                    WORKER_POD_A,
                    node=GPU_NODE_A,
                    waiting_reason="CrashLoopBackOff",
                    restart_count=4,
                    last_exit_code=137,
                )
            ]
        ),
        "last exit code 137",
    )
    yield (
        "missing-secret-fails-at-once",
        lambda: Scenario(
            objects=[
                make_pod(WORKER_POD_A, node=GPU_NODE_A, waiting_reason="CreateContainerConfigError")
            ]
        ),
        "a referenced Secret, ConfigMap or key is missing",
    )
    # Objects KubeRay could not create (no pod exists to show it).
    started_ago = 600
    yield (
        "refused-pod-seen-twice-during-the-wait-fails",
        lambda: Scenario(objects=[object_warning("FailedToCreateWorkerPod", count=2, seen_ago=5)]),
        "KubeRay could not create the Ray cluster: RayCluster " + RAY_CLUSTER,
    )
    yield (
        "refused-pod-seen-once-waits",
        lambda: Scenario(objects=[object_warning("FailedToCreateWorkerPod", count=1, seen_ago=5)]),
        PENDING,
    )
    yield (
        "invalid-spec-seen-once-fails",
        lambda: Scenario(objects=[object_warning("InvalidRayClusterSpec", count=1, seen_ago=5)]),
        "InvalidRayClusterSpec",
    )
    yield (
        "refusal-last-seen-exactly-when-the-wait-started-fails",
        lambda: Scenario(
            objects=[object_warning("FailedToCreateWorkerPod", count=3, seen_ago=started_ago)]
        ),
        "FailedToCreateWorkerPod x3",
    )
    yield (
        "refusal-last-seen-before-the-wait-started-waits",
        lambda: Scenario(
            objects=[object_warning("FailedToCreateWorkerPod", count=3, seen_ago=started_ago + 1)]
        ),
        PENDING,
    )
    yield (
        "refusal-without-a-wait-start-fails",  # how `status` judges: no deploy wait to date it
        lambda: Scenario(
            objects=[object_warning("FailedToCreateWorkerPod", count=3, seen_ago=5)], started=None
        ),
        "FailedToCreateWorkerPod x3",
    )
    yield (
        "other-warnings-of-the-cluster-wait",
        lambda: Scenario(objects=[object_warning("FailedScaleDown", count=9, seen_ago=5)]),
        PENDING,
    )
    yield (
        "refusal-while-the-app-runs-is-not-a-failure",
        lambda: Scenario(
            rs=rayservice(ready=True, app_status="RUNNING"),
            objects=[object_warning("FailedToCreateWorkerPod", count=3, seen_ago=5)],
        ),
        PENDING,
    )


ROWS = list(_rows())


def _verdict_of(*problems: Any) -> str | None:
    props = _props_with()
    state = checks.rayservice_state(rayservice(ready=False, app_status=None), "qwen")
    result: str | None = terminal.terminal_failure(
        props, checks.gpu_nodes(nodes(), 2), state, list(problems), NOW
    )
    return result


CRASHING = checks.PodProblem(
    WORKER_POD_B, "CrashLoopBackOff", "back-off 5m0s restarting failed container", "ray-worker"
)
WAITING_PROBLEMS = {
    "unschedulable-too-soon": checks.PodProblem(
        WORKER_POD_A, "Unschedulable", NO_ROOM, observed_at=NOW_DT, since=NOW_DT
    ),
    "err-image-pull": checks.PodProblem(WORKER_POD_A, "ErrImagePull", "pull failed", "ray-worker"),
    "backoff-too-soon": checks.PodProblem(
        WORKER_POD_A, "ImagePullBackOff", "pull failed", "ray-worker", since=NOW_DT
    ),
}


@pytest.mark.parametrize("first", WAITING_PROBLEMS.values(), ids=WAITING_PROBLEMS.keys())
def test_a_pod_that_may_yet_recover_does_not_hide_one_that_will_not(first: Any) -> None:
    assert _verdict_of(first, CRASHING) == (
        f"Ray pod stuck: pod {WORKER_POD_B} container ray-worker: CrashLoopBackOff: back-off 5m0s "
        "restarting failed container; read its previous log: kubectl logs -n inference "
        f"{WORKER_POD_B} -c ray-worker --previous"
    )


def test_a_missing_secret_or_config_map_is_named_as_the_cause() -> None:
    problem = checks.PodProblem(
        WORKER_POD_A, "CreateContainerConfigError", 'secret "hf-token" not found', "ray-worker"
    )
    assert _verdict_of(problem) == (
        f"Ray pod stuck: pod {WORKER_POD_A} container ray-worker: CreateContainerConfigError: "
        'secret "hf-token" not found; a referenced Secret, ConfigMap or key is missing'
    )


@pytest.mark.parametrize(("scenario", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_terminal_or_pending(scenario: Callable[[], Scenario], expected: str | None) -> None:
    verdict = scenario().verdict()
    if expected is PENDING:
        assert verdict is None, verdict
    else:
        assert verdict is not None and expected in verdict, verdict


# --- GPU nodes, parse_time and quantity as read -------------------------------------------

GPU_AND_EFA = "nvidia.com/gpu and vpc.amazonaws.com/efa"


def test_a_node_whose_device_plugins_restart_keeps_its_capacity_but_is_not_usable() -> None:
    restarting = make_node(GPU_NODE_A)
    restarting["status"]["allocatable"] |= {"nvidia.com/gpu": "0", "vpc.amazonaws.com/efa": "0"}
    joining = make_node(GPU_NODE_B)
    del joining["status"]["conditions"]  # the kubelet has not reported yet
    found = checks.gpu_nodes({"items": [joining, restarting]}, 2)
    a, b = found.nodes
    assert (a.name, a.gpu_allocatable, a.gpu_capacity, a.efa_allocatable, a.efa_capacity) == (
        GPU_NODE_A,
        0,
        1,
        0,
        1,
    )
    assert (b.name, b.ready, b.ready_since) == (GPU_NODE_B, False, None)
    assert (found.ok, found.expected) == (False, 2)
    assert found.why == (
        f"0/2 GPU nodes Ready with {GPU_AND_EFA}; {GPU_NODE_A}: nvidia.com/gpu allocatable 0 "
        "(NVIDIA device plugin not running?), vpc.amazonaws.com/efa allocatable 0 (EFA device "
        f"plugin not running?); {GPU_NODE_B}: not Ready"
    )


def test_no_gpu_node_yet_names_the_label_it_looks_for() -> None:
    found = checks.gpu_nodes({"items": [make_node(SYSTEM_NODE, role=None, gpus=0, efa=0)]}, 2)
    assert (found.ok, found.expected, found.nodes) == (False, 2, ())
    assert found.why == "no nodes labelled role=gpu-worker yet (expected 2)"


@pytest.mark.parametrize(("zones", "warned"), [(("a", "a"), False), (("a", "b"), True)])
def test_gpu_nodes_in_two_zones_are_a_warning(zones: tuple[str, str], warned: bool) -> None:
    items = [
        make_node(name, zone=f"us-west-2{zone}")
        for name, zone in zip((GPU_NODE_A, GPU_NODE_B), zones, strict=True)
    ]
    why = checks.gpu_nodes({"items": items}, 2).why
    warning = "; WARNING GPU nodes span zones us-west-2a, us-west-2b (EFA cannot cross AZs)"
    assert why == f"2/2 GPU nodes Ready with {GPU_AND_EFA}" + (warning if warned else "")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("2026-11-30T12:00:00Z", NOW_DT),
        ("2026-11-30T14:00:00+02:00", NOW_DT),  # another offset: the same instant, in UTC
        ("2026-11-30T12:00:00", NOW_DT),  # no offset: read as UTC, never naive
        ("", None),
        ("yesterday", None),
        (1796040000, None),  # not a string
        (None, None),
    ],
)
def test_parse_time_reads_rfc3339_as_aware_utc(value: Any, parsed: datetime | None) -> None:
    got = checks.parse_time(value)
    assert got == parsed
    if got is not None:
        assert got.tzinfo is UTC


def test_parse_time_reads_a_time_without_offset_as_utc_in_any_local_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert checks.parse_time("2026-11-30T12:00:00") == NOW_DT
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    ("value", "count"), [("2", 2), (1, 1), ("0", 0), (True, 0), ("1Gi", 0), (None, 0), (1.0, 0)]
)
def test_quantity_counts_only_whole_device_counts(value: Any, count: int) -> None:
    assert checks.quantity(value) == count


# --- pod problems as read -------------------------------------------------------------------


def test_a_stuck_pod_quotes_its_latest_event_whatever_else_is_listed() -> None:
    pod, event = unschedulable(WORKER_POD_A, since_ago=300, seen_ago=30)
    older = make_event(
        WORKER_POD_A, "FailedScheduling", "0/3 nodes are available: older", now=NOW_DT, ago=200
    )
    # Listed first: a RayCluster's own event, and a crash-looping pod on its way out.
    cluster_event = object_warning("FailedToCreateWorkerPod", count=2, seen_ago=5)
    leaving = make_pod(
        "aaa-leaving", node=GPU_NODE_A, deleting=True, waiting_reason="CrashLoopBackOff"
    )
    problems = checks.pod_problems(
        {"items": [leaving, pod]}, {"items": [cluster_event, older, event]}
    )
    assert problems == [
        checks.PodProblem(
            pod=WORKER_POD_A,
            reason="Unschedulable",
            message=NO_ROOM,
            event=f"FailedScheduling: {NO_ROOM}",
            observed_at=NOW_DT - timedelta(seconds=30),
            since=NOW_DT - timedelta(seconds=300),
            requests_gpu=True,
            role="worker",
        )
    ]


def test_a_stuck_pod_quotes_only_events_about_a_pod() -> None:
    """Names are unique per kind only: a newer Warning with one of the pod's reasons about
    another kind of object of the same name is not the pod's event, nor its date."""
    pod, event = unschedulable(WORKER_POD_A, since_ago=300, seen_ago=30)
    namesake = make_object_event(
        "RayCluster", WORKER_POD_A, "FailedScheduling", "not the pod's", now=NOW_DT, ago=5
    )
    (problem,) = checks.pod_problems({"items": [pod]}, {"items": [event, namesake]})
    assert (problem.event, problem.observed_at) == (
        f"FailedScheduling: {NO_ROOM}",
        NOW_DT - timedelta(seconds=30),
    )
    (alone,) = checks.pod_problems({"items": [pod]}, {"items": [namesake]})
    assert (alone.event, alone.observed_at) == ("", NOW_DT - timedelta(seconds=300))


def test_an_unschedulable_pod_without_an_event_is_dated_by_its_condition() -> None:
    pod, _event = unschedulable(WORKER_POD_A, head=True, since_ago=300, seen_ago=30)
    (problem,) = checks.pod_problems({"items": [pod]}, {"items": []})
    assert (problem.event, problem.observed_at, problem.role) == (
        "",
        NOW_DT - timedelta(seconds=300),
        "head",
    )


def test_a_crash_loop_quotes_the_last_exit_of_the_container_that_loops() -> None:
    pod = make_pod(
        HEAD_POD,
        node_type="head",
        node=SYSTEM_NODE,
        waiting_reason="CrashLoopBackOff",
        restart_count=4,
        last_exit_code=1,
    )
    # An init container that finished comes first in the status, then the looping one.
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "wait-gcs-ready",
            "ready": True,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        },
        {
            "name": "fetch-model",
            "ready": False,
            "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
            "lastState": {
                "terminated": {"exitCode": 3, "reason": "Error", "message": "403 on the bucket"}
            },
        },
    ]
    event = make_event(HEAD_POD, "BackOff", "Back-off restarting failed container", ago=10)
    problems = checks.pod_problems({"items": [pod]}, {"items": [event]})
    assert [(p.container, p.message, p.event, p.role, p.requests_gpu) for p in problems] == [
        (
            "fetch-model",
            "restarted 2 times, last exit code 3: 403 on the bucket",
            "BackOff: Back-off restarting failed container",
            "head",
            False,
        ),
        (
            "ray-head",
            "restarted 4 times, last exit code 1: Error",  # no message: the reason
            "BackOff: Back-off restarting failed container",
            "head",
            False,
        ),
    ]
    assert {p.observed_at for p in problems} == {checks.event_time(event)}
    assert {p.since for p in problems} == {None}


def test_a_missing_secret_after_a_crash_quotes_the_kubelet_not_the_crash() -> None:
    pod = make_pod(
        WORKER_POD_A,
        node=GPU_NODE_A,
        waiting_reason="CreateContainerConfigError",
        waiting_message='secret "hf-token" not found',
        restart_count=1,
        last_exit_code=137,
    )
    (problem,) = checks.pod_problems({"items": [pod]}, {"items": []})
    assert (problem.reason, problem.message, problem.requests_gpu, problem.role) == (
        "CreateContainerConfigError",
        'secret "hf-token" not found',
        True,
        "worker",
    )


def test_a_pod_held_by_a_scheduling_gate_is_not_a_problem() -> None:
    pod = make_pod(WORKER_POD_B, unschedulable_message="waiting for its scheduling gates")
    pod["status"]["conditions"][0]["reason"] = "SchedulingGated"
    assert checks.pod_problems({"items": [pod]}, {"items": []}) == []


# --- the RayService status as read ---------------------------------------------------------


def test_a_rayservice_not_created_yet_is_absent() -> None:
    missing: dict[str, Any] | None
    for missing in (None, {}):
        assert checks.rayservice_state(missing, "qwen") == checks.RayServiceState(
            exists=False, app_name="qwen"
        )


def test_deployment_statuses_keep_their_message_and_role() -> None:
    rs = rayservice(ready=False, app_status="DEPLOYING")
    rs["status"]["activeServiceStatus"]["applicationStatuses"]["qwen"][
        "serveDeploymentStatuses"
    ] = {
        DECODE_DEPLOYMENT: {"status": "HEALTHY", "message": ""},
        PREFILL_DEPLOYMENT: {"status": "UNHEALTHY", "message": "replica failed health check"},
    }
    state = checks.rayservice_state(rs, "qwen")
    assert state.deployments == (
        checks.DeploymentState(DECODE_DEPLOYMENT, "HEALTHY", "", "decode"),
        checks.DeploymentState(
            PREFILL_DEPLOYMENT, "UNHEALTHY", "replica failed health check", "prefill"
        ),
    )
    assert (state.terminal_reason, state.terminal_message) == (None, "")


def test_an_upgrade_reads_both_clusters_and_the_ready_condition() -> None:
    rs = rayservice(ready=False, app_status="RUNNING")
    ready = rs["status"]["conditions"][0]
    ready["message"] = "Serve is upgrading to a new RayCluster"
    ready["lastTransitionTime"] = at(120)
    rs["status"]["pendingServiceStatus"] = {"rayClusterName": RAY_CLUSTER + "-next"}
    state = checks.rayservice_state(rs, "qwen")
    assert (state.ready_status, state.ready_message, state.ready_since) == (
        "False",
        "Serve is upgrading to a new RayCluster",
        NOW_DT - timedelta(seconds=120),
    )
    assert (state.active_cluster, state.pending_cluster) == (RAY_CLUSTER, RAY_CLUSTER + "-next")
    assert state.cluster_names == (RAY_CLUSTER, RAY_CLUSTER + "-next")


def test_a_first_deploy_reads_the_app_of_the_pending_cluster() -> None:
    """KubeRay promotes the first Ray cluster only once Serve on it is ready: until then the
    app's status (here DEPLOY_FAILED, a terminal verdict) is the pending cluster's."""
    rs = rayservice(
        ready=False,
        app_status="DEPLOY_FAILED",
        app_message="ImportError: no module named vllm",
        first_deploy=True,
    )
    assert "activeServiceStatus" not in rs["status"]
    state = checks.rayservice_state(rs, "qwen")
    assert (state.app_status, state.app_message) == (
        "DEPLOY_FAILED",
        "ImportError: no module named vllm",
    )
    assert (state.active_cluster, state.pending_cluster) == ("", RAY_CLUSTER)
    assert {d.status for d in state.deployments} == {"UPDATING"}


def test_an_upgrade_reads_the_app_of_the_active_cluster_not_the_pending_one() -> None:
    rs = rayservice(ready=True, app_status="RUNNING")
    rs["status"]["pendingServiceStatus"] = {
        "rayClusterName": RAY_CLUSTER + "-next",
        "applicationStatuses": {"qwen": {"status": "DEPLOYING", "message": "starting"}},
    }
    state = checks.rayservice_state(rs, "qwen")
    assert (state.app_status, state.app_message) == ("RUNNING", "")


def test_a_terminal_condition_quotes_kuberays_message_when_it_has_one() -> None:
    with_message = checks.rayservice_state(
        rayservice(ready=False, extra_conditions=[condition("ValidationFailed")]), "qwen"
    )
    assert with_message.terminal_message == (
        "KubeRay rejected the RayService spec (ValidationFailed); fix the manifest (condition "
        "RayServiceReady: spec.rayClusterConfig.headGroupSpec is invalid)"
    )
    bare = condition("ValidationFailed")
    del bare["message"]
    without = checks.rayservice_state(rayservice(ready=False, extra_conditions=[bare]), "qwen")
    assert without.terminal_message == (
        "KubeRay rejected the RayService spec (ValidationFailed); fix the manifest"
    )


# --- placement: prefill and decode apart ---------------------------------------------------


def worker(name: str, node: str, ip: str, *, gpus: int = 1, phase: str = "Running") -> Any:
    return make_pod(name, node=node, ip=ip, gpus=gpus, phase=phase)


HEAD = make_pod(HEAD_POD, node_type="head", node=SYSTEM_NODE, ip="10.0.0.30")
APART = [
    HEAD,
    worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A),
    worker(WORKER_POD_B, GPU_NODE_B, WORKER_IP_B),
]


@pytest.mark.parametrize(
    ("pods", "ok", "why"),
    [
        (APART, True, "2 running worker pod(s) on 2 distinct node(s)"),
        (
            [
                HEAD,
                worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A),
                worker(WORKER_POD_B, GPU_NODE_A, WORKER_IP_B),
            ],
            False,
            "2 running worker pod(s) on 1 distinct node(s)",
        ),
        (
            [
                HEAD,
                worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A, gpus=2),
                worker(WORKER_POD_B, GPU_NODE_B, WORKER_IP_B),
            ],
            False,
            "(not exactly 1 GPU(s) each",
        ),
        ([HEAD, worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A)], False, "1 running worker pod(s)"),
        (
            [
                HEAD,
                worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A),
                worker(WORKER_POD_B, GPU_NODE_B, WORKER_IP_B, phase="Pending"),
            ],
            False,
            "1 running worker pod(s)",
        ),
    ],
    ids=["two-nodes", "two-workers-one-node", "two-gpus", "one-worker", "one-pending"],
)
def test_fallback_placement_needs_two_one_gpu_workers_on_two_nodes(
    pods: list[Any], ok: bool, why: str
) -> None:
    place = placement.placement({"items": pods}, serve_error="dashboard unreachable")
    assert (place.method, place.ok, place.conflict) == ("worker-pods", ok, False)
    assert why in place.why and "dashboard unreachable" in place.why


def test_fallback_placement_skips_other_pods_wherever_they_are_listed() -> None:
    # The API lists pods by name: a non-Ray pod or a terminating worker may come first.
    other = make_pod("aaa-sidecar", node=GPU_NODE_A, ip="10.0.0.99")
    del other["metadata"]["labels"]["ray.io/node-type"]
    leaving = make_pod("aab-old-worker", node=GPU_NODE_A, ip="10.0.0.98", deleting=True)
    place = placement.placement({"items": [other, leaving, *APART]})
    assert (place.ok, [p.name for p in place.pods]) == (
        True,
        [HEAD_POD, WORKER_POD_A, WORKER_POD_B],
    )
    assert place.why == (
        "2 running worker pod(s) on 2 distinct node(s); replica placement unread: "
        "Serve replica details not available"
    )


def test_placement_lists_the_head_first_then_pods_by_name() -> None:
    head = make_pod("zz-head", node_type="head", node=SYSTEM_NODE, ip="10.0.0.30")
    place = placement.placement({"items": [APART[2], head, APART[1]]})
    assert [(p.role, p.name) for p in place.pods] == [
        ("head", "zz-head"),
        ("worker", WORKER_POD_A),
        ("worker", WORKER_POD_B),
    ]


def test_replicas_on_one_node_are_a_conflict_and_apart_are_ok() -> None:
    shared = make_pd_serve_applications(decode=("c" * 56, WORKER_IP_A))
    place = placement.placement({"items": APART}, shared, "qwen")
    assert (place.method, place.ok, place.conflict) == ("serve-replicas", False, True)
    assert f"share node(s) {GPU_NODE_A}" in place.why
    apart = placement.placement({"items": APART}, make_pd_serve_applications(), "qwen")
    assert (apart.ok, apart.conflict) == (True, False)
    assert (apart.prefill_nodes, apart.decode_nodes) == ((GPU_NODE_A,), (GPU_NODE_B,))


def test_gpus_of_every_container_of_a_pod_count() -> None:
    pod = worker(WORKER_POD_A, GPU_NODE_A, WORKER_IP_A)
    container = pod["spec"]["containers"][0]
    pod["spec"]["containers"].append({**container, "name": "second-engine"})
    assert checks.pod_gpus(pod) == 2


def test_only_running_replicas_count_for_placement() -> None:
    from tests.fakes.kube_api import RAY_NODE_A, RAY_NODE_B, make_replica, make_serve_applications

    # A prefill replica still starting on the decode node: Serve may yet move it; not a conflict.
    serve = make_serve_applications(
        "qwen",
        {
            PREFILL_DEPLOYMENT: [
                make_replica(RAY_NODE_A, WORKER_IP_A, deployment=PREFILL_DEPLOYMENT),
                make_replica(
                    RAY_NODE_B, WORKER_IP_B, deployment=PREFILL_DEPLOYMENT, state="STARTING"
                ),
            ],
            DECODE_DEPLOYMENT: [
                make_replica(RAY_NODE_B, WORKER_IP_B, deployment=DECODE_DEPLOYMENT)
            ],
        },
    )
    place = placement.placement({"items": APART}, serve, "qwen")
    assert (place.method, place.ok, place.conflict) == ("serve-replicas", True, False)
    assert (place.prefill_nodes, place.decode_nodes) == ((GPU_NODE_A,), (GPU_NODE_B,))


def test_serve_details_without_the_app_name_fall_back_to_the_pods() -> None:
    place = placement.placement({"items": APART}, make_pd_serve_applications(), None)
    assert (place.method, place.ok) == ("worker-pods", True)


def test_replica_on_an_unknown_ip_falls_back_to_the_pods() -> None:
    stray = make_pd_serve_applications(decode=("c" * 56, "10.9.9.9"))
    place = placement.placement({"items": APART}, stray, "qwen")
    assert (place.method, place.ok) == ("worker-pods", True)
    assert "replica node IPs not found among Ray pods" in place.why and "10.9.9.9" in place.why


def test_replicas_on_unknown_ips_are_each_named() -> None:
    from tests.fakes.kube_api import make_replica, make_serve_applications

    serve = make_serve_applications(
        "qwen",
        {
            PREFILL_DEPLOYMENT: [make_replica("d" * 56, "10.9.9.8", deployment=PREFILL_DEPLOYMENT)],
            DECODE_DEPLOYMENT: [make_replica("e" * 56, "10.9.9.9", deployment=DECODE_DEPLOYMENT)],
        },
    )
    place = placement.placement({"items": APART}, serve, "qwen")
    assert place.why == (
        "2 running worker pod(s) on 2 distinct node(s); replica placement unread: replica node "
        f"IPs not found among Ray pods: {DECODE_DEPLOYMENT}@10.9.9.9, {PREFILL_DEPLOYMENT}@10.9.9.8"
    )  # in Serve's order of deployments (by name)


def test_decode_without_a_running_prefill_falls_back_to_the_pods() -> None:
    from tests.fakes.kube_api import make_replica, make_serve_applications

    serve = make_serve_applications(
        "qwen",
        {DECODE_DEPLOYMENT: [make_replica("c" * 56, WORKER_IP_B, deployment=DECODE_DEPLOYMENT)]},
    )
    place = placement.placement({"items": APART}, serve, "qwen")
    assert (place.method, place.ok) == ("worker-pods", True)
    assert place.why.endswith(
        "replica placement unread: no RUNNING prefill and decode replicas in app qwen "
        "(prefill 0, decode 1)"
    )


def test_replicas_apart_name_every_node() -> None:
    from tests.fakes.kube_api import make_replica, make_serve_applications

    third = worker(WORKER_POD_A + "-3", GPU_NODE_A + "-3", "10.0.1.22")
    serve = make_serve_applications(
        "qwen",
        {
            PREFILL_DEPLOYMENT: [
                make_replica("b" * 56, WORKER_IP_A, deployment=PREFILL_DEPLOYMENT),
                make_replica("d" * 56, "10.0.1.22", deployment=PREFILL_DEPLOYMENT),
            ],
            DECODE_DEPLOYMENT: [make_replica("c" * 56, WORKER_IP_B, deployment=DECODE_DEPLOYMENT)],
        },
    )
    place = placement.placement({"items": [*APART, third]}, serve, "qwen")
    assert (place.method, place.ok) == ("serve-replicas", True)
    assert place.why == f"prefill on {GPU_NODE_A}, {GPU_NODE_A}-3, decode on {GPU_NODE_B}"


def test_replicas_apart_name_every_decode_node() -> None:
    from tests.fakes.kube_api import make_replica, make_serve_applications

    third = worker(WORKER_POD_B + "-3", GPU_NODE_B + "-3", "10.0.1.23")
    serve = make_serve_applications(
        "qwen",
        {
            PREFILL_DEPLOYMENT: [
                make_replica("b" * 56, WORKER_IP_A, deployment=PREFILL_DEPLOYMENT)
            ],
            DECODE_DEPLOYMENT: [
                make_replica("c" * 56, WORKER_IP_B, deployment=DECODE_DEPLOYMENT),
                make_replica("d" * 56, "10.0.1.23", deployment=DECODE_DEPLOYMENT),
            ],
        },
    )
    place = placement.placement({"items": [*APART, third]}, serve, "qwen")
    assert (place.method, place.ok) == ("serve-replicas", True)
    assert place.why == f"prefill on {GPU_NODE_A}, decode on {GPU_NODE_B}, {GPU_NODE_B}-3"


def test_a_replica_without_a_node_ip_is_named_with_a_question_mark() -> None:
    """Serve's ``ReplicaDetails.node_ip`` is optional (null until the actor is placed): the
    fallback names such a replica ``deployment@?`` rather than ``deployment@None``."""
    from tests.fakes.kube_api import make_replica, make_serve_applications

    decode = make_replica("c" * 56, WORKER_IP_B, deployment=DECODE_DEPLOYMENT)
    decode["node_ip"] = None
    serve = make_serve_applications(
        "qwen",
        {
            PREFILL_DEPLOYMENT: [
                make_replica("b" * 56, WORKER_IP_A, deployment=PREFILL_DEPLOYMENT)
            ],
            DECODE_DEPLOYMENT: [decode],
        },
    )
    place = placement.placement({"items": APART}, serve, "qwen")
    assert (place.method, place.ok) == ("worker-pods", True)
    assert place.why.endswith(f"replica node IPs not found among Ray pods: {DECODE_DEPLOYMENT}@?")


@pytest.mark.parametrize(("usable", "ok"), [(2, True), (1, False)])
def test_gpu_nodes_are_ok_at_exactly_the_expected_count(usable: int, ok: bool) -> None:
    found = checks.gpu_nodes(nodes(usable=usable), 2)
    assert found.ok is ok
    assert f"{usable}/2 GPU nodes Ready" in found.why


# --- the chat completion: which answers are final ------------------------------------------


@pytest.mark.parametrize(
    ("status", "final"),
    [
        (400, True),
        (422, True),
        (499, True),
        (404, False),  # the route is not there yet
        (408, False),
        (429, False),  # the engine is busy: retry on the next poll
        (500, False),
        (503, False),
    ],
)
def test_chat_completion_error_is_final_only_for_a_client_error(
    kube_api: FakeKubeApi, status: int, final: bool
) -> None:
    client = _completion_client(
        kube_api, status, {"object": "error", "message": f"status {status}"}
    )
    props = properties.Props.from_properties(kube_api.props())
    if final:
        with pytest.raises(properties.ReadinessError, match=f"returned {status}"):
            kv_probe._chat_completion(client, props, CODE)
    else:
        result, why = kv_probe._chat_completion(client, props, CODE)
        assert result is None and "POST /v1/chat/completions via ray-llm-serve-svc:8000" in why
    # One attempt per poll: the next poll is the retry.
    assert len(kube_api.requests_to("v1/chat/completions", "POST")) == 1


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (499, "final"),  # a client error, as without kv_transfer
        (500, "kv-load-failed"),
        (501, "pending"),
        (502, "pending"),
        (503, "pending"),
        (504, "pending"),
    ],
)
def test_in_pd_only_a_500_is_a_kv_load_failure(
    kube_api: FakeKubeApi, status: int, outcome: str
) -> None:
    """vLLM 0.26 answers a failed KV load with exactly 500 (GenerationError); the proxy and
    Serve answer 502/503/504 while nothing is reachable, which the next poll retries."""
    client = _completion_client(kube_api, status, {"object": "error", "message": "x"})
    props = properties.Props.from_properties(kube_api.props())
    if outcome == "pending":
        result, why = kv_probe._chat_completion(client, props, CODE, kv_transfer=True)
        assert result is None and why == f"{CHAT_WHERE}: x"
        return
    error = kv_probe.KvLoadFailed if outcome == "kv-load-failed" else properties.ReadinessError
    with pytest.raises(error) as info:
        kv_probe._chat_completion(client, props, CODE, kv_transfer=True)
    assert (outcome == "kv-load-failed") == str(info.value).startswith(kv_probe.KV_LOAD_FAILED)


def _completion_client(kube_api: FakeKubeApi, status: int, body: Any) -> Any:
    kube_api.set_stage("models")
    kube_api.fail_chat(status, body)
    return kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.test", sleep=lambda _: None
    )


CHAT_WHERE = "POST /v1/chat/completions via ray-llm-serve-svc:8000"
CODE = "7QK2M9XD"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            200,
            {"choices": [{"message": {"content": "7QK2-M9XD"}}], "usage": {"prompt_tokens": 2600}},
            ("7QK2-M9XD", True, f"{CHAT_WHERE}: returned text"),
        ),
        (
            200,
            {"choices": [{"message": {"content": "7QK2M9XB"}}]},
            ("7QK2M9XB", False, f"{CHAT_WHERE}: returned text"),
        ),
        (
            200,
            {"choices": [{"message": {"content": ""}}]},
            (None, None, f"{CHAT_WHERE}: returned no text"),
        ),
        (200, "<html>starting</html>", (None, None, f"{CHAT_WHERE}: response is not JSON")),
        (
            503,
            {"object": "error", "message": "engine warming up"},
            (None, None, f"{CHAT_WHERE}: engine warming up"),  # the server's message
        ),
    ],
    ids=["code", "wrong-code", "no-text", "not-json", "pending-shows-the-reason"],
)
def test_chat_completion_says_what_it_got(
    kube_api: FakeKubeApi, status: int, body: Any, expected: tuple[Any, Any, str]
) -> None:
    client = _completion_client(kube_api, status, body)
    props = properties.Props.from_properties(kube_api.props())
    result, why = kv_probe._chat_completion(client, props, CODE)
    answer, ok, status_text = expected
    assert why == status_text
    if answer is None:
        assert result is None
    else:
        assert (result.answer, result.ok, result.code) == (answer, ok, CODE)


def test_chat_completion_is_one_bounded_minimal_request(kube_api: FakeKubeApi) -> None:
    """The request a Lambda poll can afford: one attempt, bounded by the chat time-out."""
    calls: list[dict[str, Any]] = []
    real = _completion_client(kube_api, 200, {"choices": [{"message": {"content": "OK"}}]})

    class Recording:
        def service_proxy(self, *args: Any, **kwargs: Any) -> Any:
            calls.append({"args": args, **kwargs})
            return real.service_proxy(*args, **kwargs)

    props = properties.Props.from_properties(kube_api.props())
    result = kv_probe._chat_completion(Recording(), props, CODE)[0]
    assert result is not None and result.answer == "OK"
    (call,) = calls
    assert call["args"] == (props.namespace, props.serve_service, 8000, "v1/chat/completions")
    assert (call["method"], call["timeout"], call["retries"]) == (
        "POST",
        kv_probe.CHAT_TIMEOUT_SECONDS,
        0,
    )
    assert call["json_body"] == lambda_code.kvproof().probe_request(props.model_id, CODE)


# --- rollback detection: only CloudFormation's rollback Update answers at once ----------------


class _Stacks:
    """``describe_stacks`` answering one status, no stack ("" ), or raising ``error``."""

    def __init__(self, status: str, error: Exception | None = None) -> None:
        self.status, self.error = status, error
        self.calls: list[dict[str, Any]] = []

    def describe_stacks(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        stacks = [{"StackName": "RayPdEks-Workload", "StackStatus": self.status}]
        return {"Stacks": stacks if self.status else []}


STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-Workload/1"
CAPACITY = lambda_code._load(
    "handler", "ray_pd_eks_capacity_handler", lambda_code.LAMBDA_DIR / "capacity"
)


@pytest.mark.parametrize("module", [handler, CAPACITY], ids=["readiness", "capacity"])
@pytest.mark.parametrize(
    ("status", "rolling_back"),
    [
        ("UPDATE_ROLLBACK_IN_PROGRESS", True),
        ("UPDATE_IN_PROGRESS", False),
        ("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", False),
        ("ROLLBACK_IN_PROGRESS", False),  # a failed create rolls back with Deletes, not Updates
        ("", False),  # no such stack
    ],
)
def test_stack_rolling_back(module: Any, status: str, rolling_back: bool) -> None:
    stacks = _Stacks(status)
    assert module.stack_rolling_back({"StackId": STACK_ID}, stacks) is rolling_back
    assert stacks.calls == [{"StackName": STACK_ID}]


@pytest.mark.parametrize("module", [handler, CAPACITY], ids=["readiness", "capacity"])
def test_stack_rolling_back_without_a_stack_id_or_on_an_error_is_a_deploy(module: Any) -> None:
    from botocore.exceptions import ClientError

    stacks = _Stacks("UPDATE_ROLLBACK_IN_PROGRESS")
    assert module.stack_rolling_back({}, stacks) is False
    assert stacks.calls == []  # nothing to ask about
    throttled = ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "Op")
    failing = _Stacks("UPDATE_ROLLBACK_IN_PROGRESS", error=throttled)
    assert module.stack_rolling_back({"StackId": STACK_ID}, failing) is False


# --- status: a warm-up pod's state and the command that shows why it failed ---------------

WARMUP_NS = "ray-pd-eks-warmup"


def _warmup(**kwargs: Any) -> dict[str, Any]:
    from tests.fakes.kube_api import make_warmup_pod

    node = kwargs.pop("node", GPU_NODE_A)
    return make_warmup_pod("p", daemonset="model-prefetch", node=node, **kwargs)


def _unscheduled(reason: str | None) -> dict[str, Any]:
    """A warm-up pod not bound to a node: no container statuses yet, and PodScheduled False
    with the scheduler's reason, or no condition at all before the scheduler has seen it."""
    pod = _warmup(node=None)
    del pod["status"]["containerStatuses"]
    pod["status"]["conditions"] = (
        [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": NO_ROOM,
                "lastTransitionTime": at(60),
            }
        ]
        if reason
        else []
    )
    return pod


def _no_statuses_yet() -> dict[str, Any]:
    """Bound to a node, but the kubelet has not reported any container yet."""
    pod = _warmup()
    del pod["status"]["containerStatuses"]
    return pod


def _container(*args: Any, **kwargs: Any) -> dict[str, Any]:
    from tests.fakes.kube_api import make_container_status

    return make_container_status(*args, **kwargs)


@pytest.mark.parametrize(
    ("pod", "state", "why"),
    [
        (
            lambda: _warmup(
                containers=[_container("done", "waiting", reason="ErrImagePull", message="denied")]
            ),
            "failed: done ErrImagePull: denied",
            f"kubectl describe pod -n {WARMUP_NS} {{pod}}",
        ),
        (
            lambda: _warmup(
                containers=[_container("done", "waiting", reason="CreateContainerConfigError")]
            ),
            "failed: done CreateContainerConfigError",
            f"kubectl describe pod -n {WARMUP_NS} {{pod}}",
        ),
        (
            lambda: _warmup(
                init=[_container("stage", "waiting", reason="CrashLoopBackOff", last_exit_code=3)]
            ),
            "failed: stage CrashLoopBackOff, exit 3 (Error)",
            f"kubectl logs -n {WARMUP_NS} {{pod}} -c stage --previous",
        ),
        (
            lambda: _warmup(
                init=[_container("stage", "waiting", reason="CrashLoopBackOff", message="back-off")]
            ),
            "failed: stage CrashLoopBackOff: back-off",
            f"kubectl logs -n {WARMUP_NS} {{pod}} -c stage",
        ),
        (
            lambda: _warmup(
                init=[_container("stage", "terminated", exit_code=1, message="x\nlast")]
            ),
            "failed: stage exit 1 (Error): last",
            f"kubectl logs -n {WARMUP_NS} {{pod}} -c stage",
        ),
        (lambda: _warmup(init=[_container("stage", "terminated")], ready=True), "done", None),
        (
            lambda: _warmup(node=None, containers=[_container("done", "waiting", reason="")]),
            "not scheduled: Pending",
            None,
        ),
        (lambda: _unscheduled("Unschedulable"), "not scheduled: Unschedulable", None),
        (lambda: _unscheduled(None), "not scheduled: Pending", None),
        (lambda: _no_statuses_yet(), "pulling image", None),
        (
            lambda: _warmup(init=[_container("stage", "waiting", reason="CrashLoopBackOff")]),
            "failed: stage CrashLoopBackOff",
            f"kubectl logs -n {WARMUP_NS} {{pod}} -c stage",
        ),
        (
            lambda: _warmup(containers=[_container("done", "waiting", reason="Blocked")]),
            "waiting: Blocked",
            None,
        ),
        (
            lambda: _warmup(containers=[_container("done", "waiting", reason="ContainerCreating")]),
            "pulling image",
            None,
        ),
        (lambda: _warmup(containers=[_container("done")]), "starting", None),
        (
            lambda: _warmup(init=[_container("stage", "waiting", reason="Blocked")]),
            "waiting: Blocked",
            None,
        ),
    ],
    ids=[
        "image-pull",
        "config-error",
        "crash-loop-with-last-exit",
        "crash-loop-without",
        "init-exit-1",
        "ready",
        "unscheduled",
        "unschedulable",
        "not-seen-by-the-scheduler",
        "no-container-statuses-yet",
        "crash-loop-without-message",
        "waiting-other",
        "creating",
        "running-not-ready",
        "init-waiting",
    ],
)
def test_warmup_pod_state_and_its_why(
    pod: Callable[[], dict[str, Any]], state: str, why: str | None
) -> None:
    from ray_pd_eks.cli import status

    assert status.warmup_pod_state(pod()) == (state, why)


def test_a_terminating_warmup_pod_is_terminating_unless_it_failed() -> None:
    from ray_pd_eks.cli import status

    pod = _warmup(containers=[_container("done")])
    pod["metadata"]["deletionTimestamp"] = at(1)
    assert status.warmup_pod_state(pod) == ("terminating", None)
    failed = _warmup(init=[_container("stage", "terminated", exit_code=2)])
    failed["metadata"]["deletionTimestamp"] = at(1)
    assert status.warmup_pod_state(failed)[0] == "failed: stage exit 2 (Error)"


# --- small decisions behind the verdicts -----------------------------------------------------


def _props_with(**changes: Any) -> Any:
    """The readiness handler's properties for the default app, with ``changes``."""
    return properties.Props(
        cluster_name="ray-llm-multinode",
        endpoint="https://127.0.0.1:1",
        ca_data="",
        namespace="inference",
        rayservice=RAYSERVICE,
        app_name="qwen",
        model_id="qwen3.5-9b",
        kv_backend="LIBFABRIC",
        expected_gpu_nodes=2,
        **changes,
    )


@pytest.mark.parametrize(
    ("timeout", "interval", "budget", "give_up"),
    [
        # The next poll (one interval later, at most MAX_POLL_SECONDS long) must end in time.
        (3300, 30, 180.0, 3300 - (30 + 300)),
        (3300, 60, 60.0, 3300 - (60 + 300)),  # the budget is inside the poll's 300 s
        (400, 30, 180.0, 200),  # short timeouts: never before half the timeout
    ],
)
def test_readiness_gives_up_before_the_providers_hard_stop(
    timeout: int, interval: int, budget: float, give_up: float
) -> None:
    props = _props_with(timeout_seconds=timeout, query_interval_seconds=interval)
    settings = handler.Settings(poll_budget_seconds=budget)
    assert handler._give_up_after(props, settings) == give_up


def test_unschedulable_without_any_timestamp_waits() -> None:
    pod = make_pod(WORKER_POD_A, unschedulable_message=NO_ROOM)
    del pod["status"]["conditions"][0]["lastTransitionTime"]
    problems = checks.pod_problems({"items": [pod]}, {"items": []})
    assert problems[0].observed_at is None
    state = checks.rayservice_state(rayservice(ready=False, app_status=None), "qwen")
    verdict = terminal.terminal_failure(
        _props_with(), checks.gpu_nodes(nodes(), 2), state, problems, NOW
    )
    assert verdict is None


@pytest.mark.parametrize(
    ("reason", "field", "message", "counts"),
    [
        ("Failed", "message", "Failed to pull image: denied", True),
        ("Failed", "note", "Failed to pull image: denied", True),  # events.k8s.io/v1 wording
        ("Failed", "message", "Error: ErrImagePull", True),
        ("Failed", "message", "Error: failed to create containerd task", False),
        ("BackOff", "message", 'Back-off pulling image "x"', True),
        ("BackOff", "message", "Back-off restarting failed container", False),
        ("Pulling", "message", 'Pulling image "x"', False),
    ],
)
def test_which_events_date_an_image_pull_failure(
    reason: str, field: str, message: str, counts: bool
) -> None:
    pod = make_pod(WORKER_POD_A, node=GPU_NODE_A, waiting_reason="ImagePullBackOff")
    event = make_event(WORKER_POD_A, reason, "")
    del event["message"]
    event[field] = message
    event["firstTimestamp"] = event["metadata"]["creationTimestamp"] = at(700)
    (problem,) = checks.pod_problems({"items": [pod]}, {"items": [event]})
    assert (problem.since is not None) is counts


def test_terminating_pods_are_neither_placed_nor_problems() -> None:
    """During an upgrade the old cluster's pods linger with a deletionTimestamp: a stuck one
    must not fail the deploy, and two old workers on one node must not make a conflict."""
    old = worker(WORKER_POD_B + "-old", GPU_NODE_A, "10.0.1.99")
    old["metadata"]["deletionTimestamp"] = at(5)
    place = placement.placement({"items": [*APART, old]}, serve_error="unread")
    assert place.ok and "2 running worker pod(s) on 2 distinct node(s)" in place.why
    stuck = make_pod(WORKER_POD_B + "-old", node=GPU_NODE_A, waiting_reason="CrashLoopBackOff")
    stuck["metadata"]["deletionTimestamp"] = at(5)
    assert checks.pod_problems({"items": [stuck]}, {"items": []}) == []
