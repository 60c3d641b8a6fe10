"""vLLM ``bench serve`` result files in, the comparison summary (``results.json``) out.

A result file is the JSON ``vllm bench serve --save-result`` writes (vLLM 0.26,
``vllm/benchmarks/serve.py``: ``main_async`` merges the run's setup keys with ``benchmark()``'s
result). The keys read here are exactly vLLM's:

* setup: ``label``, ``model_id``, ``num_prompts``, ``max_concurrency``, ``date``;
* totals: ``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput`` (req/s), ``output_throughput`` and
  ``total_token_throughput`` (tok/s);
* per metric in ``--percentile-metrics`` (``ttft``, ``tpot``, ``itl``, ``e2el``):
  ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` for each percentile of
  ``--metric-percentiles`` (``p50``, ``p90``, ``p99`` as the bench command asks).

When every request of a level failed, vLLM still writes zeros for the latencies (means of an
empty list); such a level is reported as failed with no latency at all, never as 0 ms.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

METRICS = ("ttft", "itl", "tpot", "e2el")
PERCENTILES = (50, 90, 99)
# Keys every vLLM serving result has; how a result file is told from other JSON in a folder.
RESULT_KEYS = frozenset({"completed", "duration", "request_throughput", "max_concurrency"})
RESULTS_FILE = "results.json"
META_FILE = "bench-meta.json"  # written by `bench`: label, deployment config, price
SCHEMA_VERSION = 1


class ResultError(ValueError):
    """A directory or file that does not hold usable vLLM results; the message says which."""


def is_vllm_result(data: Any) -> bool:
    return isinstance(data, dict) and set(data) >= RESULT_KEYS


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def latency(raw: Mapping[str, Any], metric: str) -> dict[str, float | None] | None:
    """``{"mean", "p50", "p90", "p99"}`` in ms for one metric, None if vLLM did not report it.

    ``p50`` falls back to vLLM's ``median_<m>_ms`` (the same number) for files written without
    ``--metric-percentiles 50``; a percentile not requested stays None.
    """
    mean = _number(raw.get(f"mean_{metric}_ms"))
    if mean is None:
        return None
    out: dict[str, float | None] = {"mean": mean}
    for p in PERCENTILES:
        value = _number(raw.get(f"p{p}_{metric}_ms"))
        if value is None and p == 50:
            value = _number(raw.get(f"median_{metric}_ms"))
        out[f"p{p}"] = value
    return out


def summarize(raw: Mapping[str, Any], *, label: str, file: str) -> dict[str, Any]:
    """One concurrency level of one run, from its vLLM result."""
    completed = int(raw.get("completed") or 0)
    failed = int(raw.get("failed") or 0)
    concurrency = raw.get("max_concurrency")
    run: dict[str, Any] = {
        "label": label,
        "concurrency": int(concurrency) if isinstance(concurrency, int) else None,
        "num_prompts": raw.get("num_prompts"),
        "completed": completed,
        "failed": failed,
        "status": "failed" if not completed else ("partial" if failed else "ok"),
        "duration_s": _number(raw.get("duration")),
        "request_throughput": _number(raw.get("request_throughput")),
        "output_throughput": _number(raw.get("output_throughput")),
        "total_token_throughput": _number(raw.get("total_token_throughput")),
        "total_input_tokens": raw.get("total_input_tokens"),
        "total_output_tokens": raw.get("total_output_tokens"),
        "date": raw.get("date"),
        "file": file,
    }
    for metric in METRICS:
        run[f"{metric}_ms"] = None if not completed else latency(raw, metric)
    if not completed:
        # Nothing was measured: throughput is not "0 tok/s at this latency".
        for key in ("request_throughput", "output_throughput", "total_token_throughput"):
            run[key] = None
        run["error"] = f"all {failed} requests failed"
    return run


def failed_level(label: str, concurrency: int, error: str) -> dict[str, Any]:
    """A level that produced no result file (the load generator itself failed)."""
    run = summarize(
        {"completed": 0, "failed": 0, "max_concurrency": concurrency}, label=label, file=""
    )
    run["error"] = error
    return run


def read_dir(directory: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """(``bench-meta.json`` or {}, [(file name, vLLM result)]) of one run directory.

    Every ``*.json`` with vLLM's result keys counts, whatever its name; ``results.json``, the
    meta file and vLLM's ``*.pytorch.json`` side files are skipped. A file ``vllm bench serve
    --append-result`` wrote holds one result per line: each line counts.
    """
    if not directory.is_dir():
        raise ResultError(f"{directory}: not a directory")
    meta: dict[str, Any] = {}
    meta_path = directory / META_FILE
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.json")):
        if path.name in (RESULTS_FILE, META_FILE) or path.name.endswith(".pytorch.json"):
            continue
        text = path.read_text(encoding="utf-8")
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            try:
                docs = [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as err:
                raise ResultError(f"{path}: not JSON ({err})") from None
        found += [(path.name, d) for d in docs if is_vllm_result(d)]
    return meta, found


def run_label(directory: Path, meta: Mapping[str, Any], raws: Sequence[dict[str, Any]]) -> str:
    """The run's label: the bench command's, else vLLM's ``label``, else the folder name."""
    if meta.get("label"):
        return str(meta["label"])
    labels = {str(r["label"]) for r in raws if r.get("label")}
    return labels.pop() if len(labels) == 1 else directory.resolve().name


def collect(
    directories: Sequence[Path],
    *,
    price_per_hour: float | None = None,
    gpu_nodes: int | None = None,
) -> dict[str, Any]:
    """``results.json`` for one run directory, or a comparison of several.

    One directory: ``{"label", "config", "runs"}``. Several: ``label`` is ``"a vs b"``,
    ``config`` maps each run's label to its config, and ``runs`` holds every level of every run,
    each with its run's ``label``. Runs are ordered as given, levels by concurrency.
    ``price_per_hour`` replaces the recorded GPU node price of every run, ``gpu_nodes`` its
    number of GPU nodes (for results without bench-meta.json, which records it).
    """
    runs: list[dict[str, Any]] = []
    configs: dict[str, Any] = {}
    labels: list[str] = []
    for directory in directories:
        meta, found = read_dir(directory)
        failed_levels = list(meta.get("failed_levels") or [])
        if not found and not failed_levels:
            raise ResultError(
                f"{directory}: no vLLM result files (*.json with keys "
                f"{', '.join(sorted(RESULT_KEYS))})"
            )
        label = run_label(directory, meta, [raw for _, raw in found])
        if label in labels:
            label = f"{label} ({directory.name})"
        labels.append(label)
        config = dict(meta.get("config") or {})
        if price_per_hour is not None:
            config["gpuPricePerHourUsd"] = price_per_hour
            config["priceSource"] = "--price-per-hour given to bench report"
        if gpu_nodes is not None:
            config["gpuNodeCount"] = gpu_nodes
        configs[label] = config
        levels = [summarize(raw, label=label, file=name) for name, raw in found]
        levels += [
            failed_level(label, int(f["concurrency"]), str(f["error"])) for f in failed_levels
        ]
        levels.sort(key=lambda r: (r["concurrency"] is None, r["concurrency"] or 0, r["file"]))
        for level in levels:
            level["cost_per_million_output_tokens_usd"] = cost_per_million(
                config, level["output_throughput"]
            )
        runs += levels
    single = len(directories) == 1
    return {
        "schema_version": SCHEMA_VERSION,
        "label": labels[0] if single else " vs ".join(labels),
        "config": configs[labels[0]] if single else configs,
        "runs": runs,
    }


def cost_per_million(config: Mapping[str, Any], output_throughput: float | None) -> float | None:
    """USD per million output tokens: what the GPU nodes cost per hour over the tokens they
    produce per hour at this level. None without a price or without output."""
    price = _number(config.get("gpuPricePerHourUsd"))
    nodes = _number(config.get("gpuNodeCount"))
    if price is None or nodes is None or not output_throughput:
        return None
    return nodes * price / (output_throughput * 3600.0) * 1_000_000.0


def write_results(summary: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path
