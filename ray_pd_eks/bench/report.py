"""``report.md`` and the PNG plots, from a ``results.json`` summary (see ``results.collect``).

Plots use matplotlib's Agg backend (files only: no display, works over SSH and in CI). Each run
has one colour in every plot. A level whose requests all failed has no latency: it is a gap in
the lines with an x on the axis, and a row whose status says "failed" with "-" in every number
column (the reason is listed under the table), never a point at 0 ms. A partial level's point
is ringed. Without bench-meta.json what is not known is written "unknown", never "None".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PLOTS = {
    "ttft.png": ("ttft_ms", "Time to first token (ms)", ("p50", "p99")),
    "itl.png": ("itl_ms", "Inter-token latency (ms)", ("p50", "p99")),
    "throughput.png": ("output_throughput", "Output tokens/s (all requests)", ()),
}
REPORT_FILE = "report.md"
# The table's number columns: (header, key of the level, statistic of a latency).
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("req/s", "request_throughput", ""),
    ("output tok/s", "output_throughput", ""),
    ("TTFT p50 ms", "ttft_ms", "p50"),
    ("TTFT p90 ms", "ttft_ms", "p90"),
    ("TTFT p99 ms", "ttft_ms", "p99"),
    ("ITL p50 ms", "itl_ms", "p50"),
    ("ITL p90 ms", "itl_ms", "p90"),
    ("ITL p99 ms", "itl_ms", "p99"),
    ("TPOT p50 ms", "tpot_ms", "p50"),
    ("TPOT p99 ms", "tpot_ms", "p99"),
    ("E2E p50 ms", "e2el_ms", "p50"),
    ("E2E p99 ms", "e2el_ms", "p99"),
)


def value(run: Mapping[str, Any], key: str, stat: str = "") -> float | None:
    """A number of one level: ``run[key]``, or ``run[key][stat]`` for a latency."""
    found = run.get(key)
    if stat:
        found = found.get(stat) if isinstance(found, Mapping) else None
    return float(found) if isinstance(found, int | float) else None


def fmt(number: float | None, digits: int = 1) -> str:
    return "-" if number is None else f"{number:,.{digits}f}"


def labels(summary: Mapping[str, Any]) -> list[str]:
    """Run labels in the order the runs were given."""
    seen: list[str] = []
    for run in summary["runs"]:
        if run["label"] not in seen:
            seen.append(run["label"])
    return seen


def _configs(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    names = labels(summary)
    if len(names) == 1:
        return {names[0]: summary.get("config") or {}}
    config = summary.get("config") or {}
    return {name: config.get(name) or {} for name in names}


# What bench-meta.json records about the deployment (the price keys are separate: a price can
# come from --price-per-hour when nothing else is known).
_DEPLOYMENT_KEYS = (
    "servingMode",
    "kvBackend",
    "modelId",
    "modelSource",
    "gpuNodeCount",
    "gpuNodeType",
    "gpuModel",
    "inputLen",
    "outputLen",
    "image",
)
UNKNOWN = "unknown"


def _known(config: Mapping[str, Any], key: str) -> str:
    found = config.get(key)
    return UNKNOWN if found is None or found == "" else str(found)


def describe_config(label: str, config: Mapping[str, Any]) -> str:
    if not any(config.get(k) is not None for k in _DEPLOYMENT_KEYS):
        return f"- **{label}**: deployment settings not recorded (no bench-meta.json)"
    k = lambda key: _known(config, key)  # noqa: E731
    mode = k("servingMode")
    kv = f", KV over NIXL {k('kvBackend')}" if mode == "pd" else ", no KV transfer"
    if config.get("quantization") is not None:
        eager = "eager" if config.get("enforceEager") else "CUDA graphs"
        kv += (
            f"; engine {k('dtype')}, weights {k('quantization')}, KV cache "
            f"{k('kvCacheDtype')}, {eager}, router {k('requestRouter')}"
        )
    if mode == "pd":
        engines = f"{k('prefillReplicas')} prefill + {k('decodeReplicas')} decode"
    else:
        engines = f"{k('engines')} aggregated engine(s)"
    return (
        f"- **{label}**: servingMode {mode}{kv}; {engines}; model {k('modelId')} "
        f"({k('modelSource')}); {k('gpuNodeCount')} x {k('gpuNodeType')} ({k('gpuModel')}); "
        f"prompts of {k('inputLen')} tokens in, {k('outputLen')} out, seed {k('seed')}; "
        f"image {k('image')}"
    )


def describe_cost(label: str, config: Mapping[str, Any]) -> str:
    price = config.get("gpuPricePerHourUsd")
    if price is None:
        why = config.get("priceSource") or "no price recorded (pass --price-per-hour USD)"
        return f"- **{label}**: no cost computed: {why}"
    nodes = config.get("gpuNodeCount")
    itype = config.get("gpuNodeType") or "GPU node"
    each = f"${float(price):.4f}/h per {itype}; price from {config.get('priceSource')}"
    if nodes is None:
        return (
            f"- **{label}**: {each}; the number of GPU nodes is {UNKNOWN} (no bench-meta.json), "
            "so no cost per token: pass --gpu-nodes N to `bench report`"
        )
    return (
        f"- **{label}**: {nodes} x {itype} at ${float(price):.4f}/h each "
        f"= ${float(price) * float(nodes):.2f}/h; price from {config.get('priceSource')}"
    )


# The settings that tell two runs apart, in the order the profile table lists them.
PROFILE_ROWS = (
    ("servingMode", "serving mode"),
    ("kvBackend", "KV backend"),
    ("dtype", "dtype"),
    ("quantization", "weights (quantization)"),
    ("kvCacheDtype", "KV cache dtype"),
    ("enforceEager", "enforceEager (no CUDA graphs)"),
    ("requestRouter", "request router"),
    ("maxModelLen", "maxModelLen"),
    ("prefillReplicas", "prefill replicas"),
    ("decodeReplicas", "decode replicas"),
    ("engines", "aggregated engines"),
    ("gpuNodeType", "GPU node type"),
    ("gpuNodeCount", "GPU nodes"),
)


def profile_table(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The runs' settings side by side, one column per run (``-`` where a run did not record
    one: a run without ``bench-meta.json``, or one from before the setting existed)."""
    names = list(configs)
    lines = ["| setting | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for key, title in PROFILE_ROWS:
        cells = []
        for name in names:
            value_ = configs[name].get(key)
            cells.append(
                "-"
                if value_ is None
                else str(value_).lower()
                if isinstance(value_, bool)
                else str(value_)
            )
        lines.append(f"| {title} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return lines


def status_cell(run: Mapping[str, Any]) -> str:
    if run["status"] == "failed":
        return "failed (below)"
    if run["status"] == "partial":
        return "partial"
    return "ok"


def markdown(summary: Mapping[str, Any]) -> str:
    """The whole report: settings, the table (one row per level and run), cost, plots."""
    runs: Sequence[Mapping[str, Any]] = summary["runs"]
    configs = _configs(summary)
    several = len(configs) > 1
    lines = [f"# Benchmark: {summary['label']}", ""]
    lines += [describe_config(name, config) for name, config in configs.items()]
    if several:
        lines += ["", "## Profiles side by side", "", *profile_table(configs)]
    lines += [
        "",
        "Load: `vllm bench serve` in the cluster (a Job on the system node) against "
        "`<rayService>-serve-svc:8000`, random prompts, one pass per concurrency level with "
        "`--max-concurrency`. Latencies are client-side, in milliseconds.",
        "",
        "## Results by concurrency",
        "",
    ]
    headers = [
        "concurrency",
        "status",
        "completed",
        "failed",
        *(c[0] for c in _COLUMNS),
        "$ / M out tok",
    ]
    if several:
        headers.insert(0, "run")
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for run in runs:
        cells = [str(run.get("concurrency")), status_cell(run)]
        cells += [str(run["completed"]), str(run["failed"])]
        # A failed level has no numbers: "-" in every number column, the reason below.
        cells += [fmt(value(run, key, stat)) for _, key, stat in _COLUMNS]
        cells.append(fmt(run.get("cost_per_million_output_tokens_usd"), 2))
        if several:
            cells.insert(0, str(run["label"]))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    failed = [r for r in runs if r["status"] == "failed"]
    if failed:
        lines += ["", "Failed levels (no latency or throughput: every request failed):"]
        lines += [
            f"- {r['label']} @ {r['concurrency']}: {r.get('error') or 'every request failed'}"
            for r in failed
        ]
    partial = [r for r in runs if r["status"] == "partial"]
    if partial:
        lines += [
            "",
            "Levels with some failed requests (their latencies cover the completed ones only): "
            + ", ".join(f"{r['label']} @ {r['concurrency']}" for r in partial),
        ]
    lines += [
        "",
        "## Cost",
        "",
        "Cost per million output tokens = GPU nodes' On-Demand price per hour / output tokens "
        "per hour at that level. It counts the GPU nodes only (not the system node, the EKS "
        "control plane, NAT or storage) and assumes the level's throughput is sustained.",
        "",
        *(describe_cost(name, config) for name, config in configs.items()),
        "",
        "## How to read it",
        "",
        "- **TTFT** (time to first token) is dominated by prefill and by queueing; with long "
        "prompts it grows with concurrency.",
        "- **ITL** (inter-token latency) is what a streaming reader feels. Disaggregation aims "
        "to keep ITL p99 low and flat as concurrency rises, because decode is never stalled "
        "by another request's prefill; an aggregated engine interleaves both.",
        "- **TPOT** is the mean time per output token of one request after the first; **E2E** "
        "the whole request.",
        "- **output tok/s** is the throughput of all requests together; cost per token falls "
        "as it rises. Compare runs at the same concurrency.",
        "",
        "## Plots",
        "",
        *(f"![{name}]({name})" for name in PLOTS),
        "",
    ]
    return "\n".join(lines)


def plot_data(summary: Mapping[str, Any]) -> dict[str, list[tuple[str, list[int], list[float]]]]:
    """What each plot draws: per file, (series name, concurrencies, values) with NaN where a
    level failed. Series are ``<run> p50``/``<run> p99``, or ``<run>`` for throughput."""
    data: dict[str, list[tuple[str, list[int], list[float]]]] = {}
    for filename, (key, _, stats) in PLOTS.items():
        series: list[tuple[str, list[int], list[float]]] = []
        for name in labels(summary):
            levels = [
                r
                for r in summary["runs"]
                if r["label"] == name and isinstance(r.get("concurrency"), int)
            ]
            xs = [int(r["concurrency"]) for r in levels]
            for stat in stats or ("",):
                ys = [_nan(value(r, key, stat)) for r in levels]
                series.append((f"{name} {stat}".strip(), xs, ys))
        data[filename] = series
    return data


# One colour per run, the same in every plot (matplotlib's default cycle, in run order).
_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9")


def run_colours(summary: Mapping[str, Any]) -> dict[str, str]:
    return {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(labels(summary))}


def series_run(series: str, colours: Mapping[str, str]) -> str:
    """The run a series name (``<run> p50``, ``<run> p99`` or ``<run>``) belongs to."""
    return series if series in colours else series.rsplit(" ", 1)[0]


def level_marks(summary: Mapping[str, Any]) -> dict[tuple[str, int], str]:
    """(run, concurrency) -> ``failed`` or ``partial``, for the levels the plots mark."""
    return {
        (str(r["label"]), int(r["concurrency"])): str(r["status"])
        for r in summary["runs"]
        if r["status"] in ("failed", "partial") and isinstance(r.get("concurrency"), int)
    }


def _nan(number: float | None) -> float:
    return math.nan if number is None else number


def write_plots(
    summary: Mapping[str, Any], out: Path
) -> dict[str, list[tuple[str, list[float], list[float]]]]:
    """Draw each plot to ``out/<name>.png``; return the data as read back from the drawn lines
    (so a test checks what the figures hold, not what was meant to go into them)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt
    import numpy

    colours = run_colours(summary)
    marks = level_marks(summary)
    drawn: dict[str, list[tuple[str, list[float], list[float]]]] = {}
    for filename, series in plot_data(summary).items():
        _, title, _ = PLOTS[filename]
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        try:
            for name, xs, ys in series:
                run = series_run(name, colours)
                style = "--" if name.endswith(" p99") else "-"
                ax.plot(xs, ys, style, marker="o", label=name, color=colours[run])
                # A partial level: a hollow ring around its point (latencies of the completed
                # requests only).
                partial = [
                    (x, y) for x, y in zip(xs, ys, strict=True) if marks.get((run, x)) == "partial"
                ]
                if partial:
                    ax.plot(
                        [x for x, _ in partial],
                        [y for _, y in partial],
                        "o",
                        markersize=12,
                        markerfacecolor="none",
                        color=colours[run],
                        label=f"_{name} partial",
                    )
            # A failed level: an x on the axis at its concurrency, in the run's colour (the
            # line has a gap there, never a point at 0).
            for (run, x), mark in sorted(marks.items()):
                if mark == "failed":
                    ax.plot(
                        [x],
                        [0],
                        "x",
                        markersize=10,
                        color=colours[run],
                        transform=ax.get_xaxis_transform(),
                        clip_on=False,
                        label=f"_{run} failed at {x}",
                    )
            levels = sorted({x for _, xs, _ in series for x in xs})
            if levels:
                ax.set_xscale("log", base=2)
                ax.set_xticks(levels, [str(x) for x in levels])
            ax.set_xlabel("concurrency (requests in flight)")
            ax.set_ylabel(title)
            ax.set_title(f"{title}: {summary['label']}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
            fig.tight_layout()
            out.mkdir(parents=True, exist_ok=True)
            fig.savefig(out / filename)
            drawn[filename] = []
            for line in ax.get_lines():
                if str(line.get_label()).startswith("_"):
                    continue  # the failed/partial marks (level_marks says where they are)
                xy = numpy.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)
                drawn[filename].append(
                    (str(line.get_label()), xy[:, 0].tolist(), xy[:, 1].tolist())
                )
        finally:
            plt.close(fig)
    return drawn


def write_report(summary: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    path.write_text(markdown(summary), encoding="utf-8")
    return path
