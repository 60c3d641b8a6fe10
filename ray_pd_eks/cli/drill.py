"""``drill``: lose one engine on purpose and measure how long the endpoint is down.

Two ways to lose it, for each engine:

* ``prefill-restart`` / ``decode-restart`` delete the worker pod that runs that engine's Serve
  replica. KubeRay creates a new worker pod (a new IP), Ray Serve places a new replica on it,
  and vLLM loads the model again.
* ``prefill-replica-restart`` / ``decode-replica-restart`` kill only the engine's Serve replica
  (its Ray actor, ``ray.kill(..., no_restart=True)``, in a Ray job submitted to the head's
  dashboard) and keep the pod: Serve starts a new replica in the same pod, the only one with a
  free GPU, on the same IP and NIXL side-channel port. This is the path a crashed engine takes
  (a CUDA error, an OOM kill of the replica), and the one where a pinned NIXL engine id would
  repeat (below).

The drill polls until the RayService is RUNNING again (and, killing a replica, a new replica
of that engine is RUNNING) and the KV integrity probe passes (the readiness check's own
``kv_probe``: the answer holds the code, the decode engines' NIXL transfer count rose, none
failed), and reports the downtime.

What vLLM 0.26's NixlConnector does when its peer restarts (docs/readiness.md, "Recovery
drill", says where this was read): decode keeps, per remote *engine id*, the NIXL agent
metadata of each prefill engine it has talked to, and handshakes only with an engine id it has
not seen (``start_load_kv``: ``if remote_engine_id not in self._remote_agents``). A restarted
prefill engine starts with a new engine id: the serve config sets no
``kv_transfer_config.engine_id``, so Ray Serve LLM 2.58 makes it
``<random suffix>-<host>-<port>`` at every engine start (``kv_transfer/nixl.py``
``NixlConnectorBackend.setup``, ``base.py`` ``_get_unique_suffix``), even for a replica
restarted on the same pod; decode handshakes with it afresh on the first request and the old
entry is never used again. A restarted decode engine has no peers yet and handshakes on its
first request. So we expect recovery without touching the other engine. A *stale peer* is
decode still reading from the dead prefill agent: the probe then fails (failed transfers, a
count that does not rise, an answer without the code, or HTTP 500, which vLLM answers when a
KV load fails) after the replacement is RUNNING; the drill names that and the command that
recovers (restart the other engine's pod too, which forces a fresh handshake on both sides).

Least privilege (docs/readiness.md lists it; ``DRILL_RULES`` is the Role of each kind of
drill, and the tests prove each request covered and each rule used): ``get`` the RayService,
``list`` pods and events, ``get`` the Ray token Secret, ``services/proxy`` on the head's
dashboard (``get``) and Serve (``get``, ``create``), ``pods/proxy`` ``get`` (the counters);
deleting a pod needs ``delete`` pods, killing a replica ``create`` on the dashboard's proxy
(a Ray job: whoever may submit one runs code in the Ray cluster, so that mode needs more trust
than deleting a pod).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli import probe
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_OK, CheckFailed, UsageError
from ray_pd_eks.cli.output import duration

NAME = "drill"
HELP = "lose the prefill or decode engine (its pod, or only its replica) and time the recovery"
DESCRIPTION = """\
Recovery drill: delete the worker pod that runs the prefill (prefill-restart) or decode
(decode-restart) engine, or kill only that engine's Serve replica and keep its pod
(prefill-replica-restart, decode-replica-restart: a Ray job on the head kills the replica's
actor; Serve starts a new one in the same pod), then poll until the RayService is RUNNING again
and the KV integrity probe passes (the answer holds the code, the NIXL transfer count rose, no
transfer failed). Prints the downtime. The endpoint is down meanwhile: it asks for --yes.

Exit 1 when the endpoint does not recover within --timeout-minutes; when the replacement runs
but the probe keeps failing (decode holding a stale prefill peer), it says so, with the last
warning event and the command that recovers."""

# drill -> (the engine's role, what is lost: its "pod" or only its "replica").
DRILLS = {
    "prefill-restart": ("prefill", "pod"),
    "decode-restart": ("decode", "pod"),
    "prefill-replica-restart": ("prefill", "replica"),
    "decode-replica-restart": ("decode", "replica"),
}
# The Ray job that kills a replica's actor (run on the head: ``ray.init()`` joins the cluster);
# Serve sees the replica die and starts another. ``no_restart``: Serve, not Ray, replaces it.
KILL_REPLICA = (
    "import sys, ray; ray.init(namespace='serve', logging_level='ERROR'); "
    "ray.kill(ray.get_actor(sys.argv[1], namespace='serve'), no_restart=True); "
    "print('killed', sys.argv[1])"
)
# Serve's replica actor names (``SERVE_REPLICA::<app>#<deployment>#<id>``); anything else is
# refused rather than put on the job's command line.
ACTOR_NAME = re.compile(r"SERVE_REPLICA::[A-Za-z0-9_.:#-]+")
JOB_DONE = ("SUCCEEDED", "FAILED", "STOPPED")
DEFAULT_TIMEOUT_MINUTES = 20
DEFAULT_INTERVAL_SECONDS = 15
# Probe failures that mean "the KV cache does not arrive" once the replacement is RUNNING:
# failed transfers, a count that did not rise, a wrong answer, and the endpoint's HTTP 500 to
# the probe (the readiness check's kv_probe.KV_LOAD_FAILED: vLLM 0.26 fails a request whose KV
# load failed with 500, so a stale peer shows first as that).
STALE_PEER_SIGNS = (
    "failed during the probe",
    "did not rise",
    "does not contain the code",
    "KV transfer failed",
)

# The Role a principal needs to run the drill (and nothing else), in the Ray namespace; the
# names are filled from the settings by :func:`drill_rules`; a rule with "only" serves that
# kind of drill alone.
DRILL_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["ray.io"], "resources": ["rayservices"], "verbs": ["get"], "names": "rs"},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"], "only": "pod"},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "names": "token"},
    {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"], "names": "head"},
    {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "verbs": ["create"],
        "names": "head",
        "only": "replica",
    },
    {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "verbs": ["get", "create"],
        "names": "serve",
    },
    {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
)


def drill_rules(
    ray_service: str, token_secret: str, lose: str | None = None
) -> list[dict[str, Any]]:
    """``DRILL_RULES`` as RBAC rules for this deployment's names: those a drill that loses a
    ``pod`` or a ``replica`` needs, or (None) every drill's."""
    names = {
        "rs": ray_service,
        "token": token_secret,
        "head": f"{ray_service}-head-svc:8265",
        "serve": f"{ray_service}-serve-svc:8000",
    }
    rules = []
    for rule in DRILL_RULES:
        if lose is not None and rule.get("only", lose) != lose:
            continue
        out = {k: v for k, v in rule.items() if k not in ("names", "only")}
        if "names" in rule:
            out["resourceNames"] = [names[rule["names"]]]
        rules.append(out)
    return rules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("which", choices=sorted(DRILLS), help="which engine to restart")
    parser.add_argument(
        "--yes", action="store_true", help="really delete the pod (the endpoint goes down)"
    )
    parser.add_argument(
        "--timeout-minutes",
        type=int,
        default=DEFAULT_TIMEOUT_MINUTES,
        metavar="N",
        help=f"give up after N minutes (default: {DEFAULT_TIMEOUT_MINUTES})",
    )
    parser.add_argument(
        "--interval",
        type=int,
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="S",
        help=f"seconds between checks (default: {DEFAULT_INTERVAL_SECONDS})",
    )


def engine_pods(pods_json: Any, serve_json: Any, app_name: str, role: str) -> list[str]:
    """The worker pods that run a RUNNING replica of ``role`` (matched by node IP)."""
    placement = lambda_code.placement()
    ips = {
        r.node_ip
        for r in placement.serve_replicas(serve_json, app_name)
        if r.role == role and r.state == "RUNNING" and r.node_ip
    }
    place = placement.placement(pods_json, serve_json, app_name)
    return sorted(p.name for p in place.pods if p.role == "worker" and p.ip in ips)


def drill_verdict(last: str, probe_ran: bool, running: bool) -> str:
    """Why the endpoint did not recover, from the last poll: a stale peer when the replacement
    runs but KV does not arrive; a probe that never passed; a RayService RUNNING again whose
    new replica (or Serve's details) the probe never got to (``last`` says which); else that
    the RayService never came back."""
    if not running:
        return "the RayService did not return to RUNNING"
    if probe_ran and any(s in last for s in STALE_PEER_SIGNS):
        return (
            "the replacement is RUNNING but the KV cache does not arrive: decode holds a stale "
            f"peer ({last})"
        )
    if probe_ran:
        return f"the RayService is RUNNING but the probe never passed ({last})"
    return f"the RayService is RUNNING but the probe never ran ({last})"


def run(app: App) -> int:
    args, config = app.args, app.config
    if args.timeout_minutes < 1 or args.interval < 1:
        raise UsageError("--timeout-minutes and --interval must be at least 1")
    if config.serving_mode != "pd":
        raise UsageError("drill needs servingMode=pd: an aggregated app has no prefill/decode")
    role, lose = DRILLS[args.which]
    checks, where = lambda_code.checks(), lambda_code.placement()
    cluster = Cluster(app)
    cluster.rayservice()
    ns = config.namespace
    dashboard = cluster.dashboard()
    with cluster.errors():
        serve_json = dashboard.serve_applications()
    pods = cluster.get(f"/api/v1/namespaces/{ns}/pods")
    victims = engine_pods(pods, serve_json, config.application_name, role)
    if not victims:
        raise CheckFailed(
            f"no worker pod runs a RUNNING {role} replica of app {config.application_name}: "
            "check `python -m ray_pd_eks status` first"
        )
    victim = victims[0]
    replica = _replica_on(where, pods, serve_json, config.application_name, role, victim)
    other_role = "decode" if role == "prefill" else "prefill"
    others = engine_pods(pods, serve_json, config.application_name, other_role)
    if lose == "pod":
        what, doing = (f"{verb} pod {ns}/{victim}" for verb in ("deletes", "deleting"))
    else:
        what, doing = (
            f"{kill} replica {replica.actor_name} (a Ray job on the head) and {keep} pod "
            f"{ns}/{victim}"
            for kill, keep in (("kills", "keeps"), ("killing", "keeping"))
        )
    if not args.yes:
        raise UsageError(
            f"drill {args.which} {what} (the {role} engine): the endpoint is down until it "
            "recovers. Re-run with --yes"
        )
    clock = app.runtime.clock
    app.print(f"Drill {args.which}: {doing} (the {role} engine)")
    started = clock()
    deadline = started + args.timeout_minutes * 60
    with cluster.errors():
        if lose == "pod":
            cluster.client.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
        else:
            kill_replica(dashboard, replica.actor_name, app, deadline, args.interval)
    last = "not checked yet"
    ran = running = False
    while clock() < deadline:
        app.runtime.sleep(args.interval)
        elapsed = clock() - started
        state = checks.rayservice_state(cluster.find_rayservice(), config.application_name)
        running = state.running
        if not running:
            last = f"RayService: {state.summary()}"
            app.print(f"  {duration(elapsed):>8}  waiting: {last}")
            continue
        with cluster.errors():
            try:
                serve_json = dashboard.serve_applications()
            except cluster.kube.KubeAuthError:
                raise
            except cluster.kube.KubeApiError as err:
                last = f"Serve details unreadable: {err.reason or err}"
                app.print(f"  {duration(elapsed):>8}  waiting: {last}")
                continue
        if lose == "replica":
            new = replacement(where, serve_json, config.application_name, role, replica)
            if new is None:
                last = f"Serve: no new {role} replica RUNNING yet"
                app.print(f"  {duration(elapsed):>8}  waiting: {last}")
                continue
        ran = True
        result, findings = probe.run(cluster, serve_json, pd=True)
        if result.pending or result.failure:
            last = result.pending or result.failure
            app.print(f"  {duration(elapsed):>8}  probe: {last[:160]}")
            continue
        for finding in findings:
            app.print(finding.line())
        if lose == "replica":
            same = "in the same pod" if new.node_ip == replica.node_ip else "on another node"
            app.print(f"  new {role} replica {new.replica_id} {same} ({new.node_ip})")
        app.print(f"OK: the endpoint served again after {duration(elapsed)} (downtime)")
        return EXIT_OK
    event = last_warning(cluster)
    recover = (
        f"kubectl delete pod -n {ns} {' '.join(others) or '<' + other_role + ' pod>'}"
        if ran
        else f"python -m ray_pd_eks status  # then kubectl describe pod -n {ns} "
        + (f"<new {role} pod>" if lose == "pod" else victim)
    )
    lost = f"deleting {victim}" if lose == "pod" else f"killing {replica.actor_name}"
    raise CheckFailed(
        f"drill {args.which}: not recovered {args.timeout_minutes} min after {lost}: "
        f"{drill_verdict(last, ran, running)}; last warning event: {event}; recover with: {recover}"
    )


def _replica_on(where: Any, pods: Any, serve_json: Any, app_name: str, role: str, pod: str) -> Any:
    """The RUNNING ``role`` replica on worker pod ``pod`` (``engine_pods`` found it there);
    ``where`` is the readiness check's ``placement`` module."""
    ip = next(
        (p.ip for p in where.placement(pods, serve_json, app_name).pods if p.name == pod), None
    )
    return next(
        r
        for r in where.serve_replicas(serve_json, app_name)
        if r.role == role and r.state == "RUNNING" and r.node_ip == ip
    )


def replacement(where: Any, serve_json: Any, app_name: str, role: str, killed: Any) -> Any:
    """A RUNNING ``role`` replica other than ``killed`` (Serve's new one), or None; ``where``
    is the readiness check's ``placement`` module."""
    return next(
        (
            r
            for r in where.serve_replicas(serve_json, app_name)
            if r.role == role and r.state == "RUNNING" and r.replica_id != killed.replica_id
        ),
        None,
    )


def kill_job(actor_name: str, submission_id: str) -> dict[str, Any]:
    """The Ray Jobs API request (``POST /api/jobs/``) that kills one Serve replica's actor."""
    if not ACTOR_NAME.fullmatch(actor_name):
        raise CheckFailed(f"Serve named the replica {actor_name!r}: not a Serve replica actor")
    return {
        "entrypoint": f"python -c \"{KILL_REPLICA}\" '{actor_name}'",
        "submission_id": submission_id,
        "metadata": {"ray-pd-eks": "drill"},
    }


def kill_replica(dashboard: Any, actor_name: str, app: App, deadline: float, every: int) -> None:
    """Submit :func:`kill_job` through the dashboard's proxy and wait until the job ends; a
    job that does not succeed fails the drill with its message and its log's last lines."""
    clock = app.runtime.clock
    job = kill_job(actor_name, f"ray-pd-eks-drill-{int(clock())}")
    dashboard.call("POST", "api/jobs/", json_body=job)
    path = f"api/jobs/{job['submission_id']}"
    status, message = "PENDING", ""
    while clock() < deadline:
        info = dashboard.call("GET", path)
        status, message = str(info.get("status")), str(info.get("message") or "")
        if status in JOB_DONE:
            break
        app.runtime.sleep(min(every, 5))
    if status != "SUCCEEDED":
        logs = dashboard.call("GET", f"{path}/logs").get("logs") or ""
        tail = " | ".join(str(logs).strip().splitlines()[-5:])
        ended = (
            f"ended {status}: {message or 'no message'}"
            if status in JOB_DONE
            else f"was still {status} at --timeout-minutes"
        )
        raise CheckFailed(
            f"the Ray job {job['submission_id']} that kills {actor_name} {ended}; its log: "
            f"{tail or 'empty'}"
        )
    app.print(f"  Ray job {job['submission_id']}: {actor_name} killed")


def last_warning(cluster: Cluster) -> str:
    """The namespace's most recent Warning event, as one line (or "none")."""
    ns = cluster.app.config.namespace
    events = cluster.get(f"/api/v1/namespaces/{ns}/events", {"fieldSelector": "type=Warning"})
    checks = lambda_code.checks()
    items = [e for e in events.get("items") or [] if isinstance(e, dict)]
    if not items:
        return "none"
    items.sort(key=lambda e: str(checks.event_time(e) or ""))
    e = items[-1]
    obj = e.get("involvedObject") or {}
    what = f"{obj.get('kind', '?')}/{obj.get('name', '?')}"
    line = f"{what} {e.get('reason', '')}: {e.get('message', '')}"
    return line[:300]
