"""``drill``: delete one engine's worker pod, wait for the endpoint and the KV probe, report
the downtime; a stale peer fails with the reason, the event and the recover command.

KubeRay's and Serve's part (a replacement pod, the replica moving to it) is played between
polls with the harness clock's ``on_sleep`` hooks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from ray_pd_eks.cli import drill
from ray_pd_eks.cli.errors import CheckFailed
from tests import rbac
from tests.cli_fixtures import Harness, cli_harness
from tests.fakes import kube_api as fake
from tests.fakes.kube_api import FakeKubeApi

pytest_plugins = ["tests.fakes.fixtures"]

NEW_DECODE_POD = f"{fake.RAY_CLUSTER}-gpu-workers-worker-n3wp0"


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    monkeypatch.setattr(lambda_code.kv_probe(), "counter_sleep", lambda _: None)
    return cli_harness(kube_api, tmp_path)


def replace_decode_pod(server: FakeKubeApi) -> None:
    """KubeRay's replacement on the same node and IP, with fresh counters."""
    server.pods.append(fake.make_pod(NEW_DECODE_POD, node=fake.GPU_NODE_B, ip=fake.WORKER_IP_B))
    server.nixl_metrics[NEW_DECODE_POD] = {"xfer": 0.0, "bytes": 0.0, "failed": 0.0}
    server.kv_decode_pod = NEW_DECODE_POD


def app_down(server: FakeKubeApi) -> None:
    server.rayservice = fake.make_rayservice(ready=True, app_status="DEPLOYING")


def app_up(server: FakeKubeApi) -> None:
    server.rayservice = fake.make_rayservice(ready=True, app_status="RUNNING")


def recovered(server: FakeKubeApi) -> None:
    replace_decode_pod(server)
    app_up(server)


def test_decode_restart_measures_the_downtime(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [
        lambda: app_down(kube_api),
        lambda: recovered(kube_api),
    ]
    out = cli.succeeds("drill", "decode-restart", "--yes", "--interval", "10")
    (deleted,) = kube_api.requests_to("/pods/", "DELETE")
    assert deleted.path == f"/api/v1/namespaces/inference/pods/{fake.WORKER_POD_B}"
    assert "deleting pod inference/" + fake.WORKER_POD_B + " (the decode engine)" in out
    assert "waiting: RayService: " in out
    assert "OK: the endpoint served again after 20s (downtime)" in out
    assert "OK    integrity     code " in out
    assert "OK    transfer      1 transfer(s)" in out


def stale_peer(server: FakeKubeApi, *events: dict[str, Any]) -> None:
    """Serving, but every probe's KV pull fails (a stale peer), with these warning events."""
    server.set_stage("serving")
    server.kv_failed_per_chat = 1
    server.events = list(events)


def test_a_stale_peer_fails_with_reason_event_and_recover_command(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """Prefill came back RUNNING, but decode's pulls keep failing: a stale peer."""
    stale_peer(
        kube_api,
        fake.make_event(fake.WORKER_POD_B, "NixlError", "transfer to stale agent failed", ago=5),
    )
    err = cli.fails("drill", "prefill-restart", "--yes", "--timeout-minutes", "1")
    assert f"not recovered 1 min after deleting {fake.WORKER_POD_A}" in err
    assert "decode holds a stale peer (1 NIXL transfer(s) failed during the probe" in err
    assert "transfer to stale agent failed" in err
    assert f"recover with: kubectl delete pod -n inference {fake.WORKER_POD_B}" in err


def test_a_500_from_the_running_endpoint_is_a_stale_peer(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """vLLM 0.26 answers a request whose KV load failed with HTTP 500: before, the drill took
    it for "not judged yet", so its stale-peer verdict could never appear."""
    kube_api.set_stage("serving")
    kube_api.fail_chat(500, {"object": "error", "message": "Internal server error", "code": 500})
    err = cli.fails("drill", "prefill-restart", "--yes", "--timeout-minutes", "1")
    assert "decode holds a stale peer (KV transfer failed: POST /v1/chat/completions" in err
    assert f"recover with: kubectl delete pod -n inference {fake.WORKER_POD_B}" in err


def test_the_kv_load_sign_is_the_handlers_message() -> None:
    assert lambda_code.kv_probe().KV_LOAD_FAILED in drill.STALE_PEER_SIGNS


def test_never_running_again_says_so(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [lambda: app_down(kube_api)] * 10
    err = cli.fails("drill", "decode-restart", "--yes", "--timeout-minutes", "1")
    assert "the RayService did not return to RUNNING" in err
    assert "recover with: python -m ray_pd_eks status" in err


@pytest.mark.parametrize(
    ("which", "says"),
    [
        ("prefill-restart", f"deletes pod inference/{fake.WORKER_POD_A} (the prefill engine)"),
        (
            "prefill-replica-restart",
            f"and keeps pod inference/{fake.WORKER_POD_A} (the prefill engine)",
        ),
    ],
)
def test_without_yes_nothing_is_deleted_or_submitted(
    kube_api: FakeKubeApi, cli: Harness, which: str, says: str
) -> None:
    kube_api.set_stage("serving")
    err = cli.fails("drill", which, code=2)
    assert says in err
    assert kube_api.requests_to("/pods/", "DELETE") == []
    assert kube_api.ray_jobs == {}


@pytest.mark.parametrize(
    ("last", "ran", "running", "says"),
    [
        ("1 NIXL transfer(s) failed during the probe", True, True, "stale peer"),
        ("the NIXL transfer count did not rise during the probe", True, True, "stale peer"),
        ("KV integrity probe failed: the answer does not contain the code", True, True, "stale"),
        (
            "KV transfer failed: POST /v1/chat/completions ... answered HTTP 500",
            True,
            True,
            "stale",
        ),
        ("GET /metrics of pod x: 503", True, True, "the probe never passed (GET /metrics"),
        ("Serve: no new decode replica RUNNING yet", False, True, "the probe never ran (Serve:"),
        ("RayService: Ready=False", False, False, "did not return to RUNNING"),
        # Down again after a probe: what holds at the deadline is that it is not RUNNING.
        ("RayService: Ready=False", True, False, "did not return to RUNNING"),
        ("1 NIXL transfer(s) failed during the probe", True, False, "did not return to RUNNING"),
    ],
)
def test_drill_verdicts(last: str, ran: bool, running: bool, says: str) -> None:
    assert says in drill.drill_verdict(last, ran, running)


def restart_replica(server: FakeKubeApi, deployment: str, **placed: str) -> None:
    """Serve's new replica of ``deployment`` on the same node (the pod stays), or where
    ``placed`` says (``node_id``, ``node_ip``)."""
    assert server.serve_applications is not None
    deployments = server.serve_applications["applications"][fake.APP_NAME]["deployments"]
    (old,) = deployments[deployment]["replicas"]
    new = {
        **old,
        "replica_id": "n3wr3p1c",
        "actor_name": old["actor_name"][:-8] + "n3wr3p1c",
        **placed,
    }
    deployments[deployment]["replicas"] = [new]


def test_decode_replica_restart_kills_the_replica_and_keeps_the_pod(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    (decode,) = [
        r
        for r in lambda_code.placement().serve_replicas(kube_api.serve_applications, fake.APP_NAME)
        if r.role == "decode"
    ]
    cli.clock.on_sleep = [
        lambda: None,  # the Ray job's first poll
        lambda: app_down(kube_api),
        lambda: app_up(kube_api),  # RUNNING, with the killed replica still listed
        lambda: restart_replica(kube_api, fake.DECODE_DEPLOYMENT),
    ]
    out = cli.succeeds("drill", "decode-replica-restart", "--yes", "--interval", "10")
    assert kube_api.requests_to("/pods/", "DELETE") == []
    ((sid, job),) = kube_api.ray_jobs.items()
    assert sid.startswith("ray-pd-eks-drill-")
    assert job["metadata"] == {"ray-pd-eks": "drill"}  # the job names who ran it
    assert job["entrypoint"] == f"python -c \"{drill.KILL_REPLICA}\" '{decode.actor_name}'"
    assert (
        f"killing replica {decode.actor_name} (a Ray job on the head) and keeping pod "
        f"inference/{fake.WORKER_POD_B} (the decode engine)"
    ) in out
    assert f"Ray job {sid}: {decode.actor_name} killed" in out
    assert "waiting: Serve: no new decode replica RUNNING yet" in out
    assert f"new decode replica n3wr3p1c in the same pod ({fake.WORKER_IP_B})" in out
    assert "OK: the endpoint served again after 40s (downtime)" in out


@pytest.mark.parametrize(
    ("job", "args", "says"),
    [
        pytest.param(
            {
                "job_status": "FAILED",
                "job_message": "Job entrypoint command failed",
                "job_logs": "a\nb\nValueError: Failed to look up actor with name 'SERVE_REPLICA'",
            },
            (),
            "ended FAILED: Job entrypoint command failed; its log: a | b | ValueError",
            id="failed-with-its-message-and-log",
        ),
        pytest.param(
            {"job_status": "RUNNING"},
            ("--timeout-minutes", "1"),
            "was still RUNNING at --timeout-minutes; its log: killed",
            id="still-running-at-the-deadline",
        ),
    ],
)
def test_a_kill_job_that_does_not_succeed_fails_the_drill(
    kube_api: FakeKubeApi, cli: Harness, job: dict[str, str], args: tuple[str, ...], says: str
) -> None:
    kube_api.set_stage("serving")
    for attribute, value in job.items():
        setattr(kube_api, attribute, value)
    err = cli.fails("drill", "prefill-replica-restart", "--yes", *args)
    assert "that kills SERVE_REPLICA::qwen#" in err
    assert says in err


@pytest.mark.parametrize(
    "name",
    ["SERVE_REPLICA::qwen#Prefill:qwen3_5-9b#a1b2c3", "SERVE_REPLICA::app#Decode:m-1.5#x"],
)
def test_a_serve_replica_name_goes_on_the_job_line(name: str) -> None:
    assert drill.kill_job(name, "s")["entrypoint"].endswith(f"'{name}'")


@pytest.mark.parametrize(
    "name", ["SERVE_REPLICA::x'; rm -rf /; '", "other", "SERVE_REPLICA::a b", "SERVE_REPLICA::"]
)
def test_another_name_is_refused(name: str) -> None:
    with pytest.raises(CheckFailed, match="not a Serve replica actor"):
        drill.kill_job(name, "s")


@pytest.mark.parametrize(
    ("which", "lose"),
    [("decode-restart", "pod"), ("decode-replica-restart", "replica")],
)
def test_the_drills_role_covers_each_request_and_each_rule_is_used(
    kube_api: FakeKubeApi, cli: Harness, which: str, lose: str
) -> None:
    """DRILL_RULES (docs/readiness.md) is least privilege for each kind of drill: every
    request the drill made is allowed, and every rule allowed one of them."""
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [
        lambda: None,
        lambda: recovered(kube_api) if lose == "pod" else None,
        lambda: restart_replica(kube_api, fake.DECODE_DEPLOYMENT),
    ]
    assert cli.run("drill", which, "--yes", "--interval", "10").code == 0
    rules = [
        rbac.Rule.from_json(r)
        for r in drill.drill_rules(fake.RAYSERVICE, fake.RAY_TOKEN_SECRET, lose)
    ]
    used: set[int] = set()
    for request in kube_api.requests:
        attrs = rbac.attributes(request.method, request.path, request.query)
        matching = [i for i, rule in enumerate(rules) if rule.matches(attrs)]
        assert matching, f"drill request not covered by DRILL_RULES: {attrs}"
        used.update(matching)
    assert used == set(range(len(rules)))


def test_the_drills_rules_name_each_object_they_allow() -> None:
    rules = drill.drill_rules("rs", "tok")
    named = [(r["resources"], r["verbs"], r.get("resourceNames")) for r in rules]
    assert named == [
        (["rayservices"], ["get"], ["rs"]),
        (["pods", "events"], ["list"], None),
        (["pods"], ["delete"], None),
        (["secrets"], ["get"], ["tok"]),
        (["services/proxy"], ["get"], ["rs-head-svc:8265"]),
        (["services/proxy"], ["create"], ["rs-head-svc:8265"]),
        (["services/proxy"], ["get", "create"], ["rs-serve-svc:8000"]),
        (["pods/proxy"], ["get"], None),
    ]
    assert all("names" not in r and "only" not in r for r in rules)
    # Deleting a pod never needs the job submission, killing a replica never the pod delete.
    assert (
        len(drill.drill_rules("rs", "tok", "pod"))
        == len(drill.drill_rules("rs", "tok", "replica"))
        == 7
    )
    assert {"verbs": ["create"], "resourceNames": ["rs-head-svc:8265"]}.items() not in [
        r.items() for r in drill.drill_rules("rs", "tok", "pod")
    ]


def test_the_never_running_verdict_is_that_sentence() -> None:
    assert drill.drill_verdict("x", False, False) == "the RayService did not return to RUNNING"
    assert drill.drill_verdict("x", False, True) == (
        "the RayService is RUNNING but the probe never ran (x)"
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--interval", "0"), 2),
        (("--timeout-minutes", "0"), 2),
        # Accepted: the drill runs (and, 1 s polls firing no recovery here, times out).
        (("--interval", "1", "--timeout-minutes", "1"), 1),
    ],
)
def test_interval_and_timeout_at_one_are_accepted_below_refused(
    kube_api: FakeKubeApi, cli: Harness, args: tuple[str, ...], code: int
) -> None:
    kube_api.set_stage("serving")
    # Each reading of the clock advances it 1 s (a request's work), so the minute runs out
    # after a few 1-s polls rather than sixty (each poll is a dozen HTTPS requests).
    cli.clock.tick = 1
    result = cli.run("drill", "decode-restart", "--yes", *args)
    assert result.code == code, result.out + result.err
    if code == 2:
        assert result.err == "error: --timeout-minutes and --interval must be at least 1\n"
        assert kube_api.requests_to("/pods/", "DELETE") == []
    else:
        assert "not recovered 1 min after deleting" in result.err
        assert len(cli.clock.sleeps) > 1 and set(cli.clock.sleeps) == {1}


def test_an_aggregated_app_has_no_drill(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    err = cli.fails("drill", "decode-restart", "--yes", "-c", "servingMode=aggregated", code=2)
    assert err == "error: drill needs servingMode=pd: an aggregated app has no prefill/decode\n"


def test_the_drill_polls_until_the_timeout_and_not_past_it(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [lambda: app_down(kube_api)] * 20
    result = cli.run(
        "drill", "decode-restart", "--yes", "--timeout-minutes", "1", "--interval", "10"
    )
    assert result.code == 1
    # Checks at 10, 20, ... 60 s: the one at 60 s is the deadline, not before it.
    assert result.out.count("waiting: RayService") == 6, result.out


def test_a_failed_probe_is_retried_until_one_passes(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.kv_failed_per_chat = 1

    def heal() -> None:
        kube_api.kv_failed_per_chat = 0

    cli.clock.on_sleep = [lambda: replace_decode_pod(kube_api), heal]
    out = cli.succeeds("drill", "decode-restart", "--yes", "--interval", "10")
    assert "probe: 1 NIXL transfer(s) failed" in out
    assert "OK: the endpoint served again after 20s (downtime)" in out


def test_the_last_warning_is_the_newest_warning_event_as_kind_name_reason_message(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    stale_peer(
        kube_api,
        fake.make_event(fake.WORKER_POD_B, "NixlError", "newer failure", ago=5),
        fake.make_event(fake.WORKER_POD_A, "BackOff", "older failure", ago=500),
    )
    err = cli.fails("drill", "prefill-restart", "--yes", "--timeout-minutes", "1")
    assert f"last warning event: Pod/{fake.WORKER_POD_B} NixlError: newer failure;" in err
    (listed,) = kube_api.requests_to("/namespaces/inference/events", "GET")
    assert listed.query.get("fieldSelector") == "type=Warning"


class _EventsOnly:
    """What ``drill.last_warning`` reads of a cluster: its namespace and its Warning events."""

    def __init__(self, *events: dict[str, Any]) -> None:
        self.events = list(events)
        self.app = SimpleNamespace(config=SimpleNamespace(namespace=fake.NAMESPACE))

    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        assert path == f"/api/v1/namespaces/{fake.NAMESPACE}/events"
        return {"items": self.events}


def _untimed(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with none of the times an Event may carry."""
    for key in ("series", "lastTimestamp", "eventTime", "firstTimestamp"):
        event.pop(key, None)
    event.get("metadata", {}).pop("creationTimestamp", None)
    return event


def test_an_event_without_a_time_is_never_the_last_warning() -> None:
    timed = fake.make_event(fake.WORKER_POD_A, "BackOff", "old but timed", ago=500)
    untimed = _untimed(fake.make_event(fake.WORKER_POD_B, "NixlError", "no time"))
    for events in ((timed, untimed), (untimed, timed)):
        got = drill.last_warning(_EventsOnly(*events))  # type: ignore[arg-type]
        assert got == f"Pod/{fake.WORKER_POD_A} BackOff: old but timed"


def test_a_warning_without_object_reason_or_message_reads_as_question_marks_and_blanks() -> None:
    bare = {"type": "Warning", "lastTimestamp": fake.ts(ago=5)}
    assert drill.last_warning(_EventsOnly(bare)) == "?/? : "  # type: ignore[arg-type]


@pytest.mark.parametrize("extra", [0, 1], ids=["at-300", "one-past"])
def test_the_last_warning_is_cut_at_300_characters(extra: int) -> None:
    head = f"Pod/{fake.WORKER_POD_A} BackOff: "
    message = "m" * (300 - len(head) + extra)
    event = fake.make_event(fake.WORKER_POD_A, "BackOff", message)
    got = drill.last_warning(_EventsOnly(event))  # type: ignore[arg-type]
    assert got == (head + message)[:300] and len(got) == 300


def test_without_warning_events_the_last_warning_is_none(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    kube_api.events = []
    cli.clock.on_sleep = [lambda: app_down(kube_api)] * 10
    result = cli.run("drill", "decode-restart", "--yes", "--timeout-minutes", "1")
    assert result.code == 1 and "last warning event: none;" in result.err


def _replica(server: FakeKubeApi, role: str) -> Any:
    """The ``role`` replica Serve lists now."""
    (found,) = [
        r
        for r in lambda_code.placement().serve_replicas(server.serve_applications, fake.APP_NAME)
        if r.role == role
    ]
    return found


def serve_unreadable(server: FakeKubeApi) -> None:
    """The head's dashboard answers no Serve details (its Service has no ready endpoint)."""
    server.serve_applications = None


def test_serve_details_unreadable_for_a_poll_are_read_again_at_the_next(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    serve = kube_api.serve_applications

    def recovered_but_unreadable() -> None:
        recovered(kube_api)
        serve_unreadable(kube_api)

    def readable() -> None:
        kube_api.serve_applications = serve

    cli.clock.on_sleep = [recovered_but_unreadable, readable]
    out = cli.succeeds("drill", "decode-restart", "--yes", "--interval", "10")
    # The first poll's read is retried after 1 and 2 s (the client's backoff); the next poll
    # reads the details and the probe passes.
    assert cli.clock.sleeps == [10, 1.0, 2.0, 10]
    assert (
        "waiting: Serve details unreadable: no endpoints available for service "
        f'"{fake.RAYSERVICE}-head-svc"'
    ) in out
    assert "OK: the endpoint served again after 23s (downtime)" in out
    assert "OK    transfer      1 transfer(s)" in out


def test_serve_details_unreadable_after_the_probe_ran_are_the_reason_given(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """The replacement ran and the probe failed once; then Serve's details stay unreadable until
    the deadline: the last thing seen is that, with the API server's reason."""
    stale_peer(kube_api)
    cli.clock.on_sleep = [lambda: None, lambda: serve_unreadable(kube_api)]
    err = cli.fails(
        "drill", "prefill-restart", "--yes", "--timeout-minutes", "1", "--interval", "20"
    )
    assert (
        "the RayService is RUNNING but the probe never passed (Serve details unreadable: no "
        f'endpoints available for service "{fake.RAYSERVICE}-head-svc"); last warning event: '
        "none; "
    ) in err
    assert err.endswith(f"recover with: kubectl delete pod -n inference {fake.WORKER_POD_B}\n")


def test_a_denied_read_of_serve_details_stops_the_drill_with_the_access_fix(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [
        lambda: kube_api.inject_fault(403, path_contains="api/serve/applications/"),
    ]
    result = cli.run("drill", "decode-restart", "--yes", "--interval", "10")
    assert result.code == 3, result.out + result.err
    assert "denied" in result.err and "settings --add-admin-me" in result.err
    assert cli.clock.sleeps == [10]  # no second poll
    assert kube_api.requests_to("/v1/chat/completions") == []


@pytest.mark.parametrize(
    ("which", "other", "recover"),
    [
        pytest.param("decode-restart", None, fake.WORKER_POD_A, id="decode-names-prefills-pod"),
        pytest.param(
            "decode-restart", fake.PREFILL_DEPLOYMENT, "<prefill pod>", id="no-prefill-pod"
        ),
        pytest.param("prefill-restart", fake.DECODE_DEPLOYMENT, "<decode pod>", id="no-decode-pod"),
    ],
)
def test_the_recover_command_names_the_other_engines_pod_or_a_placeholder(
    kube_api: FakeKubeApi, cli: Harness, which: str, other: str | None, recover: str
) -> None:
    """A stale peer is recovered by restarting the other engine's pod; when the drill found no
    RUNNING replica of the other engine (its ``other`` deployment's replica still STARTING),
    the command says which pod to fill in."""
    stale_peer(kube_api)
    if other is not None:
        assert kube_api.serve_applications is not None
        deployments = kube_api.serve_applications["applications"][fake.APP_NAME]["deployments"]
        deployments[other]["replicas"][0]["state"] = "STARTING"
    err = cli.fails("drill", which, "--yes", "--timeout-minutes", "1")
    assert "decode holds a stale peer" in err
    assert err.endswith(f"; recover with: kubectl delete pod -n inference {recover}\n")


def test_the_probe_reads_the_counters_of_the_decode_engines_pod_alone(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """Serve's details read at that poll name decode's pod: the prefill pod's metrics are never
    read (its engine counts no pulls)."""
    kube_api.set_stage("serving")
    cli.clock.on_sleep = [lambda: recovered(kube_api)]
    cli.succeeds("drill", "decode-restart", "--yes", "--interval", "10")
    read = {r.path for r in kube_api.requests_to(":8080/proxy/metrics", "GET")}
    assert read == {f"/api/v1/namespaces/inference/pods/{NEW_DECODE_POD}:8080/proxy/metrics"}


@pytest.mark.parametrize("extra", [0, 1], ids=["at-160", "one-past"])
def test_a_probe_line_shows_the_first_160_characters(
    kube_api: FakeKubeApi, cli: Harness, extra: int
) -> None:
    """The poll's line is cut at 160 characters; the verdict keeps the whole reason."""
    kube_api.set_stage("serving")
    head = f"POST /v1/chat/completions via {fake.RAYSERVICE}-serve-svc:8000: "
    reason = head + "r" * (160 - len(head) + extra)
    kube_api.fail_chat(503, reason[len(head) :])
    result = cli.run(
        "drill", "decode-restart", "--yes", "--timeout-minutes", "1", "--interval", "60"
    )
    assert result.code == 1, result.out + result.err
    (line,) = [x for x in result.out.splitlines() if "probe:" in x]
    assert line == f"     1m00s  probe: {reason[:160]}"
    assert f"the probe never passed ({reason});" in result.err


def test_a_new_replica_on_another_node_is_named_there(kube_api: FakeKubeApi, cli: Harness) -> None:
    """Serve may start the new replica in another worker pod with a free GPU."""
    kube_api.set_stage("serving")
    other_pod, other_ip = f"{fake.RAY_CLUSTER}-gpu-workers-worker-0th3r", "10.0.1.22"

    def elsewhere() -> None:
        kube_api.pods.append(fake.make_pod(other_pod, node="ip-10-0-1-12.node", ip=other_ip))
        kube_api.nixl_metrics[other_pod] = {"xfer": 0.0, "bytes": 0.0, "failed": 0.0}
        kube_api.kv_decode_pod = other_pod
        restart_replica(kube_api, fake.DECODE_DEPLOYMENT, node_ip=other_ip, node_id="d" * 56)

    cli.clock.on_sleep = [elsewhere]
    out = cli.succeeds("drill", "decode-replica-restart", "--yes", "--interval", "10")
    assert f"  new decode replica n3wr3p1c on another node ({other_ip})\n" in out
    assert "OK: the endpoint served again after 10s (downtime)" in out


def test_a_replica_drill_without_a_new_replica_names_the_killed_one(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    killed = _replica(kube_api, "decode")
    result = cli.run("drill", "decode-replica-restart", "--yes", "--timeout-minutes", "1")
    assert result.code == 1, result.out + result.err
    assert "waiting: Serve: no new decode replica RUNNING yet" in result.out
    assert result.err.endswith(
        f"not recovered 1 min after killing {killed.actor_name}: the RayService is RUNNING but "
        "the probe never ran (Serve: no new decode replica RUNNING yet); last warning event: "
        "none; recover with: python -m ray_pd_eks status  # then kubectl describe pod -n "
        f"inference {fake.WORKER_POD_B}\n"
    )
    assert kube_api.requests_to("/pods/", "DELETE") == []
