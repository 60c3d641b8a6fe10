"""``coldstart``: how long each GPU node really took, step by step, beside the model.

``scripts/critical_path.py`` models a new GPU node's way to serving (``timeline.scale_out``:
boot and join, the Ray image pull, the weights, the engine, Serve) from rates and sizes that
were read, not measured. This command measures the steps a node has already been through from
what Kubernetes and EC2 keep about it, so a user sees where their minutes went and how far the
model is off:

* **launch**: the instance's ``LaunchTime`` (``ec2:DescribeInstances``, the instance named by
  the node's ``providerID``); without that permission, the node's registration
  (``metadata.creationTimestamp``) stands in, and the line says so;
* **joined**: the node's ``Ready`` condition, ``lastTransitionTime`` (the last change: a node
  that was NotReady since shows the later time);
* **Ray image**: the ``image-prepull`` pod on the node (the DaemonSet that pulls the Ray image
  as the node joins): from its sandbox (``PodReadyToStartContainers``: the kubelet pulls a
  pod's images after its sandbox exists) to its container's start. The kubelet's own figure
  for the pull, "Successfully pulled image ... in 1m32.5s (... including waiting). Image size:
  N bytes" (kubelet ``images.go``), is shown too while its ``Pulled`` event lasts (EKS keeps
  events for an hour);
* **weights**: the ``model-prefetch`` pod's download container (``prefetch-model`` from
  Hugging Face, ``stage-model`` from S3): its start to its exit;
* **Ray worker**: the ``ray-worker`` container of the Ray worker pod on the node, when it
  started;
* **engine**: Kubernetes keeps no timestamp of it, Serve's logs do. The engine replica on the
  node (Serve's replica details, ``node_ip`` the worker pod's IP) logs "Started initializing
  replica." before it runs the deployment's constructor and "Finished initializing replica."
  after it (Ray 2.58 ``ray/serve/_private/replica.py``, ``initialize_callable``); Ray Serve
  LLM's ``LLMServer.__init__`` awaits the vLLM engine's start (``llm_server.py``), so the two
  lines bracket it. Read through the Ray dashboard's log API, the head of the replica's log
  (``log_file_path``) only. The real engine replicas (Prefill, Decode, LLMServer) of Ray 2.58
  with vLLM 0.26 stop writing that log before the second line (seen on the serving tier and on
  a GPU), so the step then ends at the first line plus the controller's figure for the
  constructor ("Replica constructor, reconfigure method, and initial health check took N s");
* **serving**: the Serve controller's "Replica(id='...', ...) started successfully on node
  ..." (``deployment_state.py``), logged when the replica turns RUNNING, after its reconfigure
  and first health check: the last lines of the controller's log (``controller_info``).

Serve writes its times in the process's local time; the app pins the Ray pods' ``TZ`` to UTC
(``pd_constructs/serving/workload.py``, ``LOG_CLOCK_ENV``). Only durable status fields and logs are
read (the events are a bonus), so the command works on a node of any age. The minutes "from
launch" describe a node added to a running cluster (a scale-out, a replaced node); on the
first deploy's nodes the warm-up starts when the workload stack applies it, so there only
the durations compare with the model.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore import exceptions as bce

from ray_pd_eks import lambda_code, timeline
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_OK, CheckFailed, UsageError
from ray_pd_eks.cli.output import table
from ray_pd_eks.cli.status import WARMUP_NAMESPACE
from ray_pd_eks.config import AppConfig

NAME = "coldstart"
HELP = "measure each GPU node's launch, join, image, weights, engine and serving vs the model"
DESCRIPTION = """\
For each GPU node (role=gpu-worker), or the one --node names, measure from what Kubernetes
and EC2 keep: the instance's launch (ec2:DescribeInstances; else the node's registration),
the node's Ready, the Ray image pull of the image-prepull pod, the weights' download of the
model-prefetch pod, the start of the Ray worker container, the vLLM engine's start and the
replica's first RUNNING (both from Serve's logs through the Ray dashboard), in minutes from
the launch, with the modelled minutes of the same steps (scripts/critical_path.py,
scale-out) beside them.

Exit 0 when at least one GPU node was measured, 1 when there is none (or not the one
--node names), 2 for a --log-lines below 1."""

PREPULL, PREFETCH = "image-prepull", "model-prefetch"
PREPULL_CONTAINER = "hold-image"
DOWNLOAD_CONTAINERS = ("prefetch-model", "stage-model")
WORKER_CONTAINER = "ray-worker"
# The kubelet's event after a pull (pkg/kubelet/images/image_manager.go): the pull's own time,
# the time including the wait in the kubelet's pull queue, and the image's size.
_PULLED = re.compile(
    r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9.hmsµnu]+)'
    r"(?: \((?P<waited>[0-9.hmsµnu]+) including waiting\))?"
    r"(?:\. Image size: (?P<size>\d+) bytes)?"
)
# Serve's text log line (Ray 2.58 ray/serve/_private/logging_utils.py, ServeFormatter:
# "%(levelname)s %(asctime)s {component} {component id} ", optional attributes, then
# "-- %(message)s"; asctime in logging's default "2026-12-02 10:05:00,123").
_SERVE_LINE = re.compile(
    r"^[A-Z]+ (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*? -- (?P<message>.*)$"
)
# The replica's own lines around its constructor (replica.py, initialize_callable).
ENGINE_STARTED = "Started initializing replica."
ENGINE_DONE = "Finished initializing replica."
# The controller's line when a replica turns RUNNING (deployment_state.py; ReplicaID.__str__ in
# common.py): the time since the controller started the replica's actor (so with the node's
# launch, for a replica that waited for one) and the constructor's, reconfigure's and first
# health check's.
_REPLICA_RUNNING = re.compile(
    r"^Replica\(id='(?P<id>[^']+)', deployment='[^']*', app='[^']*'\) started successfully "
    r"on node '[^']*' after (?P<e2e>\d+(?:\.\d+)?)s \(PID: \d+\)\."
    r"(?: Replica constructor, reconfigure method, and initial health check took "
    r"(?P<init>\d+(?:\.\d+)?)s\.)?"
)
# A replica's log holds its constructor's two lines near its start; the read stops at the second.
REPLICA_LOG_HEAD_BYTES = 4 * 1024 * 1024
CONTROLLER_LOG_LINES = 20000
_NEVER = datetime.max.replace(tzinfo=UTC)
ENGINE_STEP = "vLLM engine started (replica constructor)"
SERVING_STEP = "replica serves (Serve controller)"
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|µs|us|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node", metavar="NAME", help="measure only this GPU node (default: every GPU node)"
    )
    parser.add_argument(
        "--log-lines",
        type=int,
        default=CONTROLLER_LOG_LINES,
        metavar="N",
        help="read the last N lines of the Serve controller's log (default: %(default)s)",
    )


@dataclass(frozen=True)
class Step:
    """One measured step: when it started and ended (None: not yet, or not known)."""

    name: str
    start: datetime | None
    end: datetime | None
    note: str = ""


@dataclass(frozen=True)
class NodeColdStart:
    """What one GPU node went through, measured."""

    node: str
    instance_type: str
    instance_id: str | None
    launch: datetime
    launch_source: str  # "EC2 LaunchTime" or why the registration stands in
    steps: tuple[Step, ...]
    pulled: str | None = None  # the kubelet's own pull figure, while its event lasts


@dataclass(frozen=True)
class ServeLine:
    """One line of a Serve component's log: when (UTC) and the message."""

    at: datetime
    message: str


@dataclass(frozen=True)
class ServeView:
    """What the Ray dashboard told about Serve: the app's engine replicas (``placement.
    ServeReplica``), the head of each one's log by replica id, or why it was not read, and the
    controller's last lines. ``reason``: Serve itself was unreadable, so nothing is known."""

    replicas: tuple[Any, ...] = ()
    logs: Mapping[str, str] = field(default_factory=dict)
    log_errors: Mapping[str, str] = field(default_factory=dict)
    controller: tuple[ServeLine, ...] = ()
    controller_error: str = ""
    reason: str = ""


def serve_lines(text: str) -> tuple[ServeLine, ...]:
    """The lines of a Serve log in its text format, times read as UTC (the Ray pods' ``TZ``);
    other lines (a traceback's, an engine's own output) are skipped."""
    found = []
    for line in text.splitlines():
        m = _SERVE_LINE.match(line)
        if m:
            at = datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            found.append(ServeLine(at, m["message"].strip()))
    return tuple(found)


def engine_times(text: str) -> tuple[datetime | None, datetime | None]:
    """The first "Started initializing replica." of a replica's log and the first "Finished
    initializing replica." after it (None: not, or not yet, logged)."""
    start: datetime | None = None
    for line in serve_lines(text):
        if start is None and line.message == ENGINE_STARTED:
            start = line.at
        elif start is not None and line.message == ENGINE_DONE:
            return start, line.at
    return start, None


def running_at(controller: tuple[ServeLine, ...], replica_id: str) -> datetime | None:
    """When the controller first logged the replica RUNNING, else None."""
    return next((at for at, _ in _running_lines(controller, replica_id)), None)


def init_seconds(controller: tuple[ServeLine, ...], replica_id: str) -> float | None:
    """The controller's figure for the replica's constructor, reconfigure and first health
    check (its RUNNING line's "... took N s"), else None."""
    return next((took for _, took in _running_lines(controller, replica_id)), None)


def _running_lines(
    controller: tuple[ServeLine, ...], replica_id: str
) -> Iterator[tuple[datetime, float | None]]:
    for line in controller:
        m = _REPLICA_RUNNING.match(line.message)
        if m and m["id"] == replica_id:
            yield line.at, float(m["init"]) if m["init"] else None


def serve_steps(serve: ServeView, worker: dict[str, Any]) -> tuple[Step, Step]:
    """The engine's start and the replica's first RUNNING on the worker pod's node: of its
    engine replicas (``node_ip`` the pod's IP), the first to finish its constructor."""
    if serve.reason:
        return Step(ENGINE_STEP, None, None, serve.reason), Step(SERVING_STEP, None, None)
    ip = str((worker.get("status") or {}).get("podIP") or "")
    if not ip:
        note = "no Ray worker pod on the node" if not worker else "the worker pod has no IP yet"
        return Step(ENGINE_STEP, None, None, note), Step(SERVING_STEP, None, None)
    on_node = [r for r in serve.replicas if r.node_ip == ip]
    if not on_node:
        return (
            Step(ENGINE_STEP, None, None, "no engine replica on the worker pod (yet)"),
            Step(SERVING_STEP, None, None),
        )
    rows = []
    for replica in on_node:
        text = serve.logs.get(replica.replica_id)
        start, end = engine_times(text) if text is not None else (None, None)
        rows.append((replica, text is not None, start, end))
    # The first to finish its constructor; else the first to start it; else the first listed
    # (the sort is stable).
    rows.sort(key=lambda row: (row[3] is None, row[3] or row[2] or _NEVER))
    replica, read, start, end = rows[0]
    note = replica.deployment
    if not read:
        note += ": " + serve.log_errors.get(replica.replica_id, "its log was not read")
    elif start is None:
        note += ": no start line in its log's head"
    elif end is None and (took := init_seconds(serve.controller, replica.replica_id)) is not None:
        # Ray 2.58 with vLLM 0.26: a Prefill, Decode or LLMServer replica's own log stops
        # before its "Finished initializing replica." (seen on the serving tier and on a GPU):
        # the controller's figure for the constructor ends the step instead.
        end = start + timedelta(seconds=took)
        note += ": end from the controller's constructor time"
    elif end is None:
        note += ": starting"
    engine = Step(ENGINE_STEP, start, end, note)
    serving_end = running_at(serve.controller, replica.replica_id)
    serving_note = ""
    if serving_end is None:
        serving_note = (
            f"replica {replica.state or 'in no known state'}"
            if replica.state != "RUNNING"
            else serve.controller_error or "not in the controller's log lines read (--log-lines)"
        )
    return engine, Step(SERVING_STEP, end if serving_end else None, serving_end, serving_note)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the Kubernetes API, else None: the readiness checks' reader
    (``checks.parse_time``), so ``status``, the deploy's check and this command read times
    alike."""
    parsed: datetime | None = lambda_code.checks().parse_time(value)
    return parsed


def go_duration_seconds(text: str) -> float | None:
    """Seconds of a Go ``time.Duration`` string (``1m32.512s``, ``850ms``), else None."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def instance_id(node: dict[str, Any]) -> str | None:
    """The EC2 instance id in the node's ``providerID`` (``aws:///us-west-2b/i-0123...``)."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    last = provider.rsplit("/", 1)[-1]
    return last if provider.startswith("aws://") and last.startswith("i-") else None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _container(pod: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (pod.get("status") or {}).get(key) or []:
        if status.get("name") == name:
            return dict(status)
    return {}


def _started(container: dict[str, Any]) -> datetime | None:
    """When the container (first) started: running or since exited; None after a restart
    (the first start's time is gone) or before any start."""
    if int(container.get("restartCount") or 0) > 0:
        return None
    state = container.get("state") or {}
    for key in ("running", "terminated"):
        if key in state:
            return parse_time(state[key].get("startedAt"))
    return None


def _on_node(pods: list[dict[str, Any]], node: str, label: str, value: str) -> dict[str, Any]:
    """The newest pod on ``node`` whose ``label`` is ``value`` ({} when none)."""
    found = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") == node
        and ((p.get("metadata") or {}).get("labels") or {}).get(label) == value
    ]
    found.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    return found[-1] if found else {}


def joined_step(node: dict[str, Any]) -> Step:
    ready = _condition(node, "Ready")
    if ready.get("status") != "True":
        return Step("joined (Ready)", None, None, "not Ready")
    return Step("joined (Ready)", None, parse_time(ready.get("lastTransitionTime")))


def image_step(prepull: dict[str, Any]) -> Step:
    name = "Ray image pulled (image-prepull)"
    if not prepull:
        return Step(name, None, None, "no image-prepull pod on the node")
    sandbox = _condition(prepull, "PodReadyToStartContainers")
    start = (
        parse_time(sandbox.get("lastTransitionTime")) if sandbox.get("status") == "True" else None
    )
    note = ""
    if start is None:
        start = parse_time((prepull.get("status") or {}).get("startTime"))
        note = "from the pod's start (no sandbox condition)"
    container = _container(prepull, PREPULL_CONTAINER)
    end = _started(container)
    if end is None:
        restarted = int(container.get("restartCount") or 0) > 0
        note = "restarted since: its first start is not kept" if restarted else "pulling"
    return Step(name, start, end, note)


def weights_step(prefetch: dict[str, Any]) -> Step:
    name = "weights downloaded (model-prefetch)"
    if not prefetch:
        return Step(name, None, None, "no model-prefetch pod on the node")
    for container_name in DOWNLOAD_CONTAINERS:
        container = _container(prefetch, container_name, init=True)
        if not container:
            continue
        state = container.get("state") or {}
        if "terminated" in state:
            done = state["terminated"]
            if int(done.get("exitCode") or 0) != 0:
                return Step(name, None, None, f"{container_name} failed")
            start, end = parse_time(done.get("startedAt")), parse_time(done.get("finishedAt"))
            note = "" if int(container.get("restartCount") or 0) == 0 else "last of its tries"
            return Step(f"{name[:-1]}: {container_name})", start, end, note)
        if "running" in state:
            return Step(name, parse_time(state["running"].get("startedAt")), None, "downloading")
        return Step(name, None, None, "waiting to start")
    return Step(name, None, None, "no download container")


def worker_step(worker: dict[str, Any]) -> Step:
    name = "Ray worker container started"
    if not worker:
        return Step(name, None, None, "no Ray worker pod on the node")
    container = _container(worker, WORKER_CONTAINER)
    at = _started(container)
    if at is None:
        restarted = int(container.get("restartCount") or 0) > 0
        return Step(name, None, None, "restarted since" if restarted else "not started")
    return Step(name, at, at)


def pulled_figure(events: list[dict[str, Any]], prepull: dict[str, Any]) -> str | None:
    """The kubelet's "Successfully pulled image" figure for the pre-pull pod, if kept."""
    pod = str((prepull.get("metadata") or {}).get("name") or "")
    if not pod:
        return None
    for event in reversed(events):
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if involved.get("name") != pod or event.get("reason") != "Pulled":
            continue
        m = _PULLED.search(str(event.get("message") or event.get("note") or ""))
        if not m:
            continue
        took = go_duration_seconds(m["took"])
        if took is None:
            continue
        text = f"the kubelet pulled the Ray image in {took / 60:.1f} min"
        if m["waited"] and (waited := go_duration_seconds(m["waited"])) is not None:
            text += f" ({waited / 60:.1f} min with its wait in the pull queue)"
        if m["size"]:
            text += f"; image size {int(m['size']) / 1e9:.1f} GB"
        return text
    return None


def measure(
    node: dict[str, Any],
    launch: datetime | None,
    launch_source: str,
    warmup_pods: list[dict[str, Any]],
    ray_pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    serve: ServeView | None = None,
) -> NodeColdStart:
    """The node's steps. ``launch`` None: the node's registration stands in. ``serve`` None:
    Serve was not asked (its two steps say so)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "?")
    if launch is None:
        launch = parse_time(meta.get("creationTimestamp"))
        if launch is None:
            raise CheckFailed(f"node {name} has no creationTimestamp")
    prepull = _on_node(warmup_pods, name, "app.kubernetes.io/name", PREPULL)
    prefetch = _on_node(warmup_pods, name, "app.kubernetes.io/name", PREFETCH)
    worker = _on_node(ray_pods, name, "ray.io/node-type", "worker")
    engine, serving = serve_steps(serve or ServeView(reason="Serve not read"), worker)
    return NodeColdStart(
        node=name,
        instance_type=str((meta.get("labels") or {}).get("node.kubernetes.io/instance-type", "?")),
        instance_id=instance_id(node),
        launch=launch,
        launch_source=launch_source,
        steps=(
            joined_step(node),
            image_step(prepull),
            weights_step(prefetch),
            worker_step(worker),
            engine,
            serving,
        ),
        pulled=pulled_figure(events, prepull),
    )


def launch_times(app: App, ids: list[str]) -> tuple[dict[str, datetime], str]:
    """EC2 launch times by instance id, and where the times come from; on any refusal or
    failure no times, and the reason (the registration then stands in)."""
    if not ids:
        return {}, "the node's registration (no EC2 instance id in its providerID)"
    try:
        pages = app.aws.client("ec2").get_paginator("describe_instances").paginate(InstanceIds=ids)
        times = {
            str(i["InstanceId"]): i["LaunchTime"]
            for page in pages
            for r in page.get("Reservations", [])
            for i in r.get("Instances", [])
            if i.get("LaunchTime")
        }
    except bce.ClientError as err:
        code = err.response.get("Error", {}).get("Code", "error")
        return {}, f"the node's registration (ec2:DescribeInstances: {code})"
    except bce.BotoCoreError as err:
        return {}, f"the node's registration (ec2:DescribeInstances: {err})"
    return times, "EC2 LaunchTime"


def _minutes(at: datetime | None, launch: datetime) -> float | None:
    return None if at is None else (at - launch).total_seconds() / 60


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def scale_out_of(config: AppConfig) -> timeline.ScaleOut:
    """The model's scale-out for these settings, read from them as ``timeline.scale_out``
    reads it from the synthesized templates (tests/test_cli_coldstart.py holds the two
    equal for the default app and the variant)."""
    return timeline.scale_out_model(
        fast_pull=True,  # assets/nodeadm/node-config.yaml turns FastImagePull on for every node
        disk_mbps=timeline.NVME_MBPS
        if config.uses_local_nvme
        else float(config.gpu_root_volume_throughput),
        weights_in_s3=bool(config.model_s3_uri),
        warm_spares=config.gpu_warm_spare_nodes > 0,
    )


def model_steps(config: AppConfig) -> dict[str, tuple[float, float]]:
    """The model's (start, end) minutes of the measured steps, for these settings."""
    model = scale_out_of(config)
    by_name = {name: (start, end) for name, start, end in model.steps}
    pull = next(v for k, v in by_name.items() if k.startswith("pull Ray image"))
    weights = next(v for k, v in by_name.items() if k.startswith("download weights"))
    engine = by_name[timeline.SCALE_OUT_ENGINE_STEP]
    return {
        "joined": by_name[timeline.SCALE_OUT_JOIN_STEP],
        "image": pull,
        "weights": weights,
        "worker": (engine[0], engine[0]),
        "engine": engine,
        "serving": (engine[1], model.minutes),
    }


_MODEL_KEYS = ("joined", "image", "weights", "worker", "engine", "serving")


def render(found: NodeColdStart, model: dict[str, tuple[float, float]]) -> list[str]:
    ident = f", {found.instance_id}" if found.instance_id else ""
    lines = [
        f"GPU node {found.node} ({found.instance_type}{ident}), launched "
        f"{found.launch:%Y-%m-%d %H:%M:%S %Z}".rstrip()
        + f" (from {found.launch_source})"
    ]
    rows = []
    for key, step in zip(_MODEL_KEYS, found.steps, strict=True):
        start = (
            step.start if step.start is not None else (found.launch if key == "joined" else None)
        )
        begin, end = _minutes(start, found.launch), _minutes(step.end, found.launch)
        took = None if begin is None or end is None else end - begin
        m_start, m_end = model[key]
        rows.append(
            [
                step.name,
                _fmt(begin),
                _fmt(end),
                "-" if key == "worker" else _fmt(took),
                f"{m_start:.1f}-{m_end:.1f}" if m_end != m_start else f"{m_end:.1f}",
                step.note,
            ]
        )
    lines += table(
        ["step (minutes from the launch)", "start", "end", "took", "modelled", "note"], rows
    )
    if found.pulled:
        lines.append(f"  {found.pulled}")
    modelled = model["serving"][1]
    served = _minutes(found.steps[-1].end, found.launch)
    if served is None:
        lines.append(f"  in the model a new node serves after {modelled:.1f} min")
    else:
        lines.append(
            f"  this node served {served:.1f} min after its launch; in the model a new node "
            f"serves after {modelled:.1f} min"
        )
    return lines


def run(app: App) -> int:
    if app.args.log_lines < 1:
        raise UsageError(
            f"--log-lines {app.args.log_lines}: must be at least 1 (the last N lines of the "
            f"Serve controller's log; default {CONTROLLER_LOG_LINES})"
        )
    config = app.config
    cluster = Cluster(app)
    nodes = cluster.get("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}).get("items") or []
    if app.args.node:
        nodes = [n for n in nodes if (n.get("metadata") or {}).get("name") == app.args.node]
        if not nodes:
            raise CheckFailed(
                f"no GPU node (role=gpu-worker) named {app.args.node}: "
                "`kubectl get nodes -l role=gpu-worker` lists them"
            )
    if not nodes:
        raise CheckFailed("no GPU node (role=gpu-worker) in the cluster: nothing to measure")
    nodes.sort(key=lambda n: str((n.get("metadata") or {}).get("creationTimestamp") or ""))
    warmup = cluster.get(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods").get("items") or []
    ray = cluster.get(f"/api/v1/namespaces/{config.namespace}/pods").get("items") or []
    events = pull_events(cluster)
    ids = [i for i in (instance_id(n) for n in nodes) if i]
    launched, source = launch_times(app, ids)
    model = model_steps(config)
    names = {(n.get("metadata") or {}).get("name") for n in nodes}
    worker_ips = {
        str((p.get("status") or {}).get("podIP") or "")
        for p in ray
        if (p.get("spec") or {}).get("nodeName") in names
    }
    serve = read_serve(cluster, config, worker_ips - {""}, app.args.log_lines)
    for node in nodes:
        iid = instance_id(node)
        at = launched.get(iid) if iid else None
        found = measure(node, at, source if at else _fallback(source), warmup, ray, events, serve)
        app.print(*render(found, model), "")
    app.print(
        "On the first deploy's nodes the warm-up starts when the workload stack applies it:",
        "compare the durations ('took'). On a node added later (scale-out, a replacement)",
        "the minutes compare too. docs/cold-start.md, 'Measure a node', explains each step.",
    )
    return EXIT_OK


def read_serve(cluster: Cluster, config: AppConfig, ips: set[str], lines: int) -> ServeView:
    """Serve's view of the engines through the Ray dashboard: the app's engine replicas on
    the worker pods at ``ips``, the head of each one's log, and the last ``lines`` lines of the
    controller's log. Anything unreadable becomes the reason in the view (the Kubernetes
    steps are measured all the same)."""
    placement = lambda_code.placement()
    dashboard = cluster.dashboard()
    try:
        serve_json = dashboard.serve_applications()
    except cluster.kube.KubeApiError as err:
        return ServeView(reason=f"Serve unreadable: {err}")
    replicas = tuple(
        r
        for r in placement.serve_replicas(serve_json, config.application_name)
        if r.role != "other" and r.node_ip in ips
    )
    logs: dict[str, str] = {}
    errors: dict[str, str] = {}
    for replica in replicas:
        if not (replica.node_id and replica.log_file_path):
            errors[replica.replica_id] = "its log is not named yet"
            continue
        try:
            logs[replica.replica_id], _ = dashboard.read_log_head(
                replica.node_id,
                replica.log_file_path.lstrip("/"),  # relative to Ray's log directory
                max_bytes=REPLICA_LOG_HEAD_BYTES,
                until=lambda text: ENGINE_DONE in text,
            )
        except cluster.kube.KubeApiError as err:
            errors[replica.replica_id] = f"its log unreadable ({err.reason or err})"
    info = serve_json.get("controller_info") or {}
    node_id, path = str(info.get("node_id") or ""), str(info.get("log_file_path") or "")
    if not (node_id and path):
        return ServeView(replicas, logs, errors, controller_error="the controller's log unnamed")
    try:
        text = dashboard.read_log(node_id, path.lstrip("/"), lines=lines)
    except cluster.kube.KubeApiError as err:
        return ServeView(
            replicas,
            logs,
            errors,
            controller_error=f"the controller's log unreadable ({err.reason or err})",
        )
    return ServeView(replicas, logs, errors, serve_lines(text))


def pull_events(cluster: Cluster) -> list[dict[str, Any]]:
    """The kubelet's ``Pulled`` events in the warm-up namespace; none when they cannot be
    read (they are a bonus: the durable status fields carry the measurement)."""
    try:
        found = cluster.client.get_json(
            f"/api/v1/namespaces/{WARMUP_NAMESPACE}/events", {"fieldSelector": "reason=Pulled"}
        )
    except cluster.kube.KubeApiError:
        return []
    return list(found.get("items") or [])


def _fallback(source: str) -> str:
    return (
        source
        if source.startswith("the node's registration")
        else ("the node's registration (EC2 did not list the instance)")
    )
