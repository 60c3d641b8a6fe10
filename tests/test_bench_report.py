"""``bench report``: vLLM result files in, results.json / report.md / plots out, offline.

The fixtures under tests/fixtures/bench/ are written in the format ``vllm bench serve
--save-result`` produces (vLLM 0.26, vllm/benchmarks/serve.py: ``main_async`` merges its setup
keys into ``benchmark()``'s result and drops the per-request lists unless ``--save-detailed``);
``VLLM_KEYS`` below is that key set for the bench command's flags, and the first test holds the
fixtures to it. ``pd/`` is a run with bench-meta.json (price, deployment); ``aggregated/`` has
only vLLM's files, a partial level (concurrency 16) and a level where every request failed (32).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks.bench import report, results
from tests.cli_fixtures import Harness, write_cdk_json

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bench"

_METRIC_KEYS = {
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p50", "p90", "p99")
}
VLLM_KEYS = {
    # main_async: setup
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    # benchmark(): totals (input_lens, output_lens, ttfts, itls, start_times, generated_texts
    # and errors are removed without --save-detailed; latencies and queue_times are kept)
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "latencies",
    "queue_times",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    # process_one_metric for --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99
    *_METRIC_KEYS,
}


def _raw(folder: str) -> dict[int, dict[str, Any]]:
    out = {}
    for path in (FIXTURES / folder).glob("*concurrency*.json"):
        data = json.loads(path.read_text())
        out[data["max_concurrency"]] = data
    return out


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Writable copies of both fixture runs."""
    for name in ("pd", "aggregated"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of the numbers and exit codes: no Matplotlib figures (a third of a second of
    CPU each set). The tests that read the plots, and the command test that checks every file
    is written, draw them."""
    monkeypatch.setattr(report, "write_plots", lambda summary, out: {})


def test_fixtures_have_exactly_vllms_keys() -> None:
    for folder in ("pd", "aggregated"):
        for data in _raw(folder).values():
            assert set(data) == VLLM_KEYS
            assert results.is_vllm_result(data)


def test_results_json_takes_every_number_from_vllms_keys(runs: Path) -> None:
    summary = results.collect([runs / "pd"])
    raw = _raw("pd")
    assert summary["label"] == "pd-LIBFABRIC"
    assert summary["config"]["servingMode"] == "pd"
    assert [r["concurrency"] for r in summary["runs"]] == [1, 4, 16, 32]
    for run in summary["runs"]:
        source = raw[run["concurrency"]]
        assert run["status"] == "ok"
        assert (run["completed"], run["failed"]) == (source["completed"], source["failed"])
        assert run["duration_s"] == source["duration"]
        assert run["request_throughput"] == source["request_throughput"]
        assert run["output_throughput"] == source["output_throughput"]
        for metric in ("ttft", "itl", "tpot", "e2el"):
            assert run[f"{metric}_ms"] == {
                "mean": source[f"mean_{metric}_ms"],
                "p50": source[f"p50_{metric}_ms"],
                "p90": source[f"p90_{metric}_ms"],
                "p99": source[f"p99_{metric}_ms"],
            }
        # 2 x g6.8xlarge at $2.0144/h over the level's output tokens per hour.
        expected = 2 * 2.0144 / (source["output_throughput"] * 3600) * 1e6
        assert run["cost_per_million_output_tokens_usd"] == pytest.approx(expected)


def test_a_level_where_every_request_failed_has_no_latency_not_zero(runs: Path) -> None:
    summary = results.collect([runs / "aggregated"])
    by_c = {r["concurrency"]: r for r in summary["runs"]}
    assert _raw("aggregated")[32]["mean_ttft_ms"] == 0.0  # what vLLM writes
    failed = by_c[32]
    assert failed["status"] == "failed" and failed["error"] == "all 256 requests failed"
    assert all(failed[f"{m}_ms"] is None for m in ("ttft", "itl", "tpot", "e2el"))
    assert failed["output_throughput"] is None
    assert failed["cost_per_million_output_tokens_usd"] is None
    assert by_c[16]["status"] == "partial" and by_c[16]["failed"] == 8
    assert by_c[1]["status"] == "ok"
    # No bench-meta.json: the label is vLLM's, and there is no price.
    assert summary["label"] == "aggregated" and summary["config"] == {}


def _table(markdown: str) -> dict[tuple[str, str], dict[str, str]]:
    """The results table (the one after "## Results by concurrency")."""
    results_part = markdown.split("## Results by concurrency", 1)[1]
    lines = [line for line in results_part.splitlines() if line.startswith("| ")]
    headers = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = dict(zip(headers, (c.strip() for c in line.strip("|").split("|")), strict=True))
        rows[(cells.get("run", ""), cells["concurrency"])] = cells
    return rows


def test_report_table_shows_results_json_numbers(runs: Path) -> None:
    summary = results.collect([runs / "pd"])
    rows = _table(report.markdown(summary))
    assert len(rows) == 4
    for run in summary["runs"]:
        cells = rows[("", str(run["concurrency"]))]
        assert cells["TTFT p50 ms"] == f"{run['ttft_ms']['p50']:,.1f}"
        assert cells["TTFT p99 ms"] == f"{run['ttft_ms']['p99']:,.1f}"
        assert cells["ITL p50 ms"] == f"{run['itl_ms']['p50']:,.1f}"
        assert cells["ITL p99 ms"] == f"{run['itl_ms']['p99']:,.1f}"
        assert cells["E2E p99 ms"] == f"{run['e2el_ms']['p99']:,.1f}"
        assert cells["output tok/s"] == f"{run['output_throughput']:,.1f}"
        assert cells["$ / M out tok"] == f"{run['cost_per_million_output_tokens_usd']:,.2f}"
    text = report.markdown(summary)
    assert "2 x g6.8xlarge at $2.0144/h each = $4.03/h" in text
    assert "AWS Price List API (On-Demand, Linux, us-west-2)" in text


def test_comparison_puts_both_runs_side_by_side(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare"
    summary = results.collect([runs / "pd", runs / "aggregated"])
    assert summary["label"] == "pd-LIBFABRIC vs aggregated"
    assert set(summary["config"]) == {"pd-LIBFABRIC", "aggregated"}
    assert [(r["label"], r["concurrency"]) for r in summary["runs"]] == [
        ("pd-LIBFABRIC", 1),
        ("pd-LIBFABRIC", 4),
        ("pd-LIBFABRIC", 16),
        ("pd-LIBFABRIC", 32),
        ("aggregated", 1),
        ("aggregated", 4),
        ("aggregated", 16),
        ("aggregated", 32),
    ]
    rows = _table(report.markdown(summary))
    failed = rows[("aggregated", "32")]
    # The status column says it; every number column is "-"; the reason is under the table.
    assert failed["status"] == "failed (below)"
    assert {failed[c] for c in ("req/s", "TTFT p50 ms", "ITL p99 ms", "$ / M out tok")} == {"-"}
    assert "- aggregated @ 32: all 256 requests failed" in report.markdown(summary)
    assert rows[("aggregated", "16")]["status"] == "partial"
    assert rows[("aggregated", "1")]["status"] == "ok"
    assert "0.0" not in failed.values()
    assert rows[("aggregated", "16")]["ITL p99 ms"] == "236.9"
    assert "aggregated @ 16" in report.markdown(summary)  # partial level called out

    drawn = report.write_plots(summary, out)
    assert set(drawn) == {"ttft.png", "itl.png", "throughput.png"}
    for name in drawn:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    names = [series[0] for series in drawn["itl.png"]]
    assert names == ["pd-LIBFABRIC p50", "pd-LIBFABRIC p99", "aggregated p50", "aggregated p99"]
    for label, key, stat, filename in (
        ("aggregated", "itl_ms", "p99", "itl.png"),
        ("pd-LIBFABRIC", "ttft_ms", "p50", "ttft.png"),
        ("aggregated", "output_throughput", "", "throughput.png"),
    ):
        (series,) = [s for s in drawn[filename] if s[0] == f"{label} {stat}".strip()]
        levels = [r for r in summary["runs"] if r["label"] == label]
        assert series[1] == [float(r["concurrency"]) for r in levels]
        for y, run in zip(series[2], levels, strict=True):
            expected = report.value(run, key, stat)
            assert math.isnan(y) if expected is None else y == expected
    # The failed level is a gap in the lines, not a point at zero.
    (agg_itl,) = [s for s in drawn["itl.png"] if s[0] == "aggregated p99"]
    assert math.isnan(agg_itl[2][-1])


def test_any_file_name_counts_and_our_own_files_do_not(runs: Path) -> None:
    folder = runs / "pd"
    first = next(folder.glob("*concurrency1-*.json"))
    first.rename(folder / "whatever.json")
    (folder / "results.json").write_text(json.dumps({"runs": []}))
    (folder / "x.pytorch.json").write_text("[]")
    (folder / "notes.json").write_text(json.dumps({"not": "a result"}))
    summary = results.collect([folder])
    assert [r["concurrency"] for r in summary["runs"]] == [1, 4, 16, 32]
    assert summary["runs"][0]["file"] == "whatever.json"


def test_appended_results_count_line_by_line(runs: Path) -> None:
    folder = runs / "aggregated"
    files = sorted(folder.glob("*.json"))
    (folder / "all.json").write_text("\n".join(p.read_text() for p in files))
    for path in files:
        path.unlink()
    assert len(results.collect([folder])["runs"]) == 4


def test_a_folder_without_results_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(results.ResultError, match="no vLLM result files"):
        results.collect([tmp_path])
    with pytest.raises(results.ResultError, match="not a directory"):
        results.collect([tmp_path / "missing"])


# --- the command ---------------------------------------------------------------------------


def _cli(tmp_path: Path) -> Harness:
    return Harness(write_cdk_json(tmp_path))


def test_bench_report_command_writes_everything_into_the_run_folder(
    runs: Path, tmp_path: Path
) -> None:
    result = _cli(tmp_path).run("bench", "report", str(runs / "pd"))
    assert result.code == 0, result.err
    written = json.loads((runs / "pd" / "results.json").read_text())
    assert written == results.collect([runs / "pd"])
    assert (runs / "pd" / "report.md").read_text() == report.markdown(written)
    for name in report.PLOTS:
        assert (runs / "pd" / name).is_file()
    line = next(x for x in result.out.splitlines() if x.strip().startswith("pd-LIBFABRIC  16"))
    assert line.split() == [
        "pd-LIBFABRIC",
        "16",
        "ok",
        "812.9",
        "1,720.3",
        "29.8",
        "46.9",
        "420.1",
        "2.66",  # 2 nodes x $2.0144/h / (420.1 tok/s x 3600 s) x 1e6
    ]


@pytest.mark.usefixtures("no_plots")
def test_bench_report_comparison_exits_1_for_a_failed_level(runs: Path, tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    no_out = cli.run("bench", "report", str(runs / "pd"), str(runs / "aggregated"))
    assert no_out.code == 2 and "pass --out OUT" in no_out.err
    out = tmp_path / "cmp"
    result = cli.run(
        "bench", "report", str(runs / "pd"), str(runs / "aggregated"), "--out", str(out)
    )
    assert result.code == 1
    assert "FAILED (all 256 requests failed)" in result.out
    assert json.loads((out / "results.json").read_text())["label"] == ("pd-LIBFABRIC vs aggregated")


@pytest.mark.usefixtures("no_plots")
def test_bench_report_price_override(runs: Path, tmp_path: Path) -> None:
    result = _cli(tmp_path).run("bench", "report", str(runs / "pd"), "--price-per-hour", "1.5")
    assert result.code == 0
    written = json.loads((runs / "pd" / "results.json").read_text())
    first = written["runs"][0]
    assert first["cost_per_million_output_tokens_usd"] == pytest.approx(
        2 * 1.5 / (first["output_throughput"] * 3600) * 1e6
    )
    assert written["config"]["priceSource"] == "--price-per-hour given to bench report"
    bad = _cli(tmp_path).run("bench", "report", str(runs / "pd"), "--price-per-hour", "0")
    assert bad.code == 2


def test_comparison_puts_the_engine_profiles_side_by_side(runs: Path, tmp_path: Path) -> None:
    fp8 = tmp_path / "fp8"
    shutil.copytree(runs / "pd", fp8)
    meta = json.loads((fp8 / "bench-meta.json").read_text())
    meta["label"] = "pd-LIBFABRIC-fp8w-fp8kv-prefix"
    meta["config"] |= {
        "dtype": "bfloat16",
        "quantization": "fp8",
        "kvCacheDtype": "fp8",
        "enforceEager": True,
        "requestRouter": "prefix-aware",
    }
    (fp8 / "bench-meta.json").write_text(json.dumps(meta))
    text = report.markdown(results.collect([runs / "pd", fp8]))
    profiles = text.split("## Profiles side by side", 1)[1].split("## Results", 1)[0]
    rows = {
        cells[0]: cells[1:]
        for line in profiles.splitlines()
        if line.startswith("| ")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert rows["setting"] == ["pd-LIBFABRIC", "pd-LIBFABRIC-fp8w-fp8kv-prefix"]
    # The recorded run from before these settings has none: "-", not a guess.
    assert rows["weights (quantization)"] == ["-", "fp8"]
    assert rows["KV cache dtype"] == ["-", "fp8"]
    assert rows["request router"] == ["-", "prefix-aware"]
    assert rows["enforceEager (no CUDA graphs)"] == ["-", "true"]
    assert rows["GPU node type"] == ["g6.8xlarge", "g6.8xlarge"]
    assert "weights fp8, KV cache fp8, eager, router prefix-aware" in text
    # One run alone has no profile table (its settings are in its line).
    assert "## Profiles side by side" not in report.markdown(results.collect([fp8]))


def test_without_bench_meta_the_given_price_is_used_and_the_unknown_said(runs: Path) -> None:
    """aggregated/ has no bench-meta.json: no "None x None", the price given is shown."""
    summary = results.collect([runs / "aggregated"], price_per_hour=2.0)
    text = report.markdown(summary)
    assert "None" not in text
    assert "- **aggregated**: deployment settings not recorded (no bench-meta.json)" in text
    assert (
        "- **aggregated**: $2.0000/h per GPU node; price from --price-per-hour given to bench "
        "report; the number of GPU nodes is unknown (no bench-meta.json), so no cost per "
        "token: pass --gpu-nodes N to `bench report`"
    ) in text
    with_nodes = results.collect([runs / "aggregated"], price_per_hour=2.0, gpu_nodes=2)
    first = with_nodes["runs"][0]
    assert first["cost_per_million_output_tokens_usd"] == pytest.approx(
        2 * 2.0 / (first["output_throughput"] * 3600) * 1e6
    )
    assert "2 x GPU node at $2.0000/h each = $4.00/h" in report.markdown(with_nodes)


@pytest.mark.usefixtures("no_plots")
def test_bench_report_takes_the_gpu_node_count(runs: Path, tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    folder = str(runs / "aggregated")
    result = cli.run("bench", "report", folder, "--price-per-hour", "2", "--gpu-nodes", "2")
    assert result.code == 1  # the failed level (32)
    assert json.loads((runs / "aggregated" / "results.json").read_text())["config"] == {
        "gpuPricePerHourUsd": 2.0,
        "priceSource": "--price-per-hour given to bench report",
        "gpuNodeCount": 2,
    }
    bad = cli.run("bench", "report", folder, "--gpu-nodes", "0")
    assert bad.code == 2 and "--gpu-nodes 0: must be at least 1" in bad.err


def test_plots_give_each_run_one_colour_and_mark_failed_and_partial_levels(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results.collect([runs / "pd", runs / "aggregated"])
    colours = report.run_colours(summary)
    assert colours == {"pd-LIBFABRIC": "C0", "aggregated": "C1"}
    assert report.level_marks(summary) == {
        ("aggregated", 16): "partial",
        ("aggregated", 32): "failed",
    }
    seen: dict[str, list[tuple[str, Any]]] = {}
    real_savefig = plt.Figure.savefig

    def keep(fig: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        (ax,) = fig.axes
        seen[Path(path).name] = [(str(line.get_label()), line) for line in ax.get_lines()]
        real_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    report.write_plots(summary, tmp_path / "plots")
    for name, lines in seen.items():
        for label, line in lines:
            run = "aggregated" if "aggregated" in label else "pd-LIBFABRIC"
            assert line.get_color() == colours[run], (name, label)
        labels = [label for label, _ in lines]
        assert "_aggregated failed at 32" in labels, name
        assert any(
            label.startswith("_aggregated") and label.endswith("partial") for label in labels
        )
