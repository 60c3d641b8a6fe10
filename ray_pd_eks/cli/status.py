"""``status``: the RayService, its pods, the GPU nodes and what is wrong, in one screen.

The verdicts come from the readiness Lambda's ``checks`` module, so ``status`` and the deploy's
readiness check agree on what "running" and "stuck" mean. ``--watch`` polls until the Serve app
is RUNNING (exit 0) or something that waiting will not fix happens (exit 1).

The node warm-up (image pre-pull and model prefetch DaemonSets) is shown for information only:
workers never wait on it, so it never changes the verdict or the exit code.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, AccessError, UsageError
from ray_pd_eks.cli.output import Progress, duration, table
from ray_pd_eks.monitoring import alarm_name_prefix, dashboard_name, dashboard_url

NAME = "status"
HELP = "show the RayService, Ray pods, GPU/EFA nodes, placement and warnings (--watch)"
DESCRIPTION = """\
Show the RayService's conditions and Serve app status, every Ray pod with its phase and node,
each GPU node's nvidia.com/gpu and vpc.amazonaws.com/efa capacity/allocatable, the node warm-up
(image pre-pull and model prefetch per node), where prefill and decode run, stuck pods and the
latest warning events, then the equivalent kubectl commands, and (observability=cloudwatch)
the CloudWatch dashboard's URL and every alarm of this deployment in ALARM. The warm-up and
the alarms are informational: workers never wait on the warm-up, and neither changes the
exit code.

Exit 0 when the app is RUNNING, 1 otherwise. With --watch, refresh on one line until the app
is RUNNING (exit 0), fails in a way waiting will not fix (DEPLOY_FAILED, image pull or crash
loop, unschedulable on ready GPU nodes, InitializingTimeout: exit 1) or --timeout passes (1).
While watching, a RayService that does not exist yet counts as "waiting" (the deploy creates it)."""

WAITING, RUNNING, FAILED = "waiting", "running", "failed"

# pd_constructs.serving.warmup.WARMUP_NAMESPACE and its DaemonSets
# (assets/manifests/image-prepull.yaml, model-prefetch.yaml); not imported from there because
# pd_constructs loads aws_cdk.
WARMUP_NAMESPACE = "ray-pd-eks-warmup"
WARMUP_DAEMONSETS = ("image-prepull", "model-prefetch")
# The warm spares' placeholder pods (assets/manifests/gpu-warm-spare.yaml): a node one runs on
# holds no engine, only the GPU until a decode replica preempts it.
WARM_SPARE_APP = "gpu-warm-spare"
# Waiting reasons of a container that will not start without a change (or only after back-off).
_FAILED_WAITING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
_IMAGE_OR_CONFIG = _FAILED_WAITING - {"CrashLoopBackOff", "RunContainerError"}
_STARTING = frozenset({"", "ContainerCreating", "PodInitializing"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watch", action="store_true", help="refresh until RUNNING (exit 0) or failure (exit 1)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="seconds between refreshes with --watch (default: 15)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="give up --watch after this long, exit 1 (default: 3600)",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=5,
        metavar="N",
        help="how many of the latest warning events to show (default: 5)",
    )


@dataclass(frozen=True)
class Snapshot:
    """One read of everything ``status`` shows."""

    rayservice: dict[str, Any] | None  # None: not created yet
    state: Any  # checks.RayServiceState
    nodes: Any  # checks.GpuNodes
    pods: dict[str, Any]  # the Ray pods of this RayService, as a pod list
    problems: list[Any]  # checks.PodProblem
    placement: Any  # placement.Placement (the readiness Lambda's)
    events: list[dict[str, Any]]  # warning events, newest last

    failure: str | None  # the readiness Lambda's terminal-failure verdict, if any
    warmup: Warmup  # informational: never part of the verdict

    def verdict(self) -> tuple[str, str]:
        """(WAITING | RUNNING | FAILED, one-line reason)."""
        state = self.state
        if not state.exists:
            return WAITING, "RayService not created yet"
        if self.failure:
            return FAILED, self.failure
        if self.placement.conflict:
            return FAILED, self.placement.why
        if state.running:
            return RUNNING, f"app {state.app_name} RUNNING; {self.placement.why}"
        return WAITING, self._waiting_for()

    def _waiting_for(self) -> str:
        if not self.nodes.ok:
            return self.nodes.why
        if self.problems:
            return self.problems[0].describe()
        return self.state.summary()

    def progress_line(self) -> str:
        warmup = f" | {self.warmup.progress()}" if self.warmup.deployed else ""
        state = self.state
        if not state.exists:
            return "RayService not created yet (the workload stack creates it)" + warmup
        running = sum(p.phase == "Running" for p in self.placement.pods)
        held = sum(n.name in self.warmup.spare_nodes for n in self.nodes.nodes)
        spares = f" ({held} spare)" if held else ""
        return (
            f"app {state.app_status or 'not started'} | Ready={state.ready_status or 'none'} | "
            f"GPU nodes {len(self.nodes.usable)}/{self.nodes.expected}{spares} | "
            f"Ray pods {running}/{len(self.placement.pods)} Running" + warmup
        )


@dataclass(frozen=True)
class WarmupPod:
    name: str
    daemonset: str
    node: str
    state: str  # "pulling image", "fetching model (<init>)", "starting", "done", "failed: ..."
    hint: str | None = None  # for a failed pod: the kubectl command that shows why


@dataclass(frozen=True)
class Warmup:
    """The node warm-up DaemonSets (desired, ready) and their pods, or why they are unread."""

    daemonsets: dict[str, tuple[int, int]]  # the ones that exist: name -> (desired, ready)
    pods: list[WarmupPod]
    unread: str | None = None  # e.g. access denied; None when read (or absent: not deployed)
    spare_nodes: frozenset[str] = frozenset()  # nodes a warm spare's placeholder holds

    @property
    def deployed(self) -> bool:
        return bool(self.daemonsets)

    def ready_of_desired(self) -> str:
        """``ready/desired`` pods over both DaemonSets."""
        desired = sum(d for d, _ in self.daemonsets.values())
        ready = sum(r for _, r in self.daemonsets.values())
        return f"{ready}/{desired}"

    def progress(self) -> str:
        return f"warm-up {self.ready_of_desired()}"

    def render(self) -> list[str]:
        title = f"Node warm-up (namespace {WARMUP_NAMESPACE})"
        if self.unread:
            return [f"{title}: {self.unread}"]
        if not self.deployed:
            return [f"{title}: not deployed (no {' or '.join(WARMUP_DAEMONSETS)} DaemonSet)"]
        lines = [
            f"{title}: {self.ready_of_desired()} pods ready "
            "(informational: workers never wait on it)"
        ]
        rows = [[name, str(d), str(r)] for name, (d, r) in self.daemonsets.items()]
        lines += table(["DAEMONSET", "DESIRED", "READY"], rows)
        lines += [f"  {n}: not deployed" for n in WARMUP_DAEMONSETS if n not in self.daemonsets]
        if self.pods:
            pod_rows = [[p.name, p.daemonset, p.node, p.state] for p in self.pods]
            lines += ["", *table(["POD", "DAEMONSET", "NODE", "STATE"], pod_rows)]
        lines += [f"  why {p.name} failed: {p.hint}" for p in self.pods if p.hint]
        return lines


def read_warmup(cluster: Cluster) -> Warmup:
    """The warm-up DaemonSets and pods. Never raises for the API's answers: a missing
    namespace or DaemonSet (an older deployment) is "not deployed", a refusal one line."""
    kube = cluster.kube
    try:
        ds_json = cluster.client.get_json(f"/apis/apps/v1/namespaces/{WARMUP_NAMESPACE}/daemonsets")
        daemonsets: dict[str, tuple[int, int]] = {}
        for ds in ds_json.get("items") or []:
            name = (ds.get("metadata") or {}).get("name", "")
            if name in WARMUP_DAEMONSETS:
                status = ds.get("status") or {}
                daemonsets[name] = (
                    int(status.get("desiredNumberScheduled") or 0),
                    int(status.get("numberReady") or 0),
                )
        if not daemonsets:
            # Listing in a namespace that does not exist answers an empty list, not 404.
            return Warmup({}, [])
        pods_json = cluster.client.get_json(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods")
    except kube.KubeAuthError as err:
        return Warmup({}, [], unread=f"access denied ({err.status}: {str(err.reason)[:160]})")
    except kube.KubeApiError as err:
        if err.status == 404:
            return Warmup({}, [])
        return Warmup({}, [], unread=f"not read: {str(err)[:200]}")
    ordered = dict(sorted(daemonsets.items(), key=lambda kv: WARMUP_DAEMONSETS.index(kv[0])))
    pods = [warmup_pod(p) for p in pods_json.get("items") or []]
    pods.sort(key=lambda p: (p.daemonset, p.node, p.name))
    return Warmup(ordered, pods, spare_nodes=spare_nodes(pods_json))


def spare_nodes(pods_json: dict[str, Any]) -> frozenset[str]:
    """The nodes a warm spare's placeholder pod runs on, from the warm-up namespace's pod
    list: ``status`` marks them, ``bench`` leaves them out of the cost per token."""
    return frozenset(
        str(p["spec"]["nodeName"])
        for p in pods_json.get("items") or []
        if ((p.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name")
        == WARM_SPARE_APP
        and (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") == "Running"
    )


def warmup_pod(pod: dict[str, Any]) -> WarmupPod:
    """One warm-up pod with its short state (see :func:`warmup_pod_state`)."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", "?"))
    state, hint = warmup_pod_state(pod)
    return WarmupPod(
        name=name,
        daemonset=str((meta.get("labels") or {}).get("app.kubernetes.io/name", "-")),
        node=str((pod.get("spec") or {}).get("nodeName") or "-"),
        state=state,
        hint=hint.format(pod=name) if hint else None,
    )


def warmup_pod_state(pod: dict[str, Any]) -> tuple[str, str | None]:
    """(short state, for a failure the kubectl command that shows why; ``{pod}`` unfilled).

    ``failed: <container> ...`` first (crash loop, image pull error, non-zero exit), then
    ``done`` when Ready, ``fetching model (<init>)`` while an init container runs, ``pulling
    image`` while the next container is still being created, ``starting`` once the fetch is
    done but the pod is not Ready yet.
    """
    status = pod.get("status") or {}
    inits = list(status.get("initContainerStatuses") or [])
    mains = list(status.get("containerStatuses") or [])
    for container in [*inits, *mains]:
        failure = _container_failure(container)
        if failure is not None:
            return failure
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "terminating", None
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if (conditions.get("Ready") or {}).get("status") == "True":
        return "done", None
    if not (pod.get("spec") or {}).get("nodeName"):
        scheduled = conditions.get("PodScheduled") or {}
        return f"not scheduled: {scheduled.get('reason') or 'Pending'}", None
    for container in inits:
        state = container.get("state") or {}
        if "running" in state:
            return f"fetching model ({container.get('name', '?')})", None
        if "terminated" not in state:  # exit 0: non-zero is a failure above
            return _waiting(state), None
    if any("running" in (c.get("state") or {}) for c in mains) or inits:
        return "starting", None
    return _waiting(next((c.get("state") or {} for c in mains), {})), None


def _waiting(state: dict[str, Any]) -> str:
    reason = str((state.get("waiting") or {}).get("reason") or "")
    return "pulling image" if reason in _STARTING else f"waiting: {reason}"


def _container_failure(container: dict[str, Any]) -> tuple[str, str] | None:
    name = str(container.get("name", "?"))
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or {}
    last = (container.get("lastState") or {}).get("terminated") or {}
    reason = str(waiting.get("reason") or "")
    logs = f"kubectl logs -n {WARMUP_NAMESPACE} {{pod}} -c {name}"
    if reason in _FAILED_WAITING:
        if reason in _IMAGE_OR_CONFIG:
            detail = _one_line(str(waiting.get("message") or ""))
            text = f"{reason}: {detail}" if detail else reason
            return f"failed: {name} {text}", f"kubectl describe pod -n {WARMUP_NAMESPACE} {{pod}}"
        if last:
            return f"failed: {name} {reason}, {_exit(last)}", f"{logs} --previous"
        detail = _one_line(str(waiting.get("message") or ""))
        return f"failed: {name} {reason}" + (f": {detail}" if detail else ""), logs
    if terminated and terminated.get("exitCode") not in (0, None):
        return f"failed: {name} {_exit(terminated)}", logs
    return None


def _exit(terminated: dict[str, Any]) -> str:
    """``exit 1 (Error): <the termination message's last line>``."""
    text = f"exit {terminated.get('exitCode', '?')}"
    if terminated.get("reason"):
        text += f" ({terminated['reason']})"
    message = _one_line(str(terminated.get("message") or ""))
    return f"{text}: {message}" if message else text


def _one_line(message: str, limit: int = 160) -> str:
    """The last non-empty line (a log tail ends with the error), at most ``limit`` chars."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def collect(cluster: Cluster, app: App, now: datetime, *, allow_missing: bool) -> Snapshot:
    """Read the RayService, GPU nodes, pods, events and (once serving) the Serve replicas.

    Whether a state is terminal is decided by the readiness Lambda's own rule (the same graces
    for Unschedulable and image pulls; an UNHEALTHY app is never terminal), so ``status --watch``
    gives up exactly when a deploy would.
    """
    checks = lambda_code.checks()
    where = lambda_code.placement()
    terminal = lambda_code.terminal()
    config = app.config
    ns = config.namespace
    rayservice = cluster.find_rayservice() if allow_missing else cluster.rayservice()
    state = checks.rayservice_state(rayservice, config.application_name)
    nodes = checks.gpu_nodes(
        cluster.get("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}), config.gpu_node_min
    )
    all_pods = cluster.get(f"/api/v1/namespaces/{ns}/pods")
    pods = checks.ray_pods(all_pods, config.ray_service_name, state.cluster_names)
    events_json = cluster.get(f"/api/v1/namespaces/{ns}/events", {"fieldSelector": "type=Warning"})
    problems = checks.pod_problems(pods, events_json)
    serve_json, serve_error = None, "the Serve app is not RUNNING yet"
    if state.app_status in ("RUNNING", "UNHEALTHY"):
        # Replicas have nodes only once deployed; asking earlier costs retries of a 503.
        try:
            with cluster.errors():
                serve_json = cluster.dashboard().serve_applications()
        except AccessError as err:
            serve_error = err.message
    placement = where.placement(
        pods,
        serve_json,
        config.application_name,
        serve_error=serve_error,
        mode=cluster.serving_mode(rayservice),
        gpus_per_worker=config.tensor_parallel_size,
    )
    events = sorted(events_json.get("items", []), key=lambda e: str(_event_time(e) or ""))
    failure = None
    if rayservice is not None:
        warnings = checks.ray_object_warnings(
            events_json, config.ray_service_name, state.cluster_names
        )
        failure = terminal.terminal_failure(
            cluster.readiness_props(), nodes, state, problems, now.timestamp(), warnings=warnings
        )
    warmup = read_warmup(cluster)
    return Snapshot(rayservice, state, nodes, pods, problems, placement, events, failure, warmup)


def _event_time(event: dict[str, Any]) -> datetime | None:
    """When an event was last seen, by the readiness checks' own rule (the newest of its
    several timestamp fields)."""
    result: datetime | None = lambda_code.checks().event_time(event)
    return result


def _age(when: datetime | None, now: datetime) -> str:
    return duration((now - when).total_seconds()) if when else "?"


def render(snapshot: Snapshot, app: App, now: datetime, events_shown: int) -> list[str]:
    config = app.config
    state = snapshot.state
    lines = [
        f"RayService {config.ray_service_name}  (namespace {config.namespace}, "
        f"cluster {config.cluster_name}, {app.aws.region})"
    ]
    if not state.exists:
        lines.append("  not created yet")
    else:
        app_line = state.app_status or "absent (Serve not started)"
        if state.app_message:
            app_line += f": {state.app_message[:200]}"
        lines.append(f"  app {state.app_name}: {app_line}")
        conditions = (snapshot.rayservice or {}).get("status", {}).get("conditions") or []
        rows = [
            [
                str(c.get("type", "")),
                str(c.get("status", "")),
                str(c.get("reason", "")),
                str(c.get("message", ""))[:100],
            ]
            for c in conditions
        ]
        if rows:
            lines += table(["CONDITION", "STATUS", "REASON", "MESSAGE"], rows)
        if state.deployments:
            deps = [[d.name, d.role, d.status, d.message[:80]] for d in state.deployments]
            lines += ["", *table(["DEPLOYMENT", "ROLE", "STATUS", "MESSAGE"], deps)]

    placement = snapshot.placement
    serves = {n: "prefill" for n in placement.prefill_nodes}
    for n in placement.decode_nodes:
        serves[n] = "decode" if n not in serves else "prefill+decode"
    for n in placement.engine_nodes:  # aggregated: one engine doing both phases
        serves[n] = "prefill+decode"
    problem_of = {p.pod: p.reason for p in snapshot.problems}
    pod_rows = [
        [
            p.name,
            p.role,
            problem_of.get(p.name, p.phase or "?"),
            p.node or "-",
            str(p.gpus),
            serves.get(p.node, "-") if p.role == "worker" else "-",
        ]
        for p in placement.pods
    ]
    lines += ["", f"Ray pods ({len(pod_rows)})"]
    if pod_rows:
        lines += table(["POD", "TYPE", "STATUS", "NODE", "GPUS", "SERVES"], pod_rows)
    else:
        lines.append("  none yet")

    nodes = snapshot.nodes
    spares = snapshot.warmup.spare_nodes
    headline = f"GPU nodes (role=gpu-worker): {len(nodes.usable)}/{nodes.expected} usable"
    held = sum(n.name in spares for n in nodes.nodes)
    if held:
        headline += (
            f", {held} of them {'a warm spare' if held == 1 else 'warm spares'} "
            "(a placeholder holds the GPU until a decode replica needs it)"
        )
    lines += ["", headline]
    node_rows = [
        [
            n.name,
            ("Ready" if n.ready else "NotReady") + (", warm spare" if n.name in spares else ""),
            n.instance_type or "?",
            n.zone or "?",
            f"{n.gpu_capacity}/{n.gpu_allocatable}",
            f"{n.efa_capacity}/{n.efa_allocatable}",
        ]
        for n in nodes.nodes
    ]
    if node_rows:
        lines += table(
            ["NODE", "STATUS", "TYPE", "ZONE", "GPU cap/alloc", "EFA cap/alloc"], node_rows
        )
    if not nodes.ok:
        lines.append(f"  waiting: {nodes.why}")

    lines += ["", *snapshot.warmup.render()]
    lines += ["", f"Placement: {placement.why}"]
    if snapshot.problems:
        lines += ["", "Stuck pods:", *(f"  {p.describe()}" for p in snapshot.problems)]
    recent = snapshot.events[-events_shown:] if events_shown > 0 else []
    if recent:
        event_rows = [
            [
                _age(_event_time(e), now),
                f"{e.get('involvedObject', {}).get('kind', '')}/"
                f"{e.get('involvedObject', {}).get('name', '')}",
                str(e.get("reason", "")),
                str(e.get("message", "")).replace("\n", " ")[:140],
            ]
            for e in recent
        ]
        lines += ["", f"Warning events (latest {len(recent)})"]
        lines += table(["AGE", "OBJECT", "REASON", "MESSAGE"], event_rows)
    lines += ["", "With kubectl:", *(f"  {c}" for c in kubectl_commands(app))]
    return lines


def kubectl_commands(app: App) -> list[str]:
    c = app.config
    return [
        f"aws eks update-kubeconfig --name {c.cluster_name} --region {app.aws.region}",
        f"kubectl get rayservice {c.ray_service_name} -n {c.namespace} -o yaml",
        f"kubectl get pods -n {c.namespace} -o wide -l ray.io/cluster",
        "kubectl get nodes -l role=gpu-worker -o custom-columns=NAME:.metadata.name,"
        "GPU:.status.allocatable.nvidia\\.com/gpu,EFA:.status.allocatable.vpc\\.amazonaws\\.com/efa",
        f"kubectl get events -n {c.namespace} --field-selector type=Warning "
        "--sort-by=.lastTimestamp",
        f"kubectl get ds,pods -n {WARMUP_NAMESPACE} -o wide",
    ]


def observability_lines(app: App) -> list[str]:
    """The dashboard's URL and every alarm of this deployment in ALARM (``observability``)."""
    c = app.config
    if not c.observability_enabled:
        return []
    region = app.aws.region
    prefix = alarm_name_prefix(c)
    lines = ["", f"Dashboard: {dashboard_url(region, dashboard_name(c))}"]
    firing: list[dict[str, Any]] = []
    try:
        with app.aws.errors("cloudwatch:DescribeAlarms"):
            token: str | None = None
            while True:
                kwargs = {"NextToken": token} if token else {}
                page = app.aws.client("cloudwatch").describe_alarms(
                    AlarmNamePrefix=prefix,
                    StateValue="ALARM",
                    AlarmTypes=["MetricAlarm", "CompositeAlarm"],
                    **kwargs,
                )
                firing += page.get("MetricAlarms", []) + page.get("CompositeAlarms", [])
                token = page.get("NextToken")
                if not token:
                    break
    except AccessError as err:
        return [*lines, f"Alarms: cannot tell ({err.message})"]
    if not firing:
        return [*lines, f"Alarms ({prefix}*): none in ALARM"]
    rows = [
        [
            str(a.get("AlarmName", "")).removeprefix(prefix),
            _age(a.get("StateUpdatedTimestamp"), app.runtime.now()),
            str(a.get("StateReason", "")).replace("\n", " ")[:120],
        ]
        for a in sorted(firing, key=lambda a: str(a.get("AlarmName", "")))
    ]
    return [
        *lines,
        f"Alarms in ALARM ({len(rows)}, names start with {prefix})",
        *table(["ALARM", "SINCE", "REASON"], rows),
    ]


def run(app: App) -> int:
    args = app.args
    if args.interval <= 0 or args.timeout <= 0:
        raise UsageError("--interval and --timeout must be positive numbers of seconds")
    cluster = Cluster(app)
    runtime = app.runtime
    if not args.watch:
        now = runtime.now()
        snapshot = collect(cluster, app, now, allow_missing=False)
        verdict, why = snapshot.verdict()
        app.print(*render(snapshot, app, now, args.events), *observability_lines(app))
        app.print("", f"Verdict: {verdict.upper()}: {why}")
        return EXIT_OK if verdict == RUNNING else EXIT_CHECK_FAILED

    started = runtime.clock()
    progress = Progress(runtime.stdout)
    while True:
        now = runtime.now()
        snapshot = collect(cluster, app, now, allow_missing=True)
        verdict, why = snapshot.verdict()
        elapsed = runtime.clock() - started
        progress.update(elapsed, snapshot.progress_line())
        if verdict != WAITING:
            break
        if elapsed + args.interval > args.timeout:
            progress.finish()
            app.print(*render(snapshot, app, now, args.events))
            app.print(
                "",
                f"Verdict: TIMEOUT after {duration(elapsed)}: still waiting for: {why}",
            )
            return EXIT_CHECK_FAILED
        runtime.sleep(args.interval)
    progress.finish()
    app.print(*render(snapshot, app, now, args.events), *observability_lines(app))
    app.print("", f"Verdict: {verdict.upper()} after {duration(elapsed)}: {why}")
    return EXIT_OK if verdict == RUNNING else EXIT_CHECK_FAILED
