"""``drill``: lose one engine on purpose and measure how long the endpoint is down.

``prefill-restart`` / ``decode-restart`` delete the worker pod that runs that engine's Serve
replica. KubeRay creates a new worker pod, Ray Serve places a new replica on it, and vLLM
loads the model again. The drill polls until the RayService is RUNNING again and the KV
integrity probe passes (the readiness check's own ``kv_probe``: the answer holds the code, the
decode engines' NIXL transfer count rose, none failed), and reports the downtime.

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

Least privilege (docs/readiness.md lists it; ``DRILL_RULES`` is the Role, and the tests prove
each request is covered and each rule used): ``get`` the RayService, ``list`` pods and
events, ``delete`` pods, ``get`` the Ray token Secret, ``services/proxy`` on the head's
dashboard (``get``) and Serve (``get``, ``create``), ``pods/proxy`` ``get`` (the counters).
"""

from __future__ import annotations

import argparse
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli import probe
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_OK, CheckFailed, UsageError
from ray_pd_eks.cli.output import duration

NAME = "drill"
HELP = "delete the prefill or decode engine's pod and time the recovery (KV probe included)"
DESCRIPTION = """\
Recovery drill: delete the worker pod that runs the prefill (prefill-restart) or decode
(decode-restart) engine, then poll until the RayService is RUNNING again and the KV integrity
probe passes (the answer holds the code, the NIXL transfer count rose, no transfer failed).
Prints the downtime. The endpoint is down meanwhile: it asks for --yes.

Exit 1 when the endpoint does not recover within --timeout-minutes; when the replacement runs
but the probe keeps failing (decode holding a stale prefill peer), it says so, with the last
warning event and the command that recovers."""

DRILLS = {"prefill-restart": "prefill", "decode-restart": "decode"}
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
# names are filled from the settings by :func:`drill_rules`.
DRILL_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["ray.io"], "resources": ["rayservices"], "verbs": ["get"], "names": "rs"},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "names": "token"},
    {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"], "names": "head"},
    {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "verbs": ["get", "create"],
        "names": "serve",
    },
    {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
)


def drill_rules(ray_service: str, token_secret: str) -> list[dict[str, Any]]:
    """``DRILL_RULES`` as RBAC rules for this deployment's names."""
    names = {
        "rs": ray_service,
        "token": token_secret,
        "head": f"{ray_service}-head-svc:8265",
        "serve": f"{ray_service}-serve-svc:8000",
    }
    rules = []
    for rule in DRILL_RULES:
        out = {k: v for k, v in rule.items() if k != "names"}
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


def drill_verdict(last_probe_failure: str, running_since_delete: bool) -> str:
    """Why the endpoint did not recover: a stale peer when the replacement runs but KV does
    not arrive, else that it never came back."""
    if running_since_delete and any(s in last_probe_failure for s in STALE_PEER_SIGNS):
        return (
            "the replacement is RUNNING but the KV cache does not arrive: decode holds a stale "
            f"peer ({last_probe_failure})"
        )
    if running_since_delete:
        return f"the RayService is RUNNING but the probe never passed ({last_probe_failure})"
    return "the RayService did not return to RUNNING"


def run(app: App) -> int:
    args, config = app.args, app.config
    if args.timeout_minutes < 1 or args.interval < 1:
        raise UsageError("--timeout-minutes and --interval must be at least 1")
    if config.serving_mode != "pd":
        raise UsageError("drill needs servingMode=pd: an aggregated app has no prefill/decode")
    role = DRILLS[args.which]
    checks = lambda_code.checks()
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
    other_role = "decode" if role == "prefill" else "prefill"
    others = engine_pods(pods, serve_json, config.application_name, other_role)
    if not args.yes:
        raise UsageError(
            f"drill {args.which} deletes pod {ns}/{victim} (the {role} engine): the endpoint "
            "is down until it recovers. Re-run with --yes"
        )
    clock = app.runtime.clock
    app.print(f"Drill {args.which}: deleting pod {ns}/{victim} (the {role} engine)")
    started = clock()
    with cluster.errors():
        cluster.client.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
    deadline = started + args.timeout_minutes * 60
    last = "not checked yet"
    ran = False
    while clock() < deadline:
        app.runtime.sleep(args.interval)
        elapsed = clock() - started
        state = checks.rayservice_state(cluster.find_rayservice(), config.application_name)
        if not state.running:
            last = f"RayService: {state.summary()}"
            app.print(f"  {duration(elapsed):>8}  waiting: {last}")
            continue
        ran = True
        with cluster.errors():
            try:
                serve_json = dashboard.serve_applications()
            except cluster.kube.KubeAuthError:
                raise
            except cluster.kube.KubeApiError as err:
                last = f"Serve details unreadable: {err.reason or err}"
                continue
        result, findings = probe.run(cluster, serve_json, pd=True)
        if result.pending or result.failure:
            last = result.pending or result.failure
            app.print(f"  {duration(elapsed):>8}  probe: {last[:160]}")
            continue
        for finding in findings:
            app.print(finding.line())
        app.print(f"OK: the endpoint served again after {duration(elapsed)} (downtime)")
        return EXIT_OK
    event = last_warning(cluster)
    recover = (
        f"kubectl delete pod -n {ns} {' '.join(others) or '<' + other_role + ' pod>'}"
        if ran
        else f"python -m ray_pd_eks status  # then kubectl describe pod -n {ns} <new {role} pod>"
    )
    raise CheckFailed(
        f"drill {args.which}: not recovered {args.timeout_minutes} min after deleting {victim}: "
        f"{drill_verdict(last, ran)}; last warning event: {event}; recover with: {recover}"
    )


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
