"""NIXL's start-up evidence in long-running engines' logs: the tail, the file's beginning,
rotated pieces, dead engines' files; and what the scheduled probe publishes when it cannot see
the provider. Against the fake API server's Ray dashboard (``tests/fakes/kube_api.py``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.fakes import kube_api as fake
from tests.fakes.kube_api import FakeKubeApi, make_ray_actor, nixl_log, provider_log
from tests.readiness import checks, handler, kube, nixl_logs, ray_dashboard

pytest_plugins = ["tests.fakes.fixtures"]  # kube_api, probe_env

GPU_WORKER = fake.PREFILL_WORKER_ID[::-1]  # the vLLM GPU worker beside the prefill replica
OUT = f"worker-{GPU_WORKER}-01000000-5151.out"
ERR = f"worker-{GPU_WORKER}-01000000-5151.err"
REPLICA_OUT = f"worker-{fake.PREFILL_WORKER_ID}-01000000-4242.out"
REPLICA_ERR = f"worker-{fake.PREFILL_WORKER_ID}-01000000-4242.err"
PREFILL = f"prefill@{fake.WORKER_IP_A}"
DECODE = f"decode@{fake.WORKER_IP_B}"
STATS = (
    "INFO 12-01 04:05:06 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs\n"
)


def stats(count: int) -> str:
    """What vLLM logs for hours after start-up: a stats line every few seconds."""
    return STATS * count


@pytest.fixture
def dashboard(kube_api: FakeKubeApi) -> Any:
    kube_api.set_stage("serving")
    client = kube.KubeClient(
        kube_api.url, kube_api.ca_data, lambda: "k8s-aws-v1.t", sleep=lambda _: None
    )
    return ray_dashboard.RayDashboard(
        client, fake.NAMESPACE, fake.RAYSERVICE, token_secret=fake.RAY_TOKEN_SECRET
    )


def read(kube_api: FakeKubeApi, dashboard: Any, **kwargs: Any) -> Any:
    return nixl_logs.read_nixl_backends(
        dashboard, kube_api.serve_applications, fake.APP_NAME, **kwargs
    )


def prefill_logs(kube_api: FakeKubeApi) -> dict[str, str]:
    return kube_api.ray_logs[fake.RAY_NODE_A]


def reads(kube_api: FakeKubeApi) -> list[tuple[str, str]]:
    """(filename, lines) of every log read on the prefill node, in order."""
    return [
        (r.query["filename"], r.query["lines"])
        for r in kube_api.requests_to("api/v0/logs/file")
        if r.query.get("node_id") == fake.RAY_NODE_A
    ]


# --- the beginning of a long file ------------------------------------------------------------


def test_start_up_lines_beyond_the_tail_are_read_from_the_files_beginning(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """Days of stats lines push NIXL's start-up lines out of the last 3000 lines: the reader
    then reads the file's beginning (lines=-1) and finds both."""
    logs = prefill_logs(kube_api)
    logs[OUT] = nixl_log("LIBFABRIC") + stats(5000)
    logs[ERR] = provider_log("efa") + stats(5000)
    report = read(kube_api, dashboard)
    assert report.backends[0] == (f"prefill@{fake.WORKER_IP_A}", "LIBFABRIC")
    assert report.providers[0] == (f"prefill@{fake.WORKER_IP_A}", "efa")
    assert report.unseen == ()
    assert (OUT, "3000") in reads(kube_api) and (OUT, "-1") in reads(kube_api)
    assert (ERR, "-1") in reads(kube_api)
    assert report.files_read == len(kube_api.requests_to("api/v0/logs/file"))


def test_a_tail_shorter_than_asked_is_the_whole_file_and_is_not_read_again(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """A tail of 2998 lines where 3000 were asked for is the whole file; 2999 may be 3000 with
    an unterminated last line (which Ray's log agent counts), so the beginning is read."""
    logs = prefill_logs(kube_api)
    logs[OUT] = nixl_log(None) + stats(2998 - nixl_log(None).count("\n"))
    logs[ERR] = provider_log(None)
    report = read(kube_api, dashboard)
    assert (OUT, "-1") not in reads(kube_api)
    files = len(reads(kube_api))
    assert report.backends[0][1] == (
        f"unknown: no 'Backend ... was instantiated' line in {files} log file(s) on {PREFILL}"
    )
    assert report.providers[0][1] == (
        f"unknown: no 'Discovered <n> EFA|tcp devices' line in {files} log file(s)"
    )
    assert f"prefill@{fake.WORKER_IP_A}" not in report.unseen  # read in full: never logged

    kube_api.requests.clear()
    logs[OUT] += STATS
    read(kube_api, dashboard)
    assert (OUT, "-1") in reads(kube_api)


@pytest.mark.parametrize("offset, found", [(0, True), (1, False)])
def test_the_head_read_stops_at_its_byte_limit(
    kube_api: FakeKubeApi, dashboard: Any, offset: int, found: bool
) -> None:
    """A provider line whose last word ends at the head read's last byte is found; one byte
    later it is not, and the engine is unseen (its start-up was not read in full), never a
    pass."""
    logs = prefill_logs(kube_api)
    line = provider_log("efa").splitlines(True)[-1]
    assert line.endswith("devices\n")
    padding = "x" * 79 + "\n"
    logs[ERR] = padding * 100 + "y" * offset + line + stats(4000)
    limit = 100 * len(padding) + len(line) - 1
    report = read(kube_api, dashboard, head_bytes=limit)
    label = f"prefill@{fake.WORKER_IP_A}"
    assert (dict(report.providers)[label] == "efa") is found
    assert (label in report.unseen) is not found
    if not found:
        assert f"not within the first {limit} bytes of {ERR}" in dict(report.providers)[label]


@pytest.mark.parametrize("size", [4096, 4095])
def test_read_log_head_reads_at_most_max_bytes_and_says_whether_that_was_all(
    kube_api: FakeKubeApi, dashboard: Any, size: int
) -> None:
    prefill_logs(kube_api)[OUT] = "z" * size
    text, whole = dashboard.read_log_head(fake.RAY_NODE_A, OUT, max_bytes=4096)
    assert text == "z" * size
    assert whole is (size < 4096)
    (request,) = kube_api.requests_to("api/v0/logs/file")
    assert request.query["lines"] == "-1"


def test_read_log_head_stops_once_its_condition_holds(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    prefill_logs(kube_api)[OUT] = "a" * 70_000 + "FOUND\n" + "b" * 500_000
    text, whole = dashboard.read_log_head(
        fake.RAY_NODE_A, OUT, max_bytes=1 << 20, until=lambda t: "FOUND" in t
    )
    assert "FOUND" in text and not whole
    assert len(text) <= 2 * kube.READ_CHUNK_BYTES  # up to the chunk that held it, no further


def test_read_log_head_asks_for_the_whole_file(kube_api: FakeKubeApi, dashboard: Any) -> None:
    """The same query as the tail read (``read_log``), with ``lines=-1``: from offset 0."""
    prefill_logs(kube_api)[OUT] = "z\n"
    dashboard.read_log_head(fake.RAY_NODE_A, OUT, max_bytes=4096)
    (request,) = kube_api.requests_to("api/v0/logs/file")
    assert request.query == {"node_id": fake.RAY_NODE_A, "filename": OUT, "lines": "-1"}


# The query parameters Ray 2.58's log API reads (dashboard/modules/state/state_head.py
# StateHead.get_logs): any other is ignored, so sending one would only mislead a reader.
RAY_LOG_QUERY = {
    "timeout",
    "node_id",
    "node_ip",
    "filename",
    "download_filename",
    "actor_id",
    "task_id",
    "submission_id",
    "pid",
    "lines",
    "interval",
    "suffix",
    "attempt_number",
    "filter_ansi_code",
}


def test_log_reads_send_only_parameters_ray_reads(kube_api: FakeKubeApi, dashboard: Any) -> None:
    """``format=text`` was sent once; Ray 2.58 ignores it (the body is the file's bytes)."""
    prefill_logs(kube_api)[OUT] = "z\n"
    dashboard.read_log(fake.RAY_NODE_A, OUT, lines=10)
    dashboard.read_log_head(fake.RAY_NODE_A, OUT, max_bytes=4096)
    requests = kube_api.requests_to("api/v0/logs/file")
    assert len(requests) == 2
    for request in requests:
        assert set(request.query) <= RAY_LOG_QUERY


@pytest.mark.parametrize("stop", [False, True])
def test_a_head_read_cut_inside_a_character_is_replaced_not_an_error(
    kube_api: FakeKubeApi, dashboard: Any, stop: bool
) -> None:
    """The byte cap (and each chunk ``until`` sees) may end inside a UTF-8 character."""
    prefill_logs(kube_api)[OUT] = "é" * 3000  # 2 bytes each
    seen: list[str] = []

    def until(text: str) -> bool:
        seen.append(text)
        return False

    text, whole = dashboard.read_log_head(
        fake.RAY_NODE_A, OUT, max_bytes=4095, until=until if stop else None
    )
    assert text == "é" * 2047 + "\ufffd" and not whole
    assert seen == ([text] if stop else [])  # checked on the chunk read, decoded the same way


@pytest.mark.parametrize("size", [kube.READ_CHUNK_BYTES + 10, kube.READ_CHUNK_BYTES + 9])
def test_a_head_read_over_several_chunks_stops_at_max_bytes(
    kube_api: FakeKubeApi, dashboard: Any, size: int
) -> None:
    prefill_logs(kube_api)[OUT] = "q" * (kube.READ_CHUNK_BYTES + 500)
    text, whole = dashboard.read_log_head(fake.RAY_NODE_A, OUT, max_bytes=size)
    assert text == "q" * size and not whole


def test_the_actor_list_asks_for_alive_actors_up_to_its_limit(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """Ray's state API reads ``filter_keys``/``filter_predicates``/``filter_values`` as
    parallel lists (``dashboard/state_api_utils.py`` ``_get_filters_from_req``); string
    filter values are compared case-insensitively."""
    assert dashboard.alive_actor_pids() is not None
    (request,) = kube_api.requests_to("api/v0/actors")
    query = dict(request.query)
    assert query.pop("filter_values").upper() == "ALIVE"
    assert query == {"filter_keys": "state", "filter_predicates": "=", "limit": "1000"}


@pytest.mark.parametrize("count, cut_short", [(3, True), (2, False)])
def test_an_actor_list_as_long_as_its_limit_may_be_cut_short(
    kube_api: FakeKubeApi, dashboard: Any, count: int, cut_short: bool
) -> None:
    kube_api.ray_actors = [
        make_ray_actor("RayWorkerWrapper", fake.RAY_NODE_A, 100 + i) for i in range(count)
    ]
    pids = dashboard.alive_actor_pids(limit=3)
    assert pids is None if cut_short else pids == {fake.RAY_NODE_A: {100, 101}}


def test_the_actor_list_keeps_only_alive_rows_with_a_pid_and_a_node(
    dashboard: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the dashboard's filter let through: a row that is not an object, not ALIVE, or
    lacks a positive pid or a node id names no live process."""
    rows: list[Any] = [
        "not a row",
        {"state": "DEAD", "pid": 11, "node_id": "n1"},
        {"pid": 12, "node_id": "n1"},  # no state
        {"state": "ALIVE", "pid": 0, "node_id": "n1"},
        {"state": "ALIVE", "pid": "13", "node_id": "n1"},
        {"state": "ALIVE", "pid": 14, "node_id": ""},
        {"state": "ALIVE", "pid": 15, "node_id": 7},
        {"state": "ALIVE", "pid": 1, "node_id": "n1"},
        {"state": "alive", "pid": 2, "node_id": "n2"},
        {"state": "ALIVE", "pid": 3, "node_id": "n1"},
    ]
    monkeypatch.setattr(dashboard, "_state_api", lambda path, params: {"result": rows})
    assert dashboard.alive_actor_pids() == {"n1": {1, 3}, "n2": {2}}
    replies: list[Any] = [None, [], {}, {"result": "x"}]
    for reply in replies:
        monkeypatch.setattr(dashboard, "_state_api", lambda path, params, r=reply: r)
        assert dashboard.alive_actor_pids() is None, reply


# --- rotated files ---------------------------------------------------------------------------


def test_rotated_pieces_belong_to_their_file_and_the_oldest_holds_the_start() -> None:
    files = [OUT, f"{OUT}.1", f"{OUT}.3", f"{OUT}.2", f"{ERR}.1", ERR, "raylet.out.1"]
    assert nixl_logs.oldest_piece(files, OUT) == f"{OUT}.3"
    assert nixl_logs.oldest_piece(files, ERR) == f"{ERR}.1"
    assert nixl_logs.oldest_piece([OUT], OUT) == OUT
    target = nixl_logs.NixlTarget(label="prefill", node_id=fake.RAY_NODE_A)
    assert nixl_logs.log_files_to_read(files, target, 10) == [OUT, ERR]


def test_a_rotated_files_start_up_lines_are_read_from_its_oldest_piece(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """With RAY_ROTATION_MAX_BYTES set, Ray rotates worker-*.out to .out.1, .out.2...: the
    start-up lines are in the highest index, and only its beginning is read."""
    logs = prefill_logs(kube_api)
    logs[f"{OUT}.2"] = nixl_log("LIBFABRIC") + stats(3000)
    logs[f"{OUT}.1"] = stats(4000)
    logs[OUT] = stats(4000)
    logs[f"{ERR}.1"] = provider_log("efa") + stats(4000)
    logs[ERR] = stats(4000)
    report = read(kube_api, dashboard)
    assert report.value().split(",")[0] == "LIBFABRIC"
    assert report.providers[0][1] == "efa"
    names = [name for name, _ in reads(kube_api)]
    assert (f"{OUT}.2", "-1") in reads(kube_api) and (f"{ERR}.1", "-1") in reads(kube_api)
    assert f"{OUT}.1" not in names  # a middle piece holds no start-up line


def test_a_file_rotated_past_its_start_up_lines_is_unseen_not_a_pass(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    logs = prefill_logs(kube_api)
    logs[f"{OUT}.1"] = stats(4000)
    logs[OUT] = stats(4000)
    logs[f"{ERR}.1"] = stats(4000)
    logs[ERR] = stats(4000)
    report = read(kube_api, dashboard)
    label = f"prefill@{fake.WORKER_IP_A}"
    assert dict(report.providers)[label].startswith("unknown: ")
    assert f"{OUT} rotated: its oldest piece {OUT}.1 starts later" in report.value()
    assert label in report.unseen
    assert nixl_logs.backend_failure("LIBFABRIC", report) is not None  # the deploy still fails


# --- dead engines' files ---------------------------------------------------------------------

DEAD = f"worker-{'3c' * 28}-02000000-4100"  # an engine that ran before this one, same node
CURRENT = f"worker-{'4d' * 28}-03000000-5200"  # the engine that serves now


def _engines(
    kube_api: FakeKubeApi,
    dead: tuple[str, str] | None = None,
    current: tuple[str, str] | None = None,
) -> None:
    """The prefill node with a dead engine's files (listed first) and the current one's; the
    actor list names only the current engine (and the replica) alive. By default both engines
    chose LIBFABRIC, the dead one on provider tcp and the current one on efa."""
    dead = dead or (nixl_log("LIBFABRIC"), provider_log("tcp"))
    current = current or (nixl_log("LIBFABRIC"), provider_log("efa"))
    logs = prefill_logs(kube_api)
    for name in (OUT, ERR):
        logs.pop(name)
    logs.update({f"{DEAD}.out": dead[0], f"{DEAD}.err": dead[1]})
    logs.update({f"{CURRENT}.out": current[0], f"{CURRENT}.err": current[1]})
    kube_api.ray_actors = [
        a for a in kube_api.ray_actors if (a["node_id"], a["pid"]) != (fake.RAY_NODE_A, 5151)
    ] + [make_ray_actor("RayWorkerWrapper", fake.RAY_NODE_A, 5200, job_id="03000000")]
    kube_api.ray_logs[fake.RAY_NODE_A] = dict(
        sorted(logs.items(), key=lambda item: DEAD not in item[0])
    )


def test_the_current_engines_evidence_wins_over_a_dead_engines(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    _engines(kube_api)
    report = read(kube_api, dashboard)
    assert report.providers[0][1] == "efa"
    assert not any(DEAD in name for name, _ in reads(kube_api))


def test_a_dead_engines_evidence_never_stands_in_for_the_current_engine(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """The current engine's whole log lacks the lines: unknown (and not unseen: its log was
    read from the start), even though a dead engine's file on the node has both."""
    _engines(
        kube_api,
        dead=(nixl_log("LIBFABRIC"), provider_log("efa")),
        current=(nixl_log(None), provider_log(None)),
    )
    report = read(kube_api, dashboard)
    label = f"prefill@{fake.WORKER_IP_A}"
    assert dict(report.backends)[label].startswith("unknown: ")
    assert label not in report.unseen
    assert handler.provider_metrics(report)["ProviderEfa"] == 0


def test_without_the_actor_list_the_newest_engine_is_read_first(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    _engines(kube_api)
    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/actors", status=500, body=b"{}")
    report = read(kube_api, dashboard)
    assert report.providers[0][1] == "efa"
    names = [name for name, _ in reads(kube_api)]
    assert names.index(f"{CURRENT}.out") < names.index(f"{DEAD}.out")


def test_files_of_a_job_older_than_the_replicas_are_never_read() -> None:
    replica = fake.PREFILL_WORKER_ID
    files = [
        f"worker-{'5e' * 28}-ff000000-100.out",  # job 255: older than the replica's job 256
        f"worker-{'6f' * 28}-ffffffff-120.out",  # nil job: an idle worker, not judged by age
        f"worker-{replica}-00010000-4242.out",  # job 256
        f"worker-{GPU_WORKER}-01010000-5151.out",  # job 257, started by the replica's engine
    ]
    target = nixl_logs.NixlTarget(label="prefill", node_id=fake.RAY_NODE_A, worker_ids=(replica,))
    assert nixl_logs.log_files_to_read(files, target, 10) == [files[2], files[3], files[1]]


def replica_target(replica: str, replica_log: str, label: str = "prefill") -> Any:
    """The logs to read for a prefill replica on node A: its worker id and Serve log."""
    return nixl_logs.NixlTarget(
        label=label,
        node_id=fake.RAY_NODE_A,
        worker_ids=(replica,),
        role="prefill",
        replica_log=replica_log,
    )


def test_nixl_log_files_are_read_stdout_first_replica_then_its_engine_workers() -> None:
    """NIXL prints to stdout: the replica's .out, then the .out files of its job (the vLLM GPU
    worker actors), then other .out files, and only then .err and the replica log."""
    replica, gpu, other = "1f" * 28, "e1" * 28, "9a" * 28
    files = [
        "raylet.out",
        *(f"worker-{i:02x}{'77' * 27}-ffffffff-{3000 + i}.err" for i in range(20)),
        f"worker-{replica}-01000000-4242.err",
        f"worker-{other}-02000000-6000.out",
        f"worker-{gpu}-01000000-5151.err",
        f"worker-{gpu}-01000000-5151.out",
        f"worker-{replica}-01000000-4242.out",
        "serve/replica_qwen_Prefill_1.log",
        "gcs_server.out",
    ]
    target = replica_target(replica, "serve/replica_qwen_Prefill_1.log", "prefill@10.0.1.20")
    chosen = nixl_logs.log_files_to_read(files, target, 5)
    assert chosen == [
        f"worker-{replica}-01000000-4242.out",
        f"worker-{gpu}-01000000-5151.out",
        f"worker-{other}-02000000-6000.out",
        f"worker-{replica}-01000000-4242.err",
        # NIXL's C++ plugins log to stderr: the engine job's .err before the replica log.
        f"worker-{gpu}-01000000-5151.err",
    ]
    assert all(not name.startswith(("raylet", "gcs_server")) for name in chosen)


def test_every_kind_of_log_file_has_its_rank_and_order() -> None:
    """The whole order in one table: each rank (the replica's .out; its job's .out, newest job
    and pid first; other .out files; the replica's .err; its job's .err and the replica's own
    Serve log; other .err files; other replicas' logs of the role), and what is never read."""
    replica, gpu, other = fake.PREFILL_WORKER_ID, GPU_WORKER, "7a" * 28
    expected = [
        f"worker-{replica}-01000000-4242.out",  # 0: the replica's own stdout
        f"worker-{gpu}-01000000-5200.out",  # 1: its job's, the higher pid first
        f"worker-{gpu}-01000000-5151.out",
        f"worker-{other}-03000000-5000.out",  # 2: other jobs', the newest job first
        f"worker-{other}-02000000-6000.out",
        "worker-zz.out",  # 2: a worker file of another naming, in listed order
        "worker-aa.out",
        f"worker-{other}-ffffffff-3100.out",  # 2: the nil job (an idle worker) last
        f"worker-{replica}-01000000-4242.err",  # 3: the replica's own stderr
        f"worker-{gpu}-01000000-5151.err",  # 4: its job's stderr ...
        "serve/replica_qwen_PDPrefill_r1.log",  # 4: ... and the replica's Serve log
        f"worker-{other}-02000000-6000.err",  # 5: other jobs' stderr
        "worker-odd.err",
        "serve/replica_qwen_PDPrefill_r2.log",  # 6: another replica of the role
    ]
    never = [
        "serve/replica_qwen_PDDecode_r3.log",  # the other role
        "serve/replica_qwen_PDPrefill_r2.txt",  # not a Serve log
        "events/worker-odd.out",  # a skipped folder
        "raylet.out",
        "notes.out",
        "notes.err",
    ]
    listed = expected[::-1] + never
    for name in ("worker-zz.out", "worker-aa.out"):  # listed z before a
        listed.remove(name)
    listed[:0] = ["worker-zz.out", "worker-aa.out"]
    target = replica_target(
        replica, "/tmp/ray/session_latest/logs/serve/replica_qwen_PDPrefill_r1.log"
    )
    assert nixl_logs.log_files_to_read(listed, target, 50) == expected


def test_files_are_judged_by_their_base_name() -> None:
    """The log API lists Serve's replica logs under ``serve/``."""
    target = nixl_logs.NixlTarget(label="prefill", node_id=fake.RAY_NODE_A, role="prefill")
    files = ["serve/replica_qwen_PDPrefill_abc.log", "serve/replica_qwen_PDDecode_abc.log"]
    assert nixl_logs.log_files_to_read(files, target, 10) == files[:1]


# --- where the reader looks, and what stops it --------------------------------------------


def test_with_serve_replicas_the_node_list_is_not_needed(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/nodes", status=500, body=b"{}")
    report = read(kube_api, dashboard)
    assert [label for label, _ in report.backends] == [PREFILL, DECODE]
    assert not kube_api.requests_to("api/v0/nodes")


def test_without_replicas_or_worker_nodes_the_report_says_why(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    kube_api.ray_nodes = [n for n in kube_api.ray_nodes if n.get("is_head_node")]
    report = nixl_logs.read_nixl_backends(dashboard, None, fake.APP_NAME)
    assert (report.backends, report.reason) == ((), "the Ray dashboard lists no worker nodes")
    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/nodes", status=500, body=b"{}")
    report = nixl_logs.read_nixl_backends(dashboard, None, fake.APP_NAME)
    assert report.backends == ()
    assert report.reason.startswith(f"Ray dashboard not readable via {dashboard.service}: ")


def test_a_node_whose_logs_cannot_be_listed_is_unseen_and_the_next_is_read(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    del kube_api.ray_logs[fake.RAY_NODE_A]
    report = read(kube_api, dashboard)
    (backend, provider), why = (
        (dict(report.backends)[PREFILL], dict(report.providers)[PREFILL]),
        (f"unknown: cannot list logs (node {fake.RAY_NODE_A} not found)"),
    )
    assert (backend, provider) == (why, why)
    assert report.unseen == (PREFILL,)
    assert dict(report.backends)[DECODE] == "LIBFABRIC"


def test_an_unreadable_file_is_named_and_its_engine_unseen(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/logs/file", status=500, body=b"no")
    report = read(kube_api, dashboard)
    assert re.search(rf"{re.escape(OUT)} unreadable \(\S", dict(report.providers)[PREFILL])
    assert report.unseen == (PREFILL, DECODE)


@pytest.mark.parametrize("max_files", [1, 2])
def test_only_max_files_files_are_read(
    kube_api: FakeKubeApi, dashboard: Any, max_files: int
) -> None:
    logs = prefill_logs(kube_api)
    for name in list(logs):
        if name.startswith("worker-"):
            logs[name] = stats(10)  # no evidence anywhere: every chosen file is read
    read(kube_api, dashboard, max_files=max_files)
    assert len({name for name, _ in reads(kube_api)}) == max_files


def test_reading_stops_at_the_file_that_completes_the_evidence(
    kube_api: FakeKubeApi, dashboard: Any
) -> None:
    """The replica's .out, its engine worker's .out (the backend line), the replica's .err,
    the engine worker's .err (the provider line): then the next node. Short files are read
    whole, so no head read."""
    report = read(kube_api, dashboard)
    assert reads(kube_api) == [(n, "3000") for n in (REPLICA_OUT, OUT, REPLICA_ERR, ERR)]
    assert report.sources[PREFILL] == OUT
    assert set(report.sources) == {PREFILL, DECODE}
    assert report.files_read == len(kube_api.requests_to("api/v0/logs/file")) == 8
    assert report.unseen == ()
    # Without the actor list the idle workers' .err files would be read too: not past ERR.
    kube_api.requests.clear()
    kube_api.set_proxy(kube_api.head_service, 8265, "api/v0/actors", status=500, body=b"{}")
    read(kube_api, dashboard)
    assert reads(kube_api) == [(n, "3000") for n in (REPLICA_OUT, OUT, REPLICA_ERR, ERR)]


def test_a_complete_tail_needs_no_head_read(kube_api: FakeKubeApi, dashboard: Any) -> None:
    logs = prefill_logs(kube_api)
    logs[OUT] = stats(5000) + nixl_log("LIBFABRIC")
    logs[ERR] = stats(5000) + provider_log("efa")
    read(kube_api, dashboard)
    assert (ERR, "-1") not in reads(kube_api)  # the backend came from OUT, the provider here


def test_a_file_that_fails_to_read_is_skipped_and_the_evidence_still_complete(
    kube_api: FakeKubeApi, dashboard: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed tail read, and a failed head read, each name the file; the files after it are
    still read, and evidence found there is complete (not unseen)."""
    logs = prefill_logs(kube_api)
    logs[ERR] = stats(5000)  # its tail lacks the provider: a head read, which fails
    logs[REPLICA_ERR] = provider_log("efa")
    read_log, read_head = dashboard.read_log, dashboard.read_log_head

    def tail(node: str, name: str, **kwargs: Any) -> str:
        if name == REPLICA_OUT:
            raise kube.KubeApiError("tail failed", status=500, reason="tail boom")
        return str(read_log(node, name, **kwargs))

    def head(node: str, name: str, **kwargs: Any) -> tuple[str, bool]:
        if name == OUT:
            raise kube.KubeApiError("head failed", status=500, reason="head boom")
        text, whole = read_head(node, name, **kwargs)
        return text, whole

    monkeypatch.setattr(dashboard, "read_log", tail)
    monkeypatch.setattr(dashboard, "read_log_head", head)
    logs[OUT] = stats(5000) + nixl_log("LIBFABRIC")  # in the tail: no head read needed
    report = read(kube_api, dashboard)
    assert dict(report.backends)[PREFILL] == "LIBFABRIC"
    assert dict(report.providers)[PREFILL] == "efa"
    assert PREFILL not in report.unseen
    # Now the backend line is only at OUT's start, and that head read fails.
    logs[OUT] = nixl_log("LIBFABRIC") + stats(5000)
    report = read(kube_api, dashboard)
    value = dict(report.backends)[PREFILL]
    assert f"{REPLICA_OUT} unreadable (tail boom)" in value
    assert f"{OUT} unreadable (head boom)" in value
    assert dict(report.providers)[PREFILL] == "efa"  # the .err files after it were read
    assert report.unseen == (PREFILL,)


@pytest.mark.parametrize("clock, late", [((0.0, 5.0), False), ((0.0, 5.001), True)])
def test_the_poll_budget_ends_a_head_read_too(
    kube_api: FakeKubeApi, dashboard: Any, clock: tuple[float, float], late: bool
) -> None:
    """The tail is read in time; by the head read the clock is at the deadline, or past it."""
    logs = prefill_logs(kube_api)
    logs[REPLICA_OUT] = nixl_log("LIBFABRIC") + stats(5000)
    times = iter(clock)
    report = read(kube_api, dashboard, deadline=5.0, monotonic=lambda: next(times, clock[1]))
    assert report.out_of_budget is late
    assert ((REPLICA_OUT, "-1") in reads(kube_api)) is not late
    budget = "poll budget used up while reading logs"
    assert (budget in dict(report.backends)[PREFILL]) is late


@pytest.mark.parametrize("now, late", [(5.0, False), (5.001, True)])
def test_the_poll_budget_ends_the_reading(
    kube_api: FakeKubeApi, dashboard: Any, now: float, late: bool
) -> None:
    """Reading stops once the clock is past the deadline (at it, it still reads)."""
    report = read(kube_api, dashboard, deadline=5.0, monotonic=lambda: now)
    assert report.out_of_budget is late
    assert (report.unseen == (PREFILL, DECODE)) is late
    budget = "poll budget used up while reading logs"
    assert (budget in dict(report.providers)[PREFILL]) is late
    assert (dict(report.providers)[PREFILL] == "efa") is not late


def test_a_head_read_stops_once_the_evidence_is_complete(
    kube_api: FakeKubeApi, dashboard: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head read ends at the line that completes the evidence: UCX needs no provider, and
    LIBFABRIC found in one file needs only the provider line from the next."""
    sizes: dict[str, int] = {}
    read_head = dashboard.read_log_head

    def spy(node: str, name: str, **kwargs: Any) -> tuple[str, bool]:
        text, whole = read_head(node, name, **kwargs)
        sizes[name] = len(text)
        return text, whole

    monkeypatch.setattr(dashboard, "read_log_head", spy)
    logs = prefill_logs(kube_api)
    logs[OUT] = stats(3000) + nixl_log("LIBFABRIC") + stats(10_000)
    logs[ERR] = stats(3000) + provider_log("efa") + stats(10_000)
    report = read(kube_api, dashboard)
    assert report.providers[0] == (PREFILL, "efa")
    assert sizes[OUT] == nixl_logs.LOG_HEAD_BYTES  # the provider is not in this file
    assert sizes[ERR] <= 2 * kube.READ_CHUNK_BYTES + len(STATS) * 3000
    sizes.clear()
    logs[OUT] = stats(3000) + nixl_log("UCX") + stats(10_000)
    report = read(kube_api, dashboard)
    assert report.backends[0] == (PREFILL, "UCX")
    assert sizes[OUT] <= 2 * kube.READ_CHUNK_BYTES + len(STATS) * 3000


# --- what the scheduled probe publishes ------------------------------------------------------


@pytest.mark.parametrize(
    "providers, unseen, backends, metrics",
    [
        ({"p": "efa", "d": "efa"}, (), None, {"ProviderEfa": 1, "ProviderUnknown": 0}),
        ({"p": "efa", "d": "tcp"}, (), None, {"ProviderEfa": 0, "ProviderUnknown": 0}),
        # aged out: unknown, and no ProviderEfa at all (the alarm keeps its state)
        ({"p": "efa", "d": "unknown: rotated"}, ("d",), None, {"ProviderUnknown": 1}),
        # read from its first line and still no provider: the engine never proved EFA
        (
            {"p": "efa", "d": "unknown: no line"},
            (),
            None,
            {"ProviderEfa": 0, "ProviderUnknown": 0},
        ),
        # a TCP provider seen beside an unseen engine is still TCP
        (
            {"p": "tcp", "d": "unknown: rotated"},
            ("d",),
            None,
            {"ProviderEfa": 0, "ProviderUnknown": 1},
        ),
        # UCX where LIBFABRIC is configured has no provider line, and is not EFA
        (
            {"p": "efa"},
            (),
            {"p": "LIBFABRIC", "d": "UCX"},
            {"ProviderEfa": 0, "ProviderUnknown": 0},
        ),
        ({}, (), {}, {"ProviderUnknown": 1}),  # nothing read at all (the dashboard is down)
        # a slow provider is proof enough, even where the engine's start was not all read
        ({"p": "tcp"}, ("p",), None, {"ProviderEfa": 0, "ProviderUnknown": 0}),
        ({"p": "sockets"}, ("p",), None, {"ProviderEfa": 0, "ProviderUnknown": 0}),
        ({"p": "unknown: rotated"}, ("p",), {"p": "UCX"}, {"ProviderEfa": 0, "ProviderUnknown": 1}),
    ],
)
def test_provider_metrics(
    providers: dict[str, str],
    unseen: tuple[str, ...],
    backends: dict[str, str] | None,
    metrics: dict[str, int],
) -> None:
    report = nixl_logs.KvBackendReport(
        backends=tuple(
            (backends if backends is not None else dict.fromkeys(providers, "LIBFABRIC")).items()
        ),
        providers=tuple(providers.items()),
        unseen=unseen,
        reason="" if providers else "dashboard down",
    )
    assert handler.provider_metrics(report) == metrics


def test_a_long_running_engine_keeps_proving_efa(
    kube_api: FakeKubeApi, probe_env: list[dict[str, Any]]
) -> None:
    kube_api.set_stage("serving")
    for node in (fake.RAY_NODE_A, fake.RAY_NODE_B):
        for name, text in list(kube_api.ray_logs[node].items()):
            if "5151" in name:
                kube_api.ray_logs[node][name] = text + stats(4000)
    outcome = handler.scheduled_probe({}, None)
    assert (outcome["ProviderEfa"], outcome["ProviderUnknown"]) == (1, 0)


def test_an_engine_whose_log_rotated_past_its_start_publishes_unknown_not_tcp(
    kube_api: FakeKubeApi, probe_env: list[dict[str, Any]]
) -> None:
    kube_api.set_stage("serving")
    logs = prefill_logs(kube_api)
    for name in (OUT, ERR):
        logs[name] = stats(4000)
        logs[f"{name}.1"] = stats(4000)
    outcome = handler.scheduled_probe({}, None)
    assert outcome["ProbeOk"] == 1
    assert outcome["ProviderUnknown"] == 1 and "ProviderEfa" not in outcome
    (line,) = probe_env
    names = [m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert names == ["ProbeOk", "KvTransferStalled", "ProviderUnknown"]


def _pod(node_type: str, *envs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"labels": {checks.RAY_NODE_TYPE_LABEL: node_type}},
        "spec": {"containers": [{"name": f"c{i}", "env": env} for i, env in enumerate(envs)]},
    }


EFA = [{"name": "FI_PROVIDER", "value": "efa"}]


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([_pod("head", []), _pod("worker", EFA), _pod("worker", [], EFA)], "efa"),
        ([_pod("worker", EFA), _pod("worker", [])], ""),  # one worker without it
        ([_pod("worker", EFA), _pod("worker", [{"name": "FI_PROVIDER", "value": "tcp"}])], ""),
        ([_pod("worker", [{"name": "FI_PROVIDER", "valueFrom": {"configMapKeyRef": {}}}])], ""),
        ([_pod("head", EFA)], ""),  # no worker: nothing proven
        ([], ""),
    ],
    ids=["all-efa", "one-unset", "differ", "reference", "head-only", "none"],
)
def test_workers_fi_provider_is_efa_only_when_every_worker_sets_it(
    pods: list[dict[str, Any]], expected: str
) -> None:
    assert checks.workers_fi_provider({"items": pods}) == expected
