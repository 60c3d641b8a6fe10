"""A fake Kubernetes API server: real TLS on 127.0.0.1, the slice of the API this project uses.

Why a real server rather than mocking ``http.client``: the code under test verifies TLS against
a CA given as base64 PEM, authenticates with a bearer token, retries on resets and 5xx, and goes
through the API server's service proxy to the Ray dashboard and the Serve endpoint. Only a real
socket exercises all of that.

Usage (see ``tests/fakes/fixtures.py`` for the pytest fixture)::

    server = FakeKubeApi().start()
    server.set_stage("deploying")           # a coherent scenario, see STAGES
    props = server.props()                  # ResourceProperties for the readiness handler
    server.inject_fault(503, times=2, path_contains="/api/v1/nodes")
    server.requests                         # every request: method, path, query, headers, body
    server.close()

State is plain mutable attributes (``nodes``, ``pods``, ``events``, ``rayservice``,
``serve_applications``, ``ray_nodes``, ``ray_logs``) built with the ``make_*`` helpers below, plus
``set_proxy(...)`` for any service-proxy response. Served endpoints:

* ``GET /api/v1/nodes`` (``labelSelector`` ``k=v[,k=v]``), ``GET /api/v1/namespaces/{ns}/pods``,
  ``GET /api/v1/namespaces/{ns}/events`` (``fieldSelector`` ``type=Warning``,
  ``involvedObject.kind=RayCluster``, ... as the API server applies it),
  ``GET /apis/ray.io/v1/namespaces/{ns}/rayservices/{name}`` (404 ``Status`` when unset);
* the node warm-up namespace (``WARMUP_NAMESPACE``): ``GET /apis/apps/v1/namespaces/{it}/
  daemonsets`` and ``GET /api/v1/namespaces/{it}/pods`` from ``warmup_daemonsets`` and
  ``warmup_pods`` (built with ``make_daemonset``/``make_warmup_pod``); both empty (the
  default, and what ``set_stage`` leaves) is a cluster without the warm-up: the real API
  server lists a namespace that does not exist as empty, 200 (tests_cluster/
  test_fake_vs_real.py);
* the benchmark's Job: ``POST /apis/batch/v1/namespaces/{ns}/jobs`` (201, 409 when the name is
  taken, 422 for a name that is no DNS subdomain or longer than the 63 bytes of the Job
  controller's pod label), ``GET``/``DELETE`` ``.../jobs/{name}`` (404 when missing;
  ``propagationPolicy`` Background/Foreground removes the Job's pods, as the garbage collector
  would, and Background answers the ``Status`` of an object deleted at once), and
  ``GET /api/v1/namespaces/{ns}/pods/{pod}/log`` from ``pod_logs`` (400 while the container
  waits to start). The Job controller's part is the test's: ``make_job_pod`` and
  ``finish_job``;
* ``DELETE /api/v1/namespaces/{ns}/pods/{name}`` removes the pod (and its NIXL counters); a
  replacement is the test's to add, as KubeRay would;
* ``GET /api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics`` (the pod proxy): the pod's
  ``nixl_metrics`` as Ray exports them, 503 for another port or a pod without counters;
* ``GET``/``PATCH`` (JSON merge patch, ``resourceVersion`` checked: 409 on a stale one)
  ``/api/v1/namespaces/{ns}/secrets/{name}`` from ``secrets`` (404 ``Status`` when absent). By
  default the Ray token Secret ``<rs>-ray-token`` holds ``RAY_TOKEN``, as the deploy leaves it;
* ``/api/v1/namespaces/{ns}/services/{svc}:{port}/proxy/{path}``: on ``<rs>-head-svc:8265``,
  while ``ray_token`` is set (the default: the RayService runs with token authentication), a
  request without ``X-Ray-Authorization: Bearer <ray_token>`` gets Ray's own plain-text 401
  (no token) or 403 (wrong token), exactly as the dashboard's middleware answers through the
  API server's proxy; then routes set with ``set_proxy`` win; otherwise
  ``<rs>-head-svc:8265`` answers the Ray dashboard endpoints from the state
  (``api/serve/applications/``, ``api/v0/nodes``, ``api/v0/actors`` filtered on ``state`` from
  ``ray_actors``, ``api/v0/logs``, ``api/v0/logs/file`` with Ray's ``lines``: the last N lines,
  ``-1`` the whole file from its start), and
  anything else answers 503 "no endpoints available", as a real API server does before a
  Service has ready endpoints.

Requests without ``Authorization: Bearer k8s-aws-v1.…`` get 401, as EKS would. Every error is
the API server's ``Status`` body (``metadata``, ``details`` naming the object); an injected 403
is worded for the request and ``user`` as RBAC's denial is. The RayService's conditions carry
KubeRay's messages; the scheduler's events have the events.k8s.io shape (``eventTime``, no
``count``), the kubelet's and the controllers' the core/v1 one. tests_cluster/test_fake_vs_real.py
holds these answers to the real API server's.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import re
import socket
import socketserver
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import trustme

CLUSTER_NAME = "ray-llm-multinode"
NAMESPACE = "inference"
RAYSERVICE = "ray-llm"
APP_NAME = "qwen"
MODEL_ID = "qwen3.5-9b"
RAY_CLUSTER = f"{RAYSERVICE}-x7k2p"
ZONE = "us-west-2a"

GPU_NODE_A = "ip-10-0-1-10.us-west-2.compute.internal"
GPU_NODE_B = "ip-10-0-1-11.us-west-2.compute.internal"
SYSTEM_NODE = "ip-10-0-0-5.us-west-2.compute.internal"
HEAD_POD = f"{RAY_CLUSTER}-head-9qz4d"
WORKER_POD_A = f"{RAY_CLUSTER}-gpu-workers-worker-4xq9z"
WORKER_POD_B = f"{RAY_CLUSTER}-gpu-workers-worker-8m2tw"
HEAD_IP, WORKER_IP_A, WORKER_IP_B = "10.0.0.30", "10.0.1.20", "10.0.1.21"
RAY_HEAD_ID = "a" * 56
RAY_NODE_A = "b" * 56
RAY_NODE_B = "c" * 56
PREFILL_DEPLOYMENT = "Prefill:PDPrefillServer:qwen3_5-9b"
DECODE_DEPLOYMENT = "Decode:PDDecodeServer:qwen3_5-9b"
INGRESS_DEPLOYMENT = "OpenAiIngress"
# build_openai_app (servingMode aggregated): build_llm_deployment names it <server class>:<model>.
ENGINE_DEPLOYMENT = "LLMServer:qwen3_5-9b"
PREFILL_WORKER_ID = "1f" * 28
DECODE_WORKER_ID = "2e" * 28
COMPLETION_TEXT = "OK."
RAY_TOKEN_SECRET = f"{RAYSERVICE}-ray-token"
# What KubeRay's and our token writer's tokens look like: base64 of 32 random bytes.
RAY_TOKEN = base64.b64encode(bytes(range(32))).decode("ascii")
FAKE_REGION = "us-west-2"
FAKE_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
WARMUP_NAMESPACE = "ray-pd-eks-warmup"
# Ray's log directory on every node (the agent resolves the log API's file names in it).
RAY_LOG_DIR = "/tmp/ray/session_latest/logs"
# The Serve controller's log (serve/controller_<pid>.log), as its controller_info names it.
CONTROLLER_LOG = "/serve/controller_521.log"

STAGES = ("nodes-not-ready", "deploying", "running", "models", "serving")

FaultKind = int | Literal["reset"]


# --- object builders -----------------------------------------------------------------------


def ts(value: datetime | None = None, *, ago: float = 0.0) -> str:
    """RFC 3339 as Kubernetes writes it; ``ago`` seconds before ``value`` (default now)."""
    moment = (value or datetime.now(UTC)) - timedelta(seconds=ago)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_node(
    name: str,
    *,
    ready: bool = True,
    gpus: int = 1,
    efa: int = 1,
    zone: str = ZONE,
    instance_type: str = "g6.8xlarge",
    role: str | None = "gpu-worker",
    ready_ago: float = 3600.0,
) -> dict[str, Any]:
    """A Node; ``ready_ago`` is how long ago its Ready condition last changed."""
    labels = {
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
    }
    if role:
        labels["role"] = role
    resources = {"cpu": "32", "memory": "128Gi"}
    if gpus or efa:
        resources |= {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(efa)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "lastTransitionTime": ts(ago=ready_ago),
                }
            ],
        },
    }


def make_pod(
    name: str,
    *,
    node_type: Literal["head", "worker"] = "worker",
    node: str | None = None,
    ip: str | None = None,
    phase: str = "Running",
    gpus: int | None = None,
    cluster: str = RAY_CLUSTER,
    namespace: str = NAMESPACE,
    waiting_reason: str | None = None,
    waiting_message: str = "",
    restart_count: int = 0,
    last_exit_code: int | None = None,
    unschedulable_message: str | None = None,
    unschedulable_ago: float = 600.0,
    deleting: bool = False,
) -> dict[str, Any]:
    """A KubeRay pod. Workers request one GPU and one EFA device unless ``gpus`` says otherwise.

    ``waiting_reason`` (e.g. ``ImagePullBackOff``) puts the ``ray-worker``/``ray-head``
    container in that waiting state; ``unschedulable_message`` makes the pod Pending with
    ``PodScheduled=False/Unschedulable`` since ``unschedulable_ago`` seconds.
    """
    gpu_count = (1 if node_type == "worker" else 0) if gpus is None else gpus
    container_name = "ray-head" if node_type == "head" else "ray-worker"
    limits: dict[str, str] = {"cpu": "8", "memory": "64Gi"}
    if gpu_count:
        limits |= {"nvidia.com/gpu": str(gpu_count), "vpc.amazonaws.com/efa": "1"}
    conditions: list[dict[str, Any]] = []
    container_status: dict[str, Any] = {
        "name": container_name,
        "ready": phase == "Running" and waiting_reason is None,
        "restartCount": restart_count,
        "state": {"running": {"startedAt": ts(ago=300)}},
    }
    if unschedulable_message is not None:
        phase, node, ip = "Pending", None, None
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable_message,
                "lastTransitionTime": ts(ago=unschedulable_ago),
            }
        )
    else:
        conditions.append({"type": "PodScheduled", "status": "True"})
    if waiting_reason is not None:
        container_status["state"] = {
            "waiting": {"reason": waiting_reason, "message": waiting_message}
        }
    if last_exit_code is not None:
        container_status["lastState"] = {
            "terminated": {"exitCode": last_exit_code, "reason": "Error", "finishedAt": ts()}
        }
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            "ray.io/cluster": cluster,
            "ray.io/node-type": node_type,
            "ray.io/is-ray-node": "yes",
            "ray.io/group": "headgroup" if node_type == "head" else "gpu-workers",
        },
        "creationTimestamp": ts(ago=900),
    }
    if deleting:
        metadata["deletionTimestamp"] = ts()
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if unschedulable_message is None:
        status["containerStatuses"] = [container_status]
    if ip:
        status["podIP"] = ip
    spec: dict[str, Any] = {
        "containers": [
            {"name": container_name, "resources": {"limits": limits, "requests": limits}}
        ]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def make_daemonset(
    name: str, *, desired: int, ready: int, namespace: str = WARMUP_NAMESPACE
) -> dict[str, Any]:
    """A DaemonSet with ``desired`` pods scheduled, ``ready`` of them Ready."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "ray-pd-eks"},
        },
        "status": {
            "currentNumberScheduled": desired,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "updatedNumberScheduled": desired,
            "numberAvailable": ready,
        },
    }


def make_container_status(
    name: str,
    state: Literal["running", "waiting", "terminated"] = "running",
    *,
    reason: str = "",
    message: str = "",
    exit_code: int = 0,
    last_exit_code: int | None = None,
    last_message: str = "",
    restart_count: int = 0,
) -> dict[str, Any]:
    """A container status: ``waiting`` with ``reason``/``message``, ``terminated`` with
    ``exit_code`` (reason Completed or Error unless given) and ``message``, or ``running``;
    ``last_exit_code`` adds a ``lastState.terminated`` with ``last_message``."""
    detail: dict[str, Any]
    if state == "waiting":
        detail = {"reason": reason}
        if message:
            detail["message"] = message
    elif state == "terminated":
        detail = {
            "exitCode": exit_code,
            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
            "startedAt": ts(ago=120),
            "finishedAt": ts(ago=60),
        }
        if message:
            detail["message"] = message
    else:
        detail = {"startedAt": ts(ago=60)}
    status: dict[str, Any] = {
        "name": name,
        "ready": state == "running",
        "restartCount": restart_count,
        "started": state == "running",
        "state": {state: detail},
        "image": "example.com/ray-llm:1",
    }
    if last_exit_code is not None:
        last: dict[str, Any] = {
            "exitCode": last_exit_code,
            "reason": "Error" if last_exit_code else "Completed",
            "finishedAt": ts(ago=30),
        }
        if last_message:
            last["message"] = last_message
        status["lastState"] = {"terminated": last}
    return status


def make_warmup_pod(
    name: str,
    *,
    daemonset: str,
    node: str | None,
    init: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    ready: bool = False,
    namespace: str = WARMUP_NAMESPACE,
) -> dict[str, Any]:
    """A warm-up DaemonSet's pod on ``node`` with these init/main container statuses
    (``make_container_status``). Default main container: ``hold-image`` for ``image-prepull``,
    ``done`` otherwise, running when ``ready``, else waiting (PodInitializing after init
    containers, ContainerCreating without)."""
    main_name = "hold-image" if daemonset == "image-prepull" else "done"
    if containers is None:
        if ready:
            containers = [make_container_status(main_name)]
        else:
            reason = "PodInitializing" if init else "ContainerCreating"
            containers = [make_container_status(main_name, "waiting", reason=reason)]
    running = any("running" in c["state"] for c in containers)
    conditions: list[dict[str, Any]] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True" if ready else "False"},
    ]
    status: dict[str, Any] = {
        "phase": "Running" if running else "Pending",
        "conditions": conditions,
        "containerStatuses": containers,
    }
    if init:
        status["initContainerStatuses"] = init
    spec: dict[str, Any] = {
        "initContainers": [{"name": c["name"]} for c in init or []],
        "containers": [{"name": c["name"]} for c in containers],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": daemonset,
                "app.kubernetes.io/part-of": "ray-pd-eks",
            },
            "creationTimestamp": ts(ago=600),
        },
        "spec": spec,
        "status": status,
    }


# Reasons of the events kube-scheduler records. It records through the events.k8s.io/v1 API
# (client-go tools/events), which the core/v1 API returns with ``eventTime`` and no
# ``firstTimestamp``/``lastTimestamp``/``count`` (as the tier's real scheduler shows).
SCHEDULER_REASONS = ("FailedScheduling", "Scheduled")
# Who records an event about each kind, through the core/v1 recorder (client-go
# tools/record) unless SCHEDULER_REASONS say otherwise.
_RECORDERS = {
    "Pod": "kubelet",
    "RayCluster": "raycluster-controller",
    "RayService": "rayservice-controller",
    "Job": "job-controller",
}
Recorder = Literal["core", "events"]


def micro_ts(value: datetime | None = None, *, ago: float = 0.0) -> str:
    """A MicroTime (``eventTime``, ``series.lastObservedTime``) as Kubernetes writes it."""
    moment = (value or datetime.now(UTC)) - timedelta(seconds=ago)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_object_event(
    kind: str,
    name: str,
    reason: str,
    message: str,
    *,
    event_type: str = "Warning",
    ago: float = 5.0,
    namespace: str = NAMESPACE,
    count: int = 1,
    first_ago: float | None = None,
    api_version: str = "",
    now: datetime | None = None,
    recorder: Recorder | None = None,
    component: str = "",
) -> dict[str, Any]:
    """An Event about any object (``Pod``, ``RayCluster``, ``RayService``, ``Job``), last seen
    ``ago`` seconds before ``now`` and first seen ``first_ago`` seconds before it (default: a
    minute earlier per repeat), as the core/v1 API returns it after the recorder's aggregation.

    ``recorder="core"`` (client-go tools/record: the kubelet, the controller manager's
    controllers, KubeRay 1.6): ``count``, ``firstTimestamp``, ``lastTimestamp``,
    ``source.component``. ``recorder="events"`` (client-go tools/events, the events.k8s.io/v1
    API: kube-scheduler, KubeRay 1.7's ``mgr.GetEventRecorder``): ``eventTime`` (the first
    sighting), no count or core timestamps, and from the first repeat on a ``series`` with its
    count and last sighting (``recordToSink`` writes count 2 at once, later counts every 30
    minutes). tests_cluster/test_fake_vs_real.py compares both shapes with the real ones.

    By default the recorder and ``component`` follow the reason: the scheduler's reasons about
    a pod (SCHEDULER_REASONS) in the shape its events.k8s.io recorder leaves, everything else
    in the core/v1 shape of the kind's recorder (_RECORDERS)."""
    by_scheduler = kind == "Pod" and reason in SCHEDULER_REASONS
    if recorder is None:
        recorder = "events" if by_scheduler else "core"
    if by_scheduler and not component:
        component = "default-scheduler"
    first = ago + 60 * (count - 1) if first_ago is None else first_ago
    involved: dict[str, Any] = {"kind": kind, "name": name, "namespace": namespace}
    if kind != "Pod":
        involved["apiVersion"] = api_version or "ray.io/v1"
    else:
        involved["apiVersion"] = "v1"
    reporter = component or _RECORDERS.get(kind, "")
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{abs(hash((reason, message))):x}",
            "namespace": namespace,
            "creationTimestamp": ts(now, ago=first),
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": event_type,
        "reportingComponent": reporter,
    }
    if recorder == "core":
        event |= {
            "count": count,
            "eventTime": None,
            "firstTimestamp": ts(now, ago=first),
            "lastTimestamp": ts(now, ago=ago),
            "reportingInstance": "",
            "source": {"component": reporter},
        }
        return event
    event |= {
        "eventTime": micro_ts(now, ago=first),
        "firstTimestamp": None,
        "lastTimestamp": None,
        "reportingInstance": f"{reporter}-ip-10-0-0-5",
        "source": {},
    }
    if count > 1:
        event["series"] = {"count": count, "lastObservedTime": micro_ts(now, ago=ago)}
    return event


# An Event about a pod, last seen ``ago`` seconds before ``now`` (default: now); with ``count``
# > 1 aggregated: first seen a minute per repeat earlier. The scheduler's reasons
# (SCHEDULER_REASONS) come in the shape its events.k8s.io recorder leaves, the kubelet's in the
# core/v1 shape.
make_event = functools.partial(make_object_event, "Pod")


# The conditions' messages KubeRay writes (v1.7.0 ``rayservice_controller.go``
# ``calculateConditions`` and ``markFailedOnInitializingTimeout``; the same in v1.6.1, whose
# Initializing status tests_cluster/test_fake_vs_real.py compares with this fake's).
_INITIALIZING = "RayService is initializing"
_READY_MESSAGES = {
    "Initializing": _INITIALIZING,
    "InitializingTimeout": (
        "RayService failed to become ready within the configured timeout of 30m0s. "
        "Time spent initializing: 30m1s"
    ),
    "NonZeroServeEndpoints": "Number of serve endpoints is greater than 0",
    "ZeroServeEndpoints": "Number of serve endpoints dropped to 0",
}
_NO_PENDING = "Active Ray cluster exists and no pending Ray cluster"


def make_rayservice(
    name: str = RAYSERVICE,
    *,
    app: str = APP_NAME,
    app_status: str | None = "RUNNING",
    ready: bool | None = True,
    ready_reason: str | None = None,
    app_message: str = "",
    deployments: Mapping[str, str] | None = None,
    extra_conditions: list[dict[str, Any]] | None = None,
    namespace: str = NAMESPACE,
    cluster: str = RAY_CLUSTER,
    generation: int = 1,
    observed_generation: int | None = 1,
    first_deploy: bool = False,
) -> dict[str, Any]:
    """A RayService with KubeRay v1.7 status.

    ``ready`` None leaves out the Ready condition (KubeRay has not reconciled yet); ``app_status``
    None leaves out the app. ``deployments`` maps deployment name → status (default: PD
    deployments all HEALTHY when RUNNING, UPDATING otherwise). Only fields of the ray.io/v1
    schema (tests/test_workload.py validates this fake against the CRD's closed schema).

    ``first_deploy``: the RayService's first Ray cluster before KubeRay promoted it. KubeRay
    creates every cluster as the *pending* one and promotes it to active only once Serve on it
    is ready (v1.7.0 ``rayservice_controller.go``: ``shouldPrepareNewCluster`` names it in
    ``pendingServiceStatus``, ``calculateStatus`` writes its apps to
    ``pendingServiceStatus.applicationStatuses``, ``reconcilePromotionAndServingStatus``
    promotes it; the tier's operator shows the pending cluster the same way), so the app's
    status is there, and the active status names no cluster.
    """
    status: dict[str, Any] = {}
    conditions: list[dict[str, Any]] = list(extra_conditions or [])
    seen = generation if observed_generation is None else observed_generation
    if ready is not None:
        reason = ready_reason or ("NonZeroServeEndpoints" if ready else "Initializing")
        conditions.insert(
            0,
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": reason,
                "message": _READY_MESSAGES.get(reason, ""),
                "lastTransitionTime": ts(ago=120),
                "observedGeneration": seen,
            },
        )
        # KubeRay sets UpgradeInProgress beside Ready: False/Initializing while initializing
        # (kept so when initializing times out), False/NoPendingCluster once a cluster is
        # active.
        if not any(c.get("type") == "UpgradeInProgress" for c in conditions):
            initializing = reason in ("Initializing", "InitializingTimeout")
            conditions.insert(
                1,
                {
                    "type": "UpgradeInProgress",
                    "status": "False",
                    "reason": "Initializing" if initializing else "NoPendingCluster",
                    "message": _INITIALIZING if initializing else _NO_PENDING,
                    "lastTransitionTime": ts(ago=120),
                    "observedGeneration": seen,
                },
            )
    if conditions:
        status["conditions"] = conditions
    if observed_generation is not None:
        status["observedGeneration"] = observed_generation
    if app_status is not None:
        if deployments is None:
            healthy = app_status == "RUNNING"
            deployments = {
                INGRESS_DEPLOYMENT: "HEALTHY" if healthy else "UPDATING",
                PREFILL_DEPLOYMENT: "HEALTHY" if healthy else "UPDATING",
                DECODE_DEPLOYMENT: "HEALTHY" if healthy else "UPDATING",
            }
        app_json: dict[str, Any] = {
            "status": app_status,
            "message": app_message,
            "serveDeploymentStatuses": {
                dep: {"status": dep_status, "message": ""}
                for dep, dep_status in deployments.items()
            },
        }
        where = "pendingServiceStatus" if first_deploy else "activeServiceStatus"
        status[where] = {"rayClusterName": cluster, "applicationStatuses": {app: app_json}}
    elif ready is not None:
        status["pendingServiceStatus"] = {"rayClusterName": cluster}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"serveConfigV2": "applications: []\n"},
        "status": status,
    }


def make_raycluster(
    name: str = RAY_CLUSTER,
    *,
    spec_hash: str | None = None,
    rayservice: str = RAYSERVICE,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """A RayCluster as KubeRay creates it for a RayService: the RayService's rayClusterConfig
    copied into ``spec``, so the head template keeps the ``ray-pd-eks/cluster-spec-hash``
    annotation of the spec it was created from (None: created before the annotation)."""
    head_template: dict[str, Any] = {"spec": {"containers": [{"name": "ray-head"}]}}
    if spec_hash is not None:
        head_template["metadata"] = {"annotations": {"ray-pd-eks/cluster-spec-hash": spec_hash}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "ray.io/originated-from-crd": "RayService",
                "ray.io/originated-from-cr-name": rayservice,
            },
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayService",
                    "name": rayservice,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "rayVersion": "2.58.0",
            "headGroupSpec": {"rayStartParams": {}, "template": head_template},
            "workerGroupSpecs": [],
        },
        "status": {"state": "ready"},
    }


def make_replica(
    node_id: str,
    node_ip: str,
    *,
    deployment: str,
    state: str = "RUNNING",
    worker_id: str = "",
    pid: int = 4242,
) -> dict[str, Any]:
    """One entry of a deployment's ``replicas`` in the dashboard's Serve details."""
    suffix = f"{abs(hash((deployment, node_id))) % 10**8:08d}"
    return {
        "node_id": node_id,
        "node_ip": node_ip,
        "actor_id": "f" * 32,
        "actor_name": f"SERVE_REPLICA::{APP_NAME}#{deployment}#{suffix}",
        "worker_id": worker_id,
        "log_file_path": f"/serve/replica_{APP_NAME}_{deployment}_{suffix}.log",
        "replica_id": suffix,
        "state": state,
        "pid": pid,
        "start_time_s": 1.0,
    }


def make_serve_applications(
    app: str = APP_NAME, deployments: Mapping[str, list[dict[str, Any]]] | None = None
) -> dict[str, Any]:
    """``GET /api/serve/applications/`` as the dashboard returns it (trimmed)."""
    return {
        # Ray 2.58 ServeActorDetails: the controller's log relative to Ray's log directory.
        "controller_info": {
            "node_id": RAY_HEAD_ID,
            "node_ip": HEAD_IP,
            "log_file_path": CONTROLLER_LOG,
        },
        "proxy_location": "EveryNode",
        "applications": {
            app: {
                "name": app,
                "route_prefix": "/",
                "status": "RUNNING",
                "message": "",
                "deployments": {
                    name: {"name": name, "status": "HEALTHY", "message": "", "replicas": replicas}
                    for name, replicas in (deployments or {}).items()
                },
            }
        },
    }


def make_pd_serve_applications(
    *,
    prefill: tuple[str, str] = (RAY_NODE_A, WORKER_IP_A),
    decode: tuple[str, str] = (
        RAY_NODE_B,
        WORKER_IP_B,
    ),
) -> dict[str, Any]:
    """Serve details with one prefill and one decode replica on the given (node_id, node_ip)."""
    return make_serve_applications(
        APP_NAME,
        {
            INGRESS_DEPLOYMENT: [make_replica(RAY_HEAD_ID, HEAD_IP, deployment=INGRESS_DEPLOYMENT)],
            PREFILL_DEPLOYMENT: [
                make_replica(*prefill, deployment=PREFILL_DEPLOYMENT, worker_id=PREFILL_WORKER_ID)
            ],
            DECODE_DEPLOYMENT: [
                make_replica(*decode, deployment=DECODE_DEPLOYMENT, worker_id=DECODE_WORKER_ID)
            ],
        },
    )


def make_aggregated_serve_applications(
    engines: Sequence[tuple[str, str]] = ((RAY_NODE_A, WORKER_IP_A), (RAY_NODE_B, WORKER_IP_B)),
) -> dict[str, Any]:
    """Serve details of a ``build_openai_app`` app: one engine replica per (node_id, node_ip)."""
    return make_serve_applications(
        APP_NAME,
        {
            INGRESS_DEPLOYMENT: [make_replica(RAY_HEAD_ID, HEAD_IP, deployment=INGRESS_DEPLOYMENT)],
            ENGINE_DEPLOYMENT: [
                make_replica(node_id, ip, deployment=ENGINE_DEPLOYMENT, pid=5000 + i)
                for i, (node_id, ip) in enumerate(engines)
            ],
        },
    )


def make_ray_node(node_id: str, ip: str, *, head: bool = False) -> dict[str, Any]:
    """A row of the state API's ``/api/v0/nodes``."""
    return {
        "node_id": node_id,
        "node_ip": ip,
        "is_head_node": head,
        "state": "ALIVE",
        "node_name": ip,
    }


def make_ray_actor(
    class_name: str, node_id: str, pid: int, *, state: str = "ALIVE", job_id: str = "01000000"
) -> dict[str, Any]:
    """A row of the state API's ``/api/v0/actors`` (Ray 2.58 ``ActorState``, no detail)."""
    return {
        "actor_id": f"{abs(hash((class_name, node_id, pid))) % 16**32:032x}",
        "class_name": class_name,
        "state": state,
        "job_id": job_id,
        "name": "",
        "node_id": node_id,
        "pid": pid,
        "ray_namespace": "serve",
    }


def provider_log(provider: str | None) -> str:
    """A vLLM GPU worker's stderr: NIXL's LIBFABRIC plugin logs (abseil, INFO) the provider it
    chose, as ``libfabric_topology.cpp`` in NIXL 1.3 writes it; None: no such line."""
    lines = ["INFO 11-30 01:02:03 [core.py:58] engine"]
    if provider == "efa":
        lines.append(
            "I1130 01:02:05.101010    5151 libfabric_topology.cpp:131] Discovered 4 EFA devices"
        )
    elif provider:
        lines.append(
            f"I1130 01:02:05.101010    5151 libfabric_topology.cpp:133] Discovered 1 {provider} "
            "devices (TCP fallback)"
        )
    return "\n".join(lines) + "\n"


# vLLM 0.26's byte buckets (nixl/stats.py NixlPromMetrics: 2**(10+i), i = 1, 3, .. 23).
NIXL_BYTE_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))


def count_transfer(counters: dict[str, float], size: float) -> None:
    """Count one transfer of ``size`` bytes in the byte histogram (keys ``le:<bound>``)."""
    for bound in (*NIXL_BYTE_BUCKETS, float("inf")):
        if size <= bound:
            counters[f"le:{bound}"] = counters.get(f"le:{bound}", 0.0) + 1


def _byte_histogram(counters: Mapping[str, float], labels: str) -> str:
    """The byte histogram as Ray 2.58 re-exports it: exact cumulative bucket counts, and a
    ``_sum`` rebuilt from bucket midpoints (open_telemetry_metric_recorder.py
    record_histogram_aggregated_batch; the +Inf bucket's "midpoint" is twice the last bound)."""
    bounds = (*NIXL_BYTE_BUCKETS, float("inf"))
    lines, total, previous, below = [], 0.0, 0.0, 0.0
    for bound in bounds:
        cumulative = counters.get(f"le:{bound}", 0.0)
        inf = bound == float("inf")
        midpoint = NIXL_BYTE_BUCKETS[-1] * 2 if inf else (previous + bound) / 2
        total += (cumulative - below) * midpoint
        le = "+Inf" if inf else f"{bound}"
        lines.append(f'ray_vllm_nixl_bytes_transferred_bucket{{{labels},le="{le}"}} {cumulative}')
        previous, below = bound, cumulative
    lines.append(f"ray_vllm_nixl_bytes_transferred_sum{{{labels}}} {total}")
    return "\n".join(lines) + "\n"


def nixl_metrics_text(counters: Mapping[str, float]) -> str:
    """A Ray worker pod's /metrics with vLLM's NIXL series as Ray 2.58 exports them (one label
    set per engine replica): the byte histogram's buckets are exact, its ``_sum`` is not."""
    labels = 'ReplicaId="r1",engine="0",model_name="qwen3.5-9b"'
    return (
        "# HELP ray_vllm_nixl_xfer_time_seconds Histogram of transfer duration.\n"
        "# TYPE ray_vllm_nixl_xfer_time_seconds histogram\n"
        f"ray_vllm_nixl_xfer_time_seconds_count{{{labels}}} {counters.get('xfer', 0.0)}\n"
        f"ray_vllm_nixl_xfer_time_seconds_sum{{{labels}}} {counters.get('xfer', 0.0) * 0.004}\n"
        "# TYPE ray_vllm_nixl_bytes_transferred histogram\n"
        f"ray_vllm_nixl_bytes_transferred_count{{{labels}}} {counters.get('xfer', 0.0)}\n"
        + _byte_histogram(counters, labels)
        + "# TYPE ray_vllm_nixl_num_failed_transfers_total counter\n"
        f"ray_vllm_nixl_num_failed_transfers_total{{{labels}}} {counters.get('failed', 0.0)}\n"
    )


def nixl_log(backend: str | None) -> str:
    """A vLLM GPU worker's stdout; with ``backend`` it contains NIXL's instantiation line."""
    lines = [
        "INFO 11-30 01:02:03 [core.py:58] Initializing a V1 LLM engine",
        "INFO 11-30 01:02:04 [nixl_connector.py:480] Initializing NIXL wrapper",
    ]
    if backend:
        lines.append(
            f"2026-11-30 01:02:05 NIXL INFO    _api.py:361 Backend {backend} was instantiated"
        )
    lines.append("INFO 11-30 01:02:09 [gpu_model_runner.py:1740] Model loading took 17.9 GiB")
    return "\n".join(lines) + "\n"


def chat_completion_body(text: str = COMPLETION_TEXT, model: str = MODEL_ID) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }


def make_secret(
    name: str, data: Mapping[str, str] | None = None, *, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """An Opaque Secret; ``data`` values are plain text (stored base64-encoded, as the API
    returns them)."""
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": "1001",
            "labels": {"app.kubernetes.io/part-of": "ray-pd-eks"},
        },
    }
    if data:
        secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return secret


def status_body(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Kubernetes ``Status`` object, the body of every API error, as the API server writes
    it (``metadata: {}``; ``details`` when the error names an object: apimachinery
    ``errors.go``). tests_cluster/test_fake_vs_real.py holds these bodies to the real ones."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = dict(details)
    return body


def status_details(resource: str, name: str = "", group: str = "", **more: Any) -> dict[str, Any]:
    """``Status.details`` of an error about one resource: ``kind`` is the resource (plural),
    ``name`` and ``group`` only when set (they are ``omitempty``)."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    details.update(more)
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def forbidden_body(user: str, method: str, path: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The API server's 403 for a request RBAC denies ``user``: the message and details it
    builds from the request's attributes (apiserver ``responsewriters/errors.go``
    ``forbiddenMessage``, apimachinery ``NewForbidden``), e.g. ``nodes is forbidden: User "u"
    cannot list resource "nodes" in API group "" at the cluster scope``."""
    from tests import rbac  # the request attributes as the API server derives them

    a = rbac.attributes(method, path, dict(query))
    if not a.resource_request:
        message = f'forbidden: User "{user}" cannot {a.verb} path "{a.path}"'
        return status_body(403, "Forbidden", message, {})
    resource = a.resource + (f"/{a.subresource}" if a.subresource else "")
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    why = (
        f'User "{user}" cannot {a.verb} resource "{resource}" in API group "{a.api_group}" {where}'
    )
    what = _qualified(a.resource, a.api_group) + (f' "{a.name}"' if a.name else "")
    details = status_details(a.resource, a.name, a.api_group)
    return status_body(403, "Forbidden", f"{what} is forbidden: {why}", details)


# --- the server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def authorization(self) -> str:
        return next((v for k, v in self.headers.items() if k.lower() == "authorization"), "")


@dataclass
class _Fault:
    kind: FaultKind
    path_contains: str
    remaining: int


@dataclass(frozen=True)
class ProxyRequest:
    """A request to a Service's (or pod's) ``.../<name>:<port>/proxy/<rest>`` subresource."""

    method: str
    service: str
    port: int
    rest: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class ProxyResponse:
    status: int
    body: bytes
    content_type: str = "application/json"


_CA: trustme.CA | None = None
_CERT: trustme.LeafCert | None = None
_LOG_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")
_PROXY_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):(\d+)/proxy/(.*)$")
_POD_PROXY_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/:]+):(\d+)/proxy/(.*)$")
_PROBE_CODE_RE = re.compile(r"access code exactly: ([A-Z0-9]+)\.")


def _shared_ca() -> tuple[trustme.CA, trustme.LeafCert]:
    # Key generation is the slow part of trustme; one CA per test session is enough.
    global _CA, _CERT
    if _CA is None or _CERT is None:
        _CA = trustme.CA()
        _CERT = _CA.issue_cert("127.0.0.1", "localhost")
    return _CA, _CERT


_Server = TypeVar("_Server", bound=socketserver.BaseServer)


def serve_tls(
    server_class: Callable[..., _Server], handler: type, owner: Any, cert: trustme.LeafCert
) -> tuple[_Server, threading.Thread]:
    """``server_class(address, handler, context, owner)`` on 127.0.0.1 (a free port), with a
    TLS context that presents ``cert``, serving on a daemon thread."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    httpd = server_class(("127.0.0.1", 0), handler, context, owner)
    # A short poll interval keeps shutdown() (hence fixture teardown) near-instant.
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    return httpd, thread


class FakeKubeApi:
    """The fake API server and its mutable state. Thread-safe for one test at a time."""

    def __init__(
        self,
        *,
        cluster_name: str = CLUSTER_NAME,
        namespace: str = NAMESPACE,
        rayservice: str = RAYSERVICE,
        app_name: str = APP_NAME,
        model_id: str = MODEL_ID,
    ) -> None:
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.rayservice_name = rayservice
        self.app_name = app_name
        self.model_id = model_id
        self.nodes: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.rayservice: dict[str, Any] | None = None
        # RayClusters by name (GET .../rayclusters/{name}); DELETE of the RayService is recorded
        # in ``requests`` and marks it as the API server does for a foreground delete.
        self.rayclusters: dict[str, dict[str, Any]] = {}
        self.serve_applications: dict[str, Any] | None = None
        # The Ray Jobs API on the head's dashboard (the drill's replica kill): each submission
        # by id, ending with ``job_status``/``job_message``/``job_logs``.
        self.ray_jobs: dict[str, dict[str, Any]] = {}
        self.job_status = "SUCCEEDED"
        self.job_message = "Job finished successfully."
        self.job_logs = "killed"
        self.ray_nodes: list[dict[str, Any]] = []
        # Rows of the state API's actor list (``make_ray_actor``); by node, the GPU nodes'
        # Serve replica and vLLM GPU worker (pids 4242 and 5151, as in ``_worker_logs``).
        self.ray_actors: list[dict[str, Any]] = []
        self.ray_logs: dict[str, dict[str, str]] = {}
        # Empty: not deployed (the lists are empty, as for a namespace that does not exist).
        self.warmup_daemonsets: list[dict[str, Any]] = []
        self.warmup_pods: list[dict[str, Any]] = []
        # Jobs by name (created through POST .../jobs) and each pod's container log text.
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pod_logs: dict[str, str] = {}
        # Secrets of the namespace by name; the Ray token the dashboard requires (None: none).
        self.secrets: dict[str, dict[str, Any]] = {
            RAY_TOKEN_SECRET: make_secret(RAY_TOKEN_SECRET, {"auth_token": RAY_TOKEN})
        }
        self.ray_token: str | None = RAY_TOKEN
        # The KV world behind serve-svc's chat completions (stage "serving"): while
        # ``chat_serving``, a POST answers with the probe's code (or ``chat_answer`` when set),
        # reports usage.prompt_tokens (characters / 4), and adds to the decode pod's NIXL
        # counters (``nixl_metrics``, by pod; served on pods/<pod>:8080/proxy/metrics).
        self.chat_serving = False
        self.chat_answer: str | None = None
        self.kv_decode_pod = WORKER_POD_B
        self.kv_transfers_per_chat = 1
        self.kv_bytes_per_token = 96 * 1024
        self.kv_failed_per_chat = 0
        self.nixl_metrics: dict[str, dict[str, float]] = {}
        self.requests: list[RecordedRequest] = []
        # Who the bearer token authenticates as (EKS names an access entry's assumed role so):
        # the user an injected 403 names.
        self.user = (
            "arn:aws:sts::111111111111:assumed-role/ReadinessIsCompleteServiceRole/readiness"
        )
        self._proxy: dict[tuple[str, int, str, str], ProxyResponse] = {}
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._httpd: _TlsServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        self._httpd, self._thread = serve_tls(_TlsServer, _Handler, self, _shared_ca()[1])
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def connections(self) -> int:
        """TLS connections accepted so far (a keep-alive client reuses one)."""
        assert self._httpd is not None, "call start() first"
        return self._httpd.connection_count

    def drop_connections(self) -> None:
        """Close the open connections, as an API server closes idle ones."""
        assert self._httpd is not None, "call start() first"
        self._httpd.drop_connections()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "call start() first"
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def ca_data(self) -> str:
        """The CA as EKS returns ``certificateAuthority.data``: base64 of the PEM."""
        return base64.b64encode(_shared_ca()[0].cert_pem.bytes()).decode("ascii")

    @staticmethod
    def other_ca_data() -> str:
        """A valid CA that did not sign this server's certificate (for the TLS-failure test)."""
        return base64.b64encode(trustme.CA().cert_pem.bytes()).decode("ascii")

    def props(self, **overrides: Any) -> dict[str, Any]:
        """``ResourceProperties`` pointing the readiness handler at this server."""
        props: dict[str, Any] = {
            "ServiceToken": "arn:aws:lambda:us-west-2:111111111111:function:provider",
            "ClusterName": self.cluster_name,
            "ClusterEndpoint": self.url,
            "ClusterCertificateAuthorityData": self.ca_data,
            "Namespace": self.namespace,
            "RayServiceName": self.rayservice_name,
            "ApplicationName": self.app_name,
            "ModelId": self.model_id,
            "KvBackend": "LIBFABRIC",
            "RayAuthSecret": RAY_TOKEN_SECRET,
            "ExpectedGpuNodes": "2",
            "ConfigHash": "0123abcd",
        }
        props.update(overrides)
        return props

    # -- state ------------------------------------------------------------------------------

    def set_proxy(
        self,
        service: str,
        port: int,
        path: str,
        *,
        status: int = 200,
        body: bytes | str | Mapping[str, Any] | list[Any] = b"",
        method: str = "GET",
        content_type: str | None = None,
    ) -> None:
        """Answer ``method`` on ``service:port/proxy/path`` (path without leading slash or
        query) with ``status`` and ``body`` (dict/list → JSON)."""
        if isinstance(body, bytes):
            data, ctype = body, "application/json"
        elif isinstance(body, str):
            data, ctype = body.encode(), "text/plain"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        with self._lock:
            self._proxy[(service, port, method.upper(), path.lstrip("/"))] = ProxyResponse(
                status, data, content_type or ctype
            )

    def fail_chat(self, status: int, body: Any) -> None:
        """Serve answers every chat completion with ``status`` and ``body`` (vLLM 0.26 answers a
        failed KV load with HTTP 500)."""
        self.set_proxy(
            self.serve_service, 8000, "v1/chat/completions", method="POST", status=status, body=body
        )

    def clear_proxy(self, service: str, port: int, path: str, *, method: str = "GET") -> None:
        with self._lock:
            self._proxy.pop((service, port, method.upper(), path.lstrip("/")), None)

    def inject_fault(self, kind: FaultKind, *, times: int = 1, path_contains: str = "") -> None:
        """Fail the next ``times`` requests whose path contains ``path_contains``: an HTTP
        status (500, 503, 429 with ``Retry-After: 0``, 401, 403 …) or ``"reset"`` (TCP RST
        after the request is read)."""
        with self._lock:
            self._faults.append(_Fault(kind, path_contains, times))

    def requests_to(self, path_contains: str, method: str | None = None) -> list[RecordedRequest]:
        return [
            r
            for r in list(self.requests)
            if path_contains in r.path and (method is None or r.method == method)
        ]

    @property
    def serve_service(self) -> str:
        return f"{self.rayservice_name}-serve-svc"

    @property
    def head_service(self) -> str:
        return f"{self.rayservice_name}-head-svc"

    def set_nixl_backend(
        self, prefill: str | None, decode: str | None = "same", *, provider: str | None = "efa"
    ) -> None:
        """Rewrite both GPU workers' logs so NIXL reports these backends (None: no line) and,
        for LIBFABRIC, the libfabric ``provider`` (None: no provider line)."""
        decode_backend = prefill if decode == "same" else decode
        for node, worker, backend in (
            (RAY_NODE_A, PREFILL_WORKER_ID, prefill),
            (RAY_NODE_B, DECODE_WORKER_ID, decode_backend),
        ):
            errors = provider_log(provider if backend == "LIBFABRIC" else None)
            self.ray_logs[node] = _worker_logs(worker, nixl_log(backend), errors)

    def set_aggregated(
        self,
        engines: Sequence[tuple[str, str]] = (
            (RAY_NODE_A, WORKER_IP_A),
            (RAY_NODE_B, WORKER_IP_B),
        ),
    ) -> None:
        """Turn the current (serving) state into a ``servingMode: aggregated`` app: the
        RayService's serveConfigV2 names ``build_openai_app``, its deployments are the ingress
        and one engine deployment, Serve lists one engine replica per (node_id, node_ip), and
        no worker log mentions NIXL."""
        rs = make_rayservice(
            deployments={INGRESS_DEPLOYMENT: "HEALTHY", ENGINE_DEPLOYMENT: "HEALTHY"}
        )
        rs["spec"]["serveConfigV2"] = (
            f"applications:\n- name: {self.app_name}\n"
            "  import_path: ray.serve.llm:build_openai_app\n  route_prefix: /\n"
        )
        self.rayservice = rs
        self.serve_applications = make_aggregated_serve_applications(engines)
        self.set_nixl_backend(None)

    def set_stage(self, stage: str) -> None:
        """Replace all state with a coherent point of a deploy, in order:

        ``nodes-not-ready``  GPU nodes joined but NotReady, no EFA yet; workers Pending
                             (Unschedulable, Insufficient nvidia.com/gpu); RayService Initializing.
        ``deploying``        nodes Ready with GPU+EFA for an hour; pods Running on distinct
                             nodes; Ready=False/Initializing, app DEPLOYING.
        ``running``          Ready=True, app RUNNING; dashboard shows prefill on GPU_NODE_A's
                             pod and decode on GPU_NODE_B's; serve-svc has no endpoints yet (503).
        ``models``           ``/v1/models`` lists the model; chat completions still 503.
        ``serving``          chat completions answer; worker logs say LIBFABRIC was instantiated.
        """
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
        index = STAGES.index(stage)
        with self._lock:
            self._proxy.clear()
        self.events = []
        self.serve_applications = None
        self.ray_nodes = []
        self.ray_actors = []
        self.ray_logs = {}
        self.chat_serving = False
        self.chat_answer = None
        self.nixl_metrics = {}
        system = make_node(SYSTEM_NODE, role="system", gpus=0, efa=0, instance_type="m7i.xlarge")
        head = make_pod(HEAD_POD, node_type="head", node=SYSTEM_NODE, ip=HEAD_IP)
        if index == 0:
            self.nodes = [
                system,
                make_node(GPU_NODE_A, ready=False, efa=0, ready_ago=20),
                make_node(GPU_NODE_B, ready=False, gpus=0, efa=0, ready_ago=20),
            ]
            message = (
                "0/3 nodes are available: 1 node(s) had untolerated taint, "
                "2 Insufficient nvidia.com/gpu."
            )
            self.pods = [
                head,
                make_pod(WORKER_POD_A, unschedulable_message=message, unschedulable_ago=60),
                make_pod(WORKER_POD_B, unschedulable_message=message, unschedulable_ago=60),
            ]
            self.events = [
                make_event(WORKER_POD_A, "FailedScheduling", message, ago=30),
                make_event(WORKER_POD_B, "FailedScheduling", message, ago=30),
            ]
            self.rayservice = make_rayservice(ready=False, app_status=None)
            return
        self.nodes = [system, make_node(GPU_NODE_A), make_node(GPU_NODE_B)]
        self.pods = [
            head,
            make_pod(WORKER_POD_A, node=GPU_NODE_A, ip=WORKER_IP_A),
            make_pod(WORKER_POD_B, node=GPU_NODE_B, ip=WORKER_IP_B),
        ]
        if index == 1:
            # Serve deploys on the first cluster, which KubeRay promotes only once it is ready.
            self.rayservice = make_rayservice(
                ready=False, app_status="DEPLOYING", first_deploy=True
            )
            return
        self.rayservice = make_rayservice(ready=True, app_status="RUNNING")
        self.serve_applications = make_pd_serve_applications()
        self.ray_nodes = [
            make_ray_node(RAY_HEAD_ID, HEAD_IP, head=True),
            make_ray_node(RAY_NODE_A, WORKER_IP_A),
            make_ray_node(RAY_NODE_B, WORKER_IP_B),
        ]
        self.ray_actors = [
            make_ray_actor("ServeController", RAY_HEAD_ID, 310),
            *(
                make_ray_actor(name, node, pid)
                for node in (RAY_NODE_A, RAY_NODE_B)
                for name, pid in (("ServeReplica:qwen", 4242), ("RayWorkerWrapper", 5151))
            ),
        ]
        self.set_nixl_backend(None)
        self.nixl_metrics = {
            WORKER_POD_A: {"xfer": 0.0, "bytes": 0.0, "failed": 0.0},
            WORKER_POD_B: {"xfer": 0.0, "bytes": 0.0, "failed": 0.0},
        }
        if index >= 3:
            models = {"object": "list", "data": [{"id": self.model_id, "object": "model"}]}
            self.set_proxy(self.serve_service, 8000, "v1/models", body=models)
        if index >= 4:
            self.chat_serving = True
            self.set_nixl_backend("LIBFABRIC")

    # -- request handling (called from server threads) --------------------------------------

    def _take_fault(self, path: str) -> FaultKind | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.path_contains in path:
                    fault.remaining -= 1
                    return fault.kind
        return None

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> ProxyResponse:
        ns = self.namespace
        secret = re.match(rf"^/api/v1/namespaces/{re.escape(ns)}/secrets/([^/]+)$", path)
        if secret and method in ("GET", "PATCH"):
            return self._secret(method, secret.group(1), body)
        jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
        if method == "POST" and path == jobs:
            return self._create_job(body)
        if path.startswith(jobs + "/") and method in ("GET", "DELETE"):
            name = path[len(jobs) + 1 :]
            policy = query.get("propagationPolicy")
            with self._lock:
                job = self.jobs.get(name)
                if job is not None and method == "DELETE":
                    del self.jobs[name]
                    if policy in ("Background", "Foreground"):
                        # The garbage collector removes the Job's pods.
                        self.pods = [p for p in self.pods if not _owned_by(p, name)]
            if job is None:
                return _not_found("jobs", name, "batch")
            if method == "DELETE" and policy == "Background":
                # Deleted at once: the API server answers a Status, not the object.
                uid = job["metadata"].get("uid", "")
                return _json(200, _deleted(status_details("jobs", name, "batch", uid=uid)))
            return _json(200, job)
        pod_path = re.match(rf"^/api/v1/namespaces/{re.escape(ns)}/pods/([^/:]+)$", path)
        if method == "DELETE" and pod_path:
            # The pod goes (its controller, KubeRay, would create a replacement: the test's part).
            name = pod_path.group(1)
            with self._lock:
                found = [p for p in self.pods if p["metadata"]["name"] == name]
                self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
                self.nixl_metrics.pop(name, None)
            if not found:
                return _not_found("pods", name)
            return _json(200, found[0])
        log = _LOG_RE.match(path)
        if method == "GET" and log and log.group(1) == ns:
            return self._pod_log(log.group(2), query)
        if method == "GET" and path == "/api/v1/nodes":
            items = [n for n in self.nodes if _matches(n, query.get("labelSelector", ""))]
            return _json(200, _list("NodeList", items))
        if method == "GET" and path == f"/api/v1/namespaces/{ns}/pods":
            items = [p for p in self.pods if _matches(p, query.get("labelSelector", ""))]
            return _json(200, _list("PodList", items))
        if method == "GET" and path == f"/api/v1/namespaces/{ns}/events":
            selector = query.get("fieldSelector", "")
            items = [e for e in self.events if _field_matches(e, selector)]
            return _json(200, _list("EventList", items))
        if method == "GET":
            if path == f"/apis/apps/v1/namespaces/{WARMUP_NAMESPACE}/daemonsets":
                return _json(200, _list("DaemonSetList", self.warmup_daemonsets))
            if path == f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods":
                return _json(200, _list("PodList", self.warmup_pods))
        if method == "GET" and path == (
            f"/apis/ray.io/v1/namespaces/{ns}/rayservices/{self.rayservice_name}"
        ):
            if self.rayservice is None:
                return _not_found("rayservices", self.rayservice_name, "ray.io")
            return _json(200, self.rayservice)
        rayservice_path = f"/apis/ray.io/v1/namespaces/{ns}/rayservices/{self.rayservice_name}"
        if method == "DELETE" and path == rayservice_path:
            if self.rayservice is None:
                return _not_found("rayservices", self.rayservice_name, "ray.io")
            metadata = self.rayservice.setdefault("metadata", {})
            metadata.setdefault("deletionTimestamp", ts())
            metadata["finalizers"] = ["foregroundDeletion"]
            return _json(200, self.rayservice)
        if method == "GET" and path.startswith(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.rayclusters:
                return _not_found("rayclusters", name, "ray.io")
            return _json(200, self.rayclusters[name])
        pod_proxy = _POD_PROXY_RE.match(path)
        if pod_proxy and pod_proxy.group(1) == ns and method == "GET":
            return self._pod_metrics(
                pod_proxy.group(2), int(pod_proxy.group(3)), pod_proxy.group(4)
            )
        proxy = _PROXY_RE.match(path)
        if proxy and proxy.group(1) == ns:
            return self._route_proxy(
                ProxyRequest(
                    method,
                    proxy.group(2),
                    int(proxy.group(3)),
                    proxy.group(4),
                    query,
                    headers or {},
                    body,
                )
            )
        return _no_route()

    def _create_job(self, body: bytes) -> ProxyResponse:
        job = json.loads(body or b"{}")
        if job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
            return _json(400, status_body(400, "BadRequest", "the object is not a batch/v1 Job"))
        meta = job.setdefault("metadata", {})
        name = meta.get("name", "")
        if meta.get("namespace", self.namespace) != self.namespace:
            return _json(
                400,
                status_body(400, "BadRequest", "the namespace of the object does not match"),
            )
        invalid = _invalid_job(name)
        if invalid is not None:
            return _json(422, invalid)
        with self._lock:
            if name in self.jobs:
                return _json(
                    409,
                    status_body(
                        409,
                        "AlreadyExists",
                        f'jobs.batch "{name}" already exists',
                        status_details("jobs", name, "batch"),
                    ),
                )
            meta.update(
                namespace=self.namespace,
                uid=f"{abs(hash(name)):032x}"[:32],
                creationTimestamp=ts(),
                generation=1,
            )
            job["status"] = {}
            self.jobs[name] = job
        return _json(201, job)

    def _pod_log(self, name: str, query: dict[str, str]) -> ProxyResponse:
        pod = next((p for p in self.pods if p["metadata"]["name"] == name), None)
        if pod is None:
            return _not_found("pods", name)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        container = query.get("container") or (statuses[0]["name"] if statuses else "")
        state: dict[str, Any] = next((c["state"] for c in statuses if c["name"] == container), {})
        if "waiting" in state or not statuses:
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            return _json(
                400,
                status_body(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                ),
            )
        return ProxyResponse(200, self.pod_logs.get(name, "").encode(), "text/plain")

    def _secret(self, method: str, name: str, body: bytes) -> ProxyResponse:
        with self._lock:
            current = self.secrets.get(name)
            if current is None:
                return _not_found("secrets", name)
            if method == "GET":
                return _json(200, current)
            patch = json.loads(body or b"{}")
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            version = current["metadata"]["resourceVersion"]
            if wanted and wanted != version:
                message = (
                    f'Operation cannot be fulfilled on secrets "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                )
                return _json(
                    409, status_body(409, "Conflict", message, status_details("secrets", name))
                )
            updated = json.loads(json.dumps(current))
            for key, value in (patch.get("data") or {}).items():
                data = updated.setdefault("data", {})
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            updated["metadata"]["resourceVersion"] = str(int(version) + 1)
            self.secrets[name] = updated
            return _json(200, updated)

    def _pod_metrics(self, pod: str, port: int, rest: str) -> ProxyResponse:
        if not any(p["metadata"]["name"] == pod for p in self.pods):
            return _not_found("pods", pod)
        with self._lock:
            counters = self.nixl_metrics.get(pod)
        if port != 8080 or rest != "metrics" or counters is None:
            return _json(
                503,
                status_body(
                    503,
                    "ServiceUnavailable",
                    f"error trying to reach service: dial tcp {pod}:{port}: connect: "
                    "connection refused",
                ),
            )
        return ProxyResponse(200, nixl_metrics_text(counters).encode(), "text/plain")

    def _chat(self, body: bytes) -> ProxyResponse:
        """A chat completion of the serving world: the answer holds the probe's code when the
        KV cache arrived intact (``chat_answer`` None), and the decode pod counts the pull."""
        request = json.loads(body or b"{}")
        content = " ".join(str(m.get("content", "")) for m in request.get("messages") or [])
        found = _PROBE_CODE_RE.search(content)
        text = self.chat_answer
        if text is None:
            text = f"The access code is {found.group(1)}." if found else COMPLETION_TEXT
        prompt_tokens = max(1, len(content) // 4)
        with self._lock:
            counters = self.nixl_metrics.get(self.kv_decode_pod)
            if counters is not None:
                counters["xfer"] += self.kv_transfers_per_chat
                counters["failed"] += self.kv_failed_per_chat
                if self.kv_transfers_per_chat:
                    moved = prompt_tokens * self.kv_bytes_per_token
                    counters["bytes"] += moved
                    for _ in range(self.kv_transfers_per_chat):
                        count_transfer(counters, moved / self.kv_transfers_per_chat)
        answer = chat_completion_body(text, model=self.model_id)
        answer["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": 8}
        return _json(200, answer)

    def _route_proxy(self, request: ProxyRequest) -> ProxyResponse:
        service, port = request.service, request.port
        if self.rayservice is None and service in (self.head_service, self.serve_service):
            # KubeRay creates <rs>-head-svc and <rs>-serve-svc for a RayService whose Serve
            # is ready; without one the real API server's proxy answers 404 for the Service
            # (tests_cluster/test_fake_vs_real.py compares the two).
            return _not_found("services", service)
        if service == self.head_service and port == 8265 and self.ray_token is not None:
            # Ray's token middleware (http_token_authentication.py) in front of every route.
            given = next(
                (v for k, v in request.headers.items() if k.lower() == "x-ray-authorization"), ""
            )
            if not given:
                return ProxyResponse(
                    401, b"Unauthorized: Missing authentication token", "text/plain"
                )
            if given != f"Bearer {self.ray_token}":
                return ProxyResponse(403, b"Forbidden: Invalid authentication token", "text/plain")
        with self._lock:
            explicit = self._proxy.get((service, port, request.method, request.rest))
        if explicit is not None:
            return explicit
        if (
            self.chat_serving
            and service == self.serve_service
            and port == 8000
            and request.method == "POST"
            and request.rest == "v1/chat/completions"
        ):
            return self._chat(request.body)
        if service == self.head_service and port == 8265 and request.rest.startswith("api/jobs/"):
            return self._jobs(request.method, request.rest, request.body)
        if service == self.head_service and port == 8265 and request.method == "GET":
            dashboard = self._dashboard(request.rest, request.query)
            if dashboard is not None:
                return dashboard
        return _json(
            503,
            status_body(
                503, "ServiceUnavailable", f'no endpoints available for service "{service}"'
            ),
        )

    def _jobs(self, method: str, rest: str, body: bytes) -> ProxyResponse:
        """Ray 2.58's Jobs API (``job_head.py``): a submission answers its ids, a job's details
        its status and message, ``/logs`` its log."""
        if method == "POST" and rest == "api/jobs/":
            job = json.loads(body or b"{}")
            sid = job.get("submission_id") or f"raysubmit_{len(self.ray_jobs)}"
            self.ray_jobs[sid] = job
            return _json(200, {"job_id": None, "submission_id": sid})
        sid, _, tail = rest.removeprefix("api/jobs/").partition("/")
        if method != "GET" or sid not in self.ray_jobs:
            return ProxyResponse(404, f"Job {sid} does not exist.".encode(), "text/plain")
        if tail == "logs":
            return _json(200, {"logs": self.job_logs})
        job = self.ray_jobs[sid]
        details = {"status": self.job_status, "message": self.job_message}
        return _json(200, {"submission_id": sid, "entrypoint": job.get("entrypoint"), **details})

    def _dashboard(self, rest: str, query: Mapping[str, str]) -> ProxyResponse | None:
        if rest == "api/serve/applications/":
            if self.serve_applications is None:
                return None
            return _json(200, self.serve_applications)
        if rest == "api/v0/nodes":
            rows = self.ray_nodes
            listing = {"total": len(rows), "num_after_truncation": len(rows), "result": rows}
            return _json(200, {"result": True, "msg": "", "data": {"result": listing}})
        if rest == "api/v0/actors":
            rows = [
                a
                for a in self.ray_actors
                if query.get("filter_keys") != "state"
                or str(a.get("state", "")).lower() == query.get("filter_values", "").lower()
            ][: int(query.get("limit", "100"))]
            listing = {"total": len(self.ray_actors), "result": rows}
            return _json(200, {"result": True, "msg": "", "data": {"result": listing}})
        node_id = query.get("node_id", "")
        if rest == "api/v0/logs":
            if node_id not in self.ray_logs:
                return _json(500, {"result": False, "msg": f"node {node_id} not found", "data": {}})
            return _json(
                200,
                {
                    "result": True,
                    "msg": "",
                    "data": {"result": _categorise(self.ray_logs[node_id])},
                },
            )
        if rest == "api/v0/logs/file":
            text = self.ray_logs.get(node_id, {}).get(query.get("filename", ""))
            if text is None:
                # Ray 2.58: the agent's FileNotFoundError travels as gRPC metadata
                # (log_agent.StreamLog, LOG_GRPC_ERROR), the state manager raises it as a
                # ValueError on the first chunk and state_head.get_logs answers 500 with it.
                missing = f"A file is not found at: {RAY_LOG_DIR}/{query.get('filename', '')}"
                return ProxyResponse(500, missing.encode(), "text/plain")
            # Ray 2.58's log agent (log_agent.StreamLog): 0 or absent means 1000; -1 the
            # whole file from offset 0; N the last N lines.
            lines = int(query.get("lines", "1000")) or 1000
            tail = text.splitlines(True) if lines == -1 else text.splitlines(True)[-lines:]
            return ProxyResponse(200, "".join(tail).encode(), "text/plain")
        return None


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _owned_by(pod: Mapping[str, Any], job: str) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL) == job


def make_job_pod(
    job: Mapping[str, Any],
    *,
    state: Literal["pending", "waiting", "running", "terminated"] = "running",
    reason: str = "",
    message: str = "",
    exit_code: int = 0,
    node: str = SYSTEM_NODE,
) -> dict[str, Any]:
    """The pod the Job controller creates from ``job``'s template: its labels plus the
    controller's ``batch.kubernetes.io/job-name``/``job-name``, owned by the Job.

    ``pending`` is Unschedulable with ``message``; ``waiting`` has the container waiting with
    ``reason`` (e.g. ErrImagePull); ``terminated`` ended with ``exit_code`` (reason Completed or
    Error unless given, e.g. OOMKilled).
    """
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    container = template["spec"]["containers"][0]["name"]
    labels = {**(template.get("metadata") or {}).get("labels", {})}
    labels |= {JOB_NAME_LABEL: name, "job-name": name}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-x7k2p",
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True}
            ],
            "creationTimestamp": ts(ago=60),
        },
        "spec": {**template["spec"]},
        "status": {"phase": "Pending", "conditions": []},
    }
    if state == "pending":
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": ts(ago=600),
            }
        ]
        return pod
    pod["spec"]["nodeName"] = node
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    if state == "waiting":
        status = make_container_status(container, "waiting", reason=reason, message=message)
    elif state == "terminated":
        status = make_container_status(
            container, "terminated", reason=reason, message=message, exit_code=exit_code
        )
        pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    else:
        status = make_container_status(container)
        pod["status"]["phase"] = "Running"
    pod["status"]["containerStatuses"] = [status]
    return pod


def finish_job(job: dict[str, Any], *, succeeded: bool, reason: str = "") -> None:
    """Set a Job's terminal status as the Job controller does (Kubernetes 1.31+: the
    SuccessCriteriaMet/FailureTarget condition, then Complete/Failed)."""
    now = ts()
    if succeeded:
        job["status"] = {
            "succeeded": 1,
            "startTime": ts(ago=300),
            "completionTime": now,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ],
        }
        return
    why = reason or "BackoffLimitExceeded"
    message = {
        "BackoffLimitExceeded": "Job has reached the specified backoff limit",
        "DeadlineExceeded": "Job was active longer than specified deadline",
    }.get(why, why)
    job["status"] = {
        "failed": 1,
        "startTime": ts(ago=300),
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": why, "message": message},
            {
                "type": "Failed",
                "status": "True",
                "reason": why,
                "message": message,
                "lastTransitionTime": now,
            },
        ],
    }


def _worker_logs(worker_id: str, nixl_text: str, engine_errors: str = "") -> dict[str, str]:
    """One GPU node's Ray log files, as the log API lists them: the Serve replica's worker
    files, its vLLM GPU worker actor's (same job, another worker id; NIXL prints "Backend ...
    was instantiated" to its stdout, so ``.out``), and a pool of idle workers whose ``.err``
    files outnumber what a reader that starts with ``.err`` would open."""
    gpu_worker = worker_id[::-1]
    files = {
        "raylet.out": "raylet started\n",
        f"worker-{worker_id}-01000000-4242.err": "INFO replica starting the vLLM engine\n",
        f"worker-{worker_id}-01000000-4242.out": "replica started\n",
        f"worker-{gpu_worker}-01000000-5151.err": engine_errors
        or "INFO 11-30 01:02:03 [core.py:58] engine\n",
        f"worker-{gpu_worker}-01000000-5151.out": nixl_text,
        "python-core-worker-abc_4242.log": "core worker log\n",
    }
    for index in range(14):
        files[f"worker-{index:02x}{'9a' * 27}-ffffffff-{3100 + index}.err"] = "idle worker\n"
    return files


def _categorise(files: Mapping[str, str]) -> dict[str, list[str]]:
    categories: dict[str, list[str]] = {}
    for name in files:
        if name.startswith("worker-"):
            key = "worker_err" if name.endswith(".err") else "worker_out"
        elif name.startswith("raylet"):
            key = "raylet"
        else:
            key = "internal"
        categories.setdefault(key, []).append(name)
    return categories


def _field_matches(obj: Mapping[str, Any], selector: str) -> bool:
    """A field selector as the API server applies it to Events: ``a.b=v`` terms, all of them
    (``type``, ``reason``, ``involvedObject.kind``, ``involvedObject.name`` ...)."""
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        current: Any = obj
        for part in key.split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
        if str(current if current is not None else "") != value:
            return False
    return True


def _matches(obj: Mapping[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}


def _json(status: int, body: Any) -> ProxyResponse:
    return ProxyResponse(status, json.dumps(body).encode())


def _not_found(resource: str, name: str, group: str = "") -> ProxyResponse:
    """404 for one named object, as the API server words it: ``pods "x" not found``."""
    message = f'{_qualified(resource, group)} "{name}" not found'
    return _json(404, status_body(404, "NotFound", message, status_details(resource, name, group)))


def _deleted(details: Mapping[str, Any]) -> dict[str, Any]:
    """The API server's answer to a DELETE that removed the object at once."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": dict(details),
    }


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _invalid_job(name: str) -> dict[str, Any] | None:
    """The 422 the API server answers for a Job whose name it refuses, or None. Two of its
    rules, as the real one words them: the name is an RFC 1123 subdomain, and at most 63 bytes
    because the Job controller's ``job-name`` and ``batch.kubernetes.io/job-name`` labels on
    the pod template carry it (both refused, under one message)."""
    if not _DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        field, why = "metadata.name", _SUBDOMAIN_RULE
        causes = 1
    elif len(name) > 63:
        field, why = "spec.template.labels", "must be no more than 63 bytes"
        causes = 2
    else:
        return None
    error = f'Invalid value: "{name}": {why}'
    details = status_details(
        "Job",
        name,
        "batch",
        causes=[{"reason": "FieldValueInvalid", "message": error, "field": field}] * causes,
    )
    message = f'Job.batch "{name}" is invalid: {field}: {error}'
    return status_body(422, "Invalid", message, details)


def _no_route() -> ProxyResponse:
    return _json(
        404, status_body(404, "NotFound", "the server could not find the requested resource", {})
    )


class _TlsServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[http.server.BaseHTTPRequestHandler],
        context: ssl.SSLContext,
        api: FakeKubeApi,
    ) -> None:
        super().__init__(address, handler)
        self.context = context
        self.api = api
        # Connections kept open between requests (HTTP/1.1 keep-alive), closed on shutdown so
        # that no handler thread outlives its server waiting for a client's next request.
        self.connections: set[ssl.SSLSocket] = set()
        self.connection_count = 0
        self._connections_lock = threading.Lock()

    def shutdown(self) -> None:
        """Stop serve_forever at once rather than at its next poll (up to 10 ms, a second over
        the suite's 230 servers): the stop is requested, a connection wakes the loop's select,
        and the base class waits for the loop to end. The request flag is private to
        socketserver.BaseServer (CPython 3.11 Lib/socketserver.py, serve_forever)."""
        self._BaseServer__shutdown_request = True
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", self.server_port), timeout=1).close()
        super().shutdown()
        self.drop_connections()

    def drop_connections(self) -> None:
        """Close every open connection, as a server does with idle ones."""
        with self._connections_lock:
            open_now = list(self.connections)
        for tls in open_now:
            with contextlib.suppress(OSError):
                tls.shutdown(socket.SHUT_RDWR)
        for _ in range(100):  # their handler threads see the end and close them
            with self._connections_lock:
                if not self.connections & set(open_now):
                    return
            time.sleep(0.01)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # TLS is wrapped per connection in its worker thread, so a client that rejects our
        # certificate (the wrong-CA test) fails its own handshake without stalling others.
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with self._connections_lock:
            self.connections.add(tls)
            self.connection_count += 1
        try:
            _Handler(tls, client_address, self)
        finally:
            with self._connections_lock:
                self.connections.discard(tls)
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # resets and aborted handshakes are the point of some tests


class KeepAliveHandler(http.server.BaseHTTPRequestHandler):
    """A fake server's handler: HTTP/1.1 (a client may send its next request on the same
    connection; every response has a Content-Length or is chunked), no access log, and each
    request method it answers handed to ``_serve``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        raise NotImplementedError


class _Handler(KeepAliveHandler):
    server: _TlsServer
    # Keep-alive, as the API server answers. Without Nagle's algorithm, as Go's net/http: the
    # body, written after the headers, would otherwise wait out the client's delayed ACK (40 ms
    # a request).
    disable_nagle_algorithm = True

    def do_DELETE(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def _serve(self) -> None:
        api = self.server.api
        split = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        api.requests.append(
            RecordedRequest(self.command, split.path, query, dict(self.headers.items()), body)
        )
        fault = api._take_fault(split.path)
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if isinstance(fault, int):
            if fault == 403:
                # Worded for this request and ``api.user``, as RBAC's denial is.
                self._send(_json(403, forbidden_body(api.user, self.command, split.path, query)))
                return
            reasons = {401: "Unauthorized", 429: "TooManyRequests"}
            message = "Unauthorized" if fault == 401 else f"injected fault {fault}"
            self._send(
                _json(fault, status_body(fault, reasons.get(fault, "InternalError"), message))
            )
            return
        authorization = self.headers.get("Authorization", "")
        if not authorization.startswith("Bearer k8s-aws-v1."):
            self._send(_json(401, status_body(401, "Unauthorized", "Unauthorized")))
            return
        self._send(api._route(self.command, split.path, query, dict(self.headers.items()), body))

    def _send(self, response: ProxyResponse) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        if response.status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        # A reader that stops early (a log's beginning) closes its end mid-body.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.wfile.write(response.body)
