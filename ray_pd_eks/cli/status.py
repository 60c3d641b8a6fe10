"""``status``: the RayService, its pods, the GPU nodes and what is wrong, in one screen.

The verdicts come from the readiness Lambda's ``checks`` module, so ``status`` and the deploy's
readiness check agree on what "running" and "stuck" mean. ``--watch`` polls until the Serve app
is RUNNING (exit 0) or something that waiting will not fix happens (exit 1).
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

NAME = "status"
HELP = "show the RayService, Ray pods, GPU/EFA nodes, placement and warnings (--watch)"
DESCRIPTION = """\
Show the RayService's conditions and Serve app status, every Ray pod with its phase and node,
each GPU node's nvidia.com/gpu and vpc.amazonaws.com/efa capacity/allocatable, where prefill
and decode run, stuck pods and the latest warning events, then the equivalent kubectl commands.

Exit 0 when the app is RUNNING, 1 otherwise. With --watch, refresh on one line until the app
is RUNNING (exit 0), fails in a way waiting will not fix (DEPLOY_FAILED, image pull or crash
loop, unschedulable on ready GPU nodes, InitializingTimeout: exit 1) or --timeout passes (1).
While watching, a RayService that does not exist yet counts as "waiting" (the deploy creates it)."""

WAITING, RUNNING, FAILED = "waiting", "running", "failed"


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
    placement: Any  # checks.Placement
    events: list[dict[str, Any]]  # warning events, newest last

    failure: str | None  # the readiness Lambda's terminal-failure verdict, if any

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
        state = self.state
        if not state.exists:
            return "RayService not created yet (the workload stack creates it)"
        running = sum(p.phase == "Running" for p in self.placement.pods)
        return (
            f"app {state.app_status or 'not started'} | Ready={state.ready_status or 'none'} | "
            f"GPU nodes {len(self.nodes.usable)}/{self.nodes.expected} | "
            f"Ray pods {running}/{len(self.placement.pods)} Running"
        )


def collect(cluster: Cluster, app: App, now: datetime, *, allow_missing: bool) -> Snapshot:
    """Read the RayService, GPU nodes, pods, events and (once serving) the Serve replicas.

    Whether a state is terminal is decided by the readiness Lambda's own rule (same graces for
    UNHEALTHY and Unschedulable), so ``status --watch`` gives up exactly when a deploy would.
    """
    checks = lambda_code.checks()
    handler = lambda_code.handler()
    config = app.config
    ns = config.namespace
    rayservice = cluster.find_rayservice() if allow_missing else cluster.rayservice()
    state = checks.rayservice_state(rayservice, config.application_name)
    nodes = checks.gpu_nodes(
        cluster.get("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}), config.gpu_node_count
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
    placement = checks.placement(pods, serve_json, config.application_name, serve_error=serve_error)
    events = sorted(events_json.get("items", []), key=lambda e: str(_event_time(e) or ""))
    failure = None
    if rayservice is not None:
        failure = handler.terminal_failure(
            cluster.readiness_props(), nodes, state, problems, now.timestamp()
        )
    return Snapshot(rayservice, state, nodes, pods, problems, placement, events, failure)


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
    lines += ["", f"GPU nodes (role=gpu-worker): {len(nodes.usable)}/{nodes.expected} usable"]
    node_rows = [
        [
            n.name,
            "Ready" if n.ready else "NotReady",
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
        app.print(*render(snapshot, app, now, args.events))
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
    app.print(*render(snapshot, app, now, args.events))
    app.print("", f"Verdict: {verdict.upper()} after {duration(elapsed)}: {why}")
    return EXIT_OK if verdict == RUNNING else EXIT_CHECK_FAILED
