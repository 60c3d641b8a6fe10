"""Which NIXL backend, and with LIBFABRIC which libfabric provider, each engine instantiated,
read from the engines' logs through the Ray dashboard's log API (no exec into a pod).

The choice of files is pure (``nixl_targets``, ``log_files_to_read``, ``oldest_piece``: which
nodes, which processes' files, most likely first); ``read_nixl_backends`` reads them through an
injected ``ray_dashboard.RayDashboard`` and returns a :class:`KvBackendReport`, in which anything
unreadable is ``unknown: <reason>``, never success; ``backend_failure`` is the verdict (no
evidence is no proof). Shared by the readiness check, the scheduled KV probe and the CLI's
``efa-check``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kube
import kvproof
import ray_dashboard
from checks import as_str
from placement import serve_replicas

LOG = logging.getLogger("readiness")

NIXL_BACKEND_RE = re.compile(r"Backend\s+([A-Za-z0-9_]+)\s+was instantiated")
LOG_LINES = 3000
# How much of a file's beginning is read when its tail lacks NIXL's start-up lines: vLLM logs
# some hundred lines (tens of KiB) before NIXL's, so 1 MiB leaves a wide margin and keeps the
# read (and the Lambda's memory) small however long the file grew.
LOG_HEAD_BYTES = 1024 * 1024
# Enough for the replica's and its engine workers' .out files on a busy node; the poll budget
# still bounds the reads.
LOG_FILES_PER_WORKER = 24


def nixl_backend(log_text: str) -> str | None:
    """The NIXL backend a process instantiated ("LIBFABRIC" / "UCX"), the last one if several."""
    matches = NIXL_BACKEND_RE.findall(log_text or "")
    return matches[-1].upper() if matches else None


@dataclass(frozen=True)
class NixlTarget:
    """One Ray worker node whose logs should show which NIXL backend its engine created."""

    label: str  # e.g. "prefill@10.0.1.5", or "node@10.0.1.5" when roles are unknown
    node_id: str
    worker_ids: tuple[str, ...] = ()
    role: str = ""
    replica_log: str = ""


def nixl_targets(
    serve_json: Mapping[str, Any] | None,
    app_name: str,
    ray_nodes: Sequence[Mapping[str, Any]] = (),
) -> list[NixlTarget]:
    """Nodes to read, prefill first then decode; from Serve replicas when known, else every
    alive non-head Ray node from the state API's node list."""
    targets: dict[str, NixlTarget] = {}
    replicas = [r for r in serve_replicas(serve_json, app_name) if r.role in ("prefill", "decode")]
    for replica in sorted(replicas, key=lambda r: (r.role != "prefill", r.node_ip)):
        if not replica.node_id:
            continue
        key = f"{replica.role}:{replica.node_id}"
        existing = targets.get(key)
        workers = (existing.worker_ids if existing else ()) + (
            (replica.worker_id,) if replica.worker_id else ()
        )
        targets[key] = NixlTarget(
            label=f"{replica.role}@{replica.node_ip or replica.node_id[:8]}",
            node_id=replica.node_id,
            worker_ids=workers,
            role=replica.role,
            replica_log=(existing.replica_log if existing else "")
            or replica.log_file_path.lstrip("/"),
        )
    if targets:
        return list(targets.values())
    result = []
    for node in ray_nodes:
        if node.get("is_head_node") or as_str(node.get("state")) not in ("", "ALIVE"):
            continue
        node_id = as_str(node.get("node_id"))
        if node_id:
            ip = as_str(node.get("node_ip"))
            result.append(NixlTarget(label=f"node@{ip or node_id[:8]}", node_id=node_id))
    return sorted(result, key=lambda t: t.label)


_SKIP_LOG_PREFIXES = (
    "raylet",
    "gcs_server",
    "dashboard",
    "log_monitor",
    "monitor",
    "runtime_env",
    "python-core-worker",
    "python-core-driver",
    "events/",
    "debug_state",
    "ray_client_server",
)


# Ray 2.58 names a worker process's stdout/stderr ``worker-<worker id>-<job id>-<pid>.out`` /
# ``.err`` (``ray_logging.get_worker_log_file_name``). With ``RAY_ROTATION_MAX_BYTES`` in the
# worker's environment the C++ core worker rotates them (``core_worker_process.cc``: the
# stdout/stderr redirection takes ``GetRayLogRotationMaxBytesOrDefault``, 0 = never rotate when
# the variable is unset, and ``RAY_ROTATION_BACKUP_COUNT``, ``src/ray/util/logging.cc``) through
# spdlog's rotating sink, which Ray patches to append the index
# (``thirdparty/patches/spdlog-rotation-file-format.patch``): ``.out.1`` is the newest rotated
# piece, the highest index the oldest, and a piece past the backup count is deleted.
_WORKER_LOG_RE = re.compile(r"^worker-([0-9a-f]+)-([0-9a-f]+)-(\d+)\.(out|err)(?:\.(\d+))?$")


def _job_number(job_hex: str) -> int | None:
    """A Ray job id as the GCS counted it (``JobID::FromInt`` copies the int's bytes, little
    endian on x86); None for the nil id (all ``ff``: a worker started for no job yet)."""
    try:
        raw = bytes.fromhex(job_hex)
    except ValueError:
        return None
    if not raw or raw == b"\xff" * len(raw):
        return None
    return int.from_bytes(raw, "little")


def oldest_piece(files: Iterable[str], name: str) -> str:
    """The oldest part of ``name``'s log: its rotated piece with the highest index, or ``name``
    itself when it never rotated. Only there can the lines a process logs at start-up be."""
    best, best_index = name, 0
    prefix = name + "."
    for other in files:
        index = other[len(prefix) :] if other.startswith(prefix) else ""
        if index.isdigit() and int(index) > best_index:
            best, best_index = other, int(index)
    return best


def log_files_to_read(
    files: Iterable[str],
    target: NixlTarget,
    max_files: int,
    alive_pids: Iterable[int] | None = None,
) -> list[str]:
    """Choose the log files most likely to hold NIXL's line, most likely first.

    NIXL logs "Backend ... was instantiated" to stdout, so the line lands in a ``worker-*.out``
    (Ray names them ``worker-<worker id>-<job id>-<pid>.out``): the Serve replica's own, or that
    of a vLLM GPU worker actor the engine starts beside it (another worker id). So: the
    replica's ``.out``, the ``.out`` files of its job, any other ``.out``; only then the
    ``.err`` files and the Serve replica log, which would hold the line only if logging were
    redirected. NIXL's LIBFABRIC plugin logs the libfabric provider it chose on stderr, so the
    ``.err`` files of the replica's job come next. Files of other processes (raylet, GCS,
    dashboard...) are never read. Rotated pieces (``.out.1``...) are not listed: they belong to
    the file they rotated from (``oldest_piece``).

    Evidence must come from the engine that serves now, not from a dead one whose files stay
    on the node. ``alive_pids`` (the pids of the node's ALIVE actors: the replica and its
    engine's GPU workers) drops every worker file of another pid, as long as one listed worker
    file is alive (None: liveness unknown). A worker of a job older than the replica's own is
    dropped too: Ray counts job ids up, and the replica's engine runs in the replica's job or
    one started after it. Within each rank the newest file (latest job, then highest pid)
    comes first.
    """
    unique = list(dict.fromkeys(files))

    def base(name: str) -> str:
        return name.rsplit("/", 1)[-1]

    workers = {
        name: match.groups()
        for name in unique
        if (match := _WORKER_LOG_RE.match(base(name))) and match.group(5) is None
    }
    own_jobs = {job for worker, job, *_ in workers.values() if worker in target.worker_ids}
    own_numbers = [n for job in own_jobs if (n := _job_number(job)) is not None]
    alive = set(alive_pids) if alive_pids is not None else set()
    any_alive = any(int(pid) in alive for _, _, pid, *_ in workers.values())

    def stale(job: str, pid: str) -> bool:
        if any_alive and int(pid) not in alive:
            return True
        number = _job_number(job)
        return bool(own_numbers) and number is not None and number < min(own_numbers)

    def rank(name: str) -> int | None:
        b = base(name)
        if any(name.startswith(p) or b.startswith(p) for p in _SKIP_LOG_PREFIXES):
            return None
        parts = workers.get(name)
        if parts:
            worker, job, pid, stream, _ = parts
            if stale(job, pid):
                return None
            own = worker in target.worker_ids
            if stream == "out":
                return 0 if own else 1 if job in own_jobs else 2
            # NIXL's C++ plugins log to stderr (the libfabric provider line), so the .err of
            # the engine's own job comes before other processes' .err files.
            return 3 if own else 4 if job in own_jobs else 5
        if _WORKER_LOG_RE.match(b):
            return None  # a rotated piece: read through the file it rotated from
        if target.replica_log and base(target.replica_log) == b:
            return 4
        if b.startswith("worker-") and b.endswith(".out"):
            return 2
        if b.startswith("worker-") and b.endswith(".err"):
            return 5
        if (
            b.startswith("replica_")
            and b.endswith(".log")
            and (not target.role or target.role in b.lower())
        ):
            return 6
        return None

    def newest_first(name: str) -> tuple[int, int]:
        parts = workers.get(name)
        if not parts:
            return (0, 0)
        number = _job_number(parts[1])
        return (-(number if number is not None else -1), -int(parts[2]))

    ranked = [(r, newest_first(name), name) for name in unique if (r := rank(name)) is not None]
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [name for _, _, name in ranked[:max_files]]


@dataclass(frozen=True)
class KvBackendReport:
    """NIXL backend per worker: "LIBFABRIC"/"UCX", or "unknown: <reason>"."""

    backends: tuple[tuple[str, str], ...] = ()
    reason: str = ""  # set when nothing could be read at all
    sources: Mapping[str, str] = field(default_factory=dict)
    # The libfabric provider per LIBFABRIC worker ("efa"/"tcp"/"sockets"/"unknown: <why>").
    providers: tuple[tuple[str, str], ...] = ()
    files_read: int = 0
    out_of_budget: bool = False
    # Engines whose start-up lines could not be read in full (the file rotated past them,
    # they lie beyond the head read, a read failed or the budget ran out): for these an
    # "unknown" provider says nothing about the engine, only about its logs.
    unseen: tuple[str, ...] = ()

    def looked_at(self) -> str:
        """What was read, for a message that says where the evidence was sought."""
        if not self.backends:
            return f"the Ray dashboard's log API ({self.reason or 'no worker logs read'})"
        labels = ", ".join(label for label, _ in self.backends)
        return (
            f"{self.files_read} worker log file(s) of {labels} through the Ray dashboard's log "
            "API (worker-*.out and .err of the engine's Ray job)"
        )

    def provider_value(self, configured: str) -> str:
        """The ``KvProvider`` Data value: the libfabric provider per worker, prefill first."""
        if configured.upper() != "LIBFABRIC":
            return "none (UCX: no libfabric provider)"
        if not self.providers:
            return f"unknown: {self.reason or 'no worker logs read'}"
        return ",".join(provider for _, provider in self.providers)

    def value(self) -> str:
        """The ``KvBackend`` Data value: comma-joined per worker, prefill first."""
        if not self.backends:
            return f"unknown: {self.reason or 'no worker logs read'}"
        return ",".join(backend for _, backend in self.backends)

    def fallbacks(self, configured: str) -> list[str]:
        """Workers that instantiated UCX although LIBFABRIC was configured."""
        if configured.upper() != "LIBFABRIC":
            return []
        return [label for label, backend in self.backends if backend == "UCX"]


def backend_failure(kv_backend: str, kv: KvBackendReport) -> str | None:
    """No evidence is no proof: every engine must show the configured NIXL backend, and with
    LIBFABRIC the ``efa`` provider (kvproof.provider_failure)."""
    looked_at = kv.looked_at()
    wrong = [
        f"{label}: {backend}" for label, backend in kv.backends if backend != kv_backend.upper()
    ]
    if not kv.backends or wrong:
        found = "; ".join(wrong) or f"unknown: {kv.reason or 'no worker logs read'}"
        return (
            f"no evidence that NIXL instantiated {kv_backend.upper()} ({found}); looked at "
            f"{looked_at}: the deploy cannot prove which transport moves the KV cache; check "
            "the workers' logs for 'Backend ... was instantiated' (python -m ray_pd_eks "
            "efa-check)"
        )
    return kvproof.provider_failure(kv_backend, dict(kv.providers), looked_at)


def read_nixl_backends(
    dashboard: ray_dashboard.RayDashboard,
    serve_json: Mapping[str, Any] | None,
    app_name: str,
    *,
    lines: int = LOG_LINES,
    max_files: int = LOG_FILES_PER_WORKER,
    head_bytes: int = LOG_HEAD_BYTES,
    deadline: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    fi_provider: str = "",
) -> KvBackendReport:
    """Which NIXL backend each worker instantiated, read from its logs without exec.

    Uses the Ray dashboard's log API (through the head service proxy): the Serve replicas name
    the prefill/decode nodes and worker processes; without them, every alive worker node is
    read. Anything unreadable is reported as ``unknown: <reason>``, never as success; the
    caller decides (``backend_failure``: no evidence fails the deploy). With LIBFABRIC it also
    reads the libfabric provider NIXL chose (``kvproof.libfabric_provider``), which NIXL logs on
    the engine worker's stderr with ``NIXL_LOG_LEVEL=INFO``. When the worker pods set
    ``FI_PROVIDER`` (``fi_provider``, from ``checks.workers_fi_provider``) to ``efa``, the
    LIBFABRIC line alone is the evidence (``kvproof.implied_provider``): the chosen files'
    tails are still read for a provider line (a ``tcp`` one fails), but no file's beginning is
    read for it.

    Only the files of live processes count once the dashboard's actor list says which are
    alive (``log_files_to_read``). Each file's last ``lines`` lines come first; NIXL
    logs both lines once, at engine start-up, so when a long-running engine's tail lacks them
    the reader reads the file's beginning (the oldest rotated piece if it rotated), at most
    ``head_bytes`` (``RayDashboard.read_log_head``). An engine whose beginning could not be
    read in full is listed in the report's ``unseen``.
    """
    try:
        have_replicas = bool(nixl_targets(serve_json, app_name))
        ray_nodes = [] if have_replicas else dashboard.nodes()
        targets = nixl_targets(serve_json, app_name, ray_nodes)
    except kube.RayAuthError:
        raise
    except kube.KubeApiError as exc:
        return KvBackendReport(
            reason=f"Ray dashboard not readable via {dashboard.service}: {exc.reason or exc}"
        )
    if not targets:
        return KvBackendReport(reason="the Ray dashboard lists no worker nodes")
    try:
        alive = dashboard.alive_actor_pids()
    except kube.RayAuthError:
        raise
    except kube.KubeApiError as exc:
        LOG.info("actor list unreadable, reading logs without liveness: %s", exc)
        alive = None
    backends: list[tuple[str, str]] = []
    providers: list[tuple[str, str]] = []
    unseen: list[str] = []
    sources: dict[str, str] = {}
    read_count = 0
    late = False
    for target in targets:
        try:
            files = dashboard.list_log_files(target.node_id)
        except kube.KubeApiError as exc:
            backends.append((target.label, f"unknown: cannot list logs ({exc.reason or exc})"))
            providers.append((target.label, f"unknown: cannot list logs ({exc.reason or exc})"))
            unseen.append(target.label)
            continue
        node_alive = None if alive is None else alive.get(target.node_id, set())
        chosen = log_files_to_read(files, target, max_files, node_alive)
        found: str | None = None
        provider: str | None = None
        partial: list[str] = []  # why a file's start-up lines were not all read
        for filename in chosen:
            if deadline is not None and monotonic() > deadline:
                partial.append("poll budget used up while reading logs")
                late = True
                break
            try:
                text = dashboard.read_log(target.node_id, filename, lines=lines)
            except kube.KubeApiError as exc:
                partial.append(f"{filename} unreadable ({exc.reason or exc})")
                continue
            read_count += 1
            found, provider = _with_evidence(text, found, provider)
            head = oldest_piece(files, filename)
            # A tail of fewer lines than asked for is the whole file (one fewer when the file
            # does not end in a newline: log_agent counts that last line too).
            whole_tail = head == filename and text.count("\n") < lines - 1
            if not _evidence_complete(found, provider, fi_provider) and not whole_tail:
                # The tail is not the whole file: read its beginning, where NIXL's lines are.
                if deadline is not None and monotonic() > deadline:
                    partial.append("poll budget used up while reading logs")
                    late = True
                    break
                try:
                    start, whole = dashboard.read_log_head(
                        target.node_id,
                        head,
                        max_bytes=head_bytes,
                        until=_completes(found, provider, fi_provider),
                    )
                except kube.KubeApiError as exc:
                    partial.append(f"{head} unreadable ({exc.reason or exc})")
                    continue
                read_count += 1
                found, provider = _with_evidence(start, found, provider)
                if not _evidence_complete(found, provider, fi_provider):
                    if head != filename:
                        partial.append(f"{filename} rotated: its oldest piece {head} starts later")
                    elif not whole:
                        partial.append(f"not within the first {head_bytes} bytes of {filename}")
            if found and target.label not in sources:
                sources[target.label] = filename
            if _evidence_complete(found, provider):
                break  # the tails of the other files are still read for a tcp provider line
        why = f" ({'; '.join(partial)})" if partial else ""
        note = f"no 'Backend ... was instantiated' line in {len(chosen)} log file(s){why}"
        provider_note = f"no 'Discovered <n> EFA|tcp devices' line in {len(chosen)} log file(s)"
        if found == "LIBFABRIC":  # only FI_PROVIDER=efa would have made the backend line enough
            provider_note += f", and FI_PROVIDER is {fi_provider or 'not efa on every worker pod'}"
        backends.append((target.label, found or f"unknown: {note} on {target.label}"))
        provider = provider or kvproof.implied_provider(found, fi_provider)
        if found == "LIBFABRIC" or not found:
            providers.append((target.label, provider or f"unknown: {provider_note}{why}"))
        if partial and not _evidence_complete(found, provider, fi_provider):
            unseen.append(target.label)
    return KvBackendReport(
        backends=tuple(backends),
        sources=sources,
        providers=tuple(providers),
        files_read=read_count,
        out_of_budget=late,
        unseen=tuple(unseen),
    )


def _with_evidence(
    text: str, found: str | None, provider: str | None
) -> tuple[str | None, str | None]:
    """The backend and provider found so far, each taken from ``text`` where none was yet."""
    return found or nixl_backend(text), provider or kvproof.libfabric_provider(text)


def _evidence_complete(backend: str | None, provider: str | None, fi_provider: str = "") -> bool:
    """UCX has no libfabric provider to find; LIBFABRIC needs the provider line too, unless the
    pods' FI_PROVIDER=efa makes the backend line the proof (``kvproof.implied_provider``)."""
    return bool(
        backend
        and (provider or backend != "LIBFABRIC" or kvproof.implied_provider(backend, fi_provider))
    )


def _completes(
    backend: str | None, provider: str | None, fi_provider: str = ""
) -> Callable[[str], bool]:
    """Whether a file's beginning, read so far, completes the evidence already found."""

    def enough(text: str) -> bool:
        return _evidence_complete(
            backend or nixl_backend(text),
            provider or kvproof.libfabric_provider(text),
            fi_provider,
        )

    return enough
