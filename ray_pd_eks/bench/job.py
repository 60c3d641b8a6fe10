"""The benchmark Job: its manifest, the script it runs, and reading results back from its log.

The script runs ``vllm bench serve`` (vLLM 0.26, ``vllm/benchmarks/serve.py`` and
``datasets/arg_utils.py``; flag names as defined there) once per concurrency level and prints
each level's ``--save-result`` file to stdout between two marker lines, byte for byte, so the
CLI can recover it from the pod's log with no shared volume and no ``exec``. The result file is
one line of JSON (vLLM writes it with ``json.dump``), which the kubelet keeps whole in the log.

The prompts are built with the model's tokenizer at the revision the engines serve
(``modelRevision``). ``vllm bench serve`` has no revision flag (vLLM 0.26
``vllm/benchmarks/serve.py``: ``get_tokenizer(tokenizer_id, tokenizer_mode=...,
trust_remote_code=...)``, no ``revision``), so the script first downloads the tokenizer files at
that revision (``huggingface_hub.snapshot_download(repo_id, revision=..., allow_patterns=...,
local_dir=...)``, in the image) into a local folder and points ``--tokenizer`` at it; a
download that fails ends the Job before any level runs, saying so.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ray_pd_eks.templates import render

CONTAINER = "bench"
# The label of the Job's pods (assets/manifests/bench-job.yaml) that the NetworkPolicy
# ray-serve-from-bench.yaml admits to the serve port.
BENCH_POD_LABELS = {"app.kubernetes.io/name": "ray-pd-eks-bench"}
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set by the Job controller on its pods
RESULT_DIR = "/work/results"
TOKENIZER_DIR = "/work/tokenizer"
# The tokenizer's files, as the model prefetch fetches them without the weights
# (pd_constructs/serving/model_access.py ALLOW_PATTERNS): vLLM's get_tokenizer also reads
# config.json.
TOKENIZER_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")
_FETCH_TOKENIZER = (
    "import sys; from huggingface_hub import snapshot_download; "
    "snapshot_download(sys.argv[1], revision=sys.argv[2], allow_patterns=sys.argv[3].split(','),"
    " local_dir=sys.argv[4])"
)
BEGIN = "@@ray-pd-eks-bench begin {name}@@"
END = "@@ray-pd-eks-bench end {name}@@"
PROGRESS_PREFIX = "[bench] "
_BEGIN_RE = re.compile(r"^@@ray-pd-eks-bench begin (?P<name>[\w.-]+)@@$")
_LEVEL_RE = re.compile(r"^\[bench\] level concurrency=(?P<c>\d+): (?P<what>.*)$")
MAX_NAME = 63


@dataclass(frozen=True)
class Sweep:
    """What one ``bench`` run asks of ``vllm bench serve``."""

    base_url: str  # http://<rayService>-serve-svc.<namespace>:8000
    model: str  # the served name (modelId), sent in each request
    tokenizer: str  # a Hugging Face repo with the model's tokenizer (modelSource)
    tokenizer_revision: str  # its revision: the deployed modelRevision for the model's own
    concurrency: tuple[int, ...]
    prompts: tuple[int, ...]  # per level, same order as concurrency
    input_len: int
    output_len: int
    seed: int
    label: str

    def result_file(self, concurrency: int) -> str:
        return f"concurrency-{concurrency}.json"

    def args(self, concurrency: int, prompts: int) -> list[str]:
        """``vllm bench serve`` arguments for one level."""
        return [
            "vllm",
            "bench",
            "serve",
            "--backend",
            "openai",
            "--base-url",
            self.base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            self.model,
            "--tokenizer",
            TOKENIZER_DIR,  # the tokenizer at tokenizer_revision (script())
            "--dataset-name",
            "random",
            "--random-input-len",
            str(self.input_len),
            "--random-output-len",
            str(self.output_len),
            "--num-prompts",
            str(prompts),
            "--max-concurrency",
            str(concurrency),
            "--seed",
            str(self.seed),
            "--temperature",
            "0",
            # Warm each level up with as many requests as it keeps in flight.
            "--num-warmups",
            str(concurrency),
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,90,99",
            "--label",
            self.label,
            "--disable-tqdm",
            "--save-result",
            "--result-dir",
            RESULT_DIR,
            "--result-filename",
            self.result_file(concurrency),
        ]

    def script(self) -> str:
        """Bash: every level in order; a level without a result file fails the Job at the end
        (after the other levels ran), and its output's tail says why."""
        fetch = " ".join(
            shlex.quote(a)
            for a in (
                "python3",
                "-c",
                _FETCH_TOKENIZER,
                self.tokenizer,
                self.tokenizer_revision,
                ",".join(TOKENIZER_FILES),
                TOKENIZER_DIR,
            )
        )
        where = f"{self.tokenizer}@{self.tokenizer_revision}"
        lines = [
            "set -u",
            f"mkdir -p {RESULT_DIR}",
            f"if ! {fetch}; then",
            f"  echo {shlex.quote(f'{PROGRESS_PREFIX}tokenizer {where}: download failed')}",
            "  exit 1",
            "fi",
            f"echo {shlex.quote(f'{PROGRESS_PREFIX}tokenizer {where} in {TOKENIZER_DIR}')}",
            "failed=0",
            "level() {",
            '  c="$1"; file="$2"; shift 2',
            f'  echo "{PROGRESS_PREFIX}level concurrency=$c: started"',
            '  "$@"',
            "  rc=$?",
            f'  if [ -s "{RESULT_DIR}/$file" ]; then',
            f'    echo "{BEGIN.format(name="$file")}"',
            f'    cat "{RESULT_DIR}/$file"; echo',
            f'    echo "{END.format(name="$file")}"',
            f'    echo "{PROGRESS_PREFIX}level concurrency=$c: done (exit $rc)"',
            "  else",
            f'    echo "{PROGRESS_PREFIX}level concurrency=$c: FAILED (exit $rc, no result file)"',
            "    failed=1",
            "  fi",
            "}",
        ]
        for concurrency, prompts in zip(self.concurrency, self.prompts, strict=True):
            args = " ".join(shlex.quote(a) for a in self.args(concurrency, prompts))
            lines.append(f"level {concurrency} {self.result_file(concurrency)} {args}")
        lines.append('exit "$failed"')
        return "\n".join(lines) + "\n"


def job_name(ray_service: str, stamp: str) -> str:
    """``<rayService>-bench-<stamp>``, shortened to a valid name of at most 63 characters."""
    suffix = f"-bench-{stamp}"
    head = ray_service[: MAX_NAME - len(suffix)].rstrip("-")
    return head + suffix


def render_job(
    sweep: Sweep, *, name: str, namespace: str, image: str, deadline_seconds: int
) -> dict[str, Any]:
    return dict(
        render(
            "manifests/bench-job.yaml",
            {
                "NAME": name,
                "NAMESPACE": namespace,
                "IMAGE": image,
                "SCRIPT": sweep.script(),
                "DEADLINE_SECONDS": deadline_seconds,
            },
        )
    )


@dataclass(frozen=True)
class LogView:
    """What the pod's log says so far."""

    results: dict[str, str]  # result file name -> its text, exactly as written
    progress: list[str]  # the script's own progress lines, in order
    failed_levels: dict[int, str]  # concurrency -> the tail of that level's output


def read_log(text: str, *, tail_lines: int = 6) -> LogView:
    """Split the log into result files, progress lines and the output of failed levels."""
    results: dict[str, str] = {}
    progress: list[str] = []
    failed: dict[int, str] = {}
    current: list[str] = []  # output of the level running now
    open_name: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if open_name is not None:
            if line == END.format(name=open_name):
                # `cat file; echo`: the file's text plus the newline echo added.
                results[open_name] = "\n".join(body)
                open_name, body = None, []
            else:
                body.append(line)
            continue
        begin = _BEGIN_RE.match(line)
        if begin:
            open_name = begin["name"]
            continue
        level = _LEVEL_RE.match(line)
        if level:
            progress.append(line[len(PROGRESS_PREFIX) :])
            if level["what"] == "started":
                current = []
            elif level["what"].startswith("FAILED"):
                tail = [t for t in current if t.strip()][-tail_lines:]
                failed[int(level["c"])] = " | ".join(t.strip() for t in tail) or level["what"]
            continue
        current.append(line)
    return LogView(results, progress, failed)


def prompts_per_level(concurrency: Sequence[int], prompts: int | None) -> tuple[int, ...]:
    """``--prompts`` for every level, or by default 8 per request in flight (at least 16):
    enough for stable percentiles without long runs at low concurrency."""
    if prompts is not None:
        return tuple(prompts for _ in concurrency)
    return tuple(max(16, 8 * c) for c in concurrency)
