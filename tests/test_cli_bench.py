"""``bench`` against the loopback Kubernetes API: the Job it creates, the progress it streams,
the results it collects from the pod's log, the Job it deletes, and how it fails."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from pd_constructs.serving.warmup import render_warm_spares
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.bench import job as bench_job
from ray_pd_eks.bench import pricing, report
from ray_pd_eks.cli import bench
from ray_pd_eks.cli.status import WARM_SPARE_APP, WARMUP_NAMESPACE
from ray_pd_eks.config import DEFAULTS
from tests.bench_sweep import SWEEP
from tests.cli_fixtures import Harness, cli_harness
from tests.fakes.kube_api import (
    SYSTEM_NODE,
    FakeKubeApi,
    finish_job,
    make_event,
    make_job_pod,
    make_rayservice,
)

pytest_plugins = ["tests.fakes.fixtures"]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bench" / "pd"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
JOBS = "/apis/batch/v1/namespaces/inference/jobs"


def _fixture(concurrency: int) -> str:
    (path,) = FIXTURES.glob(f"*-concurrency{concurrency}-*.json")
    return path.read_text()


def _price_item(usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": "g6.8xlarge"}},
            "terms": {
                "OnDemand": {
                    "X.JRTCKXETXF": {
                        "priceDimensions": {
                            "X.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": usd},
                            }
                        }
                    }
                }
            },
        }
    )


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a sweep test of the results, not the figures: no Matplotlib (a third of a second of
    CPU each set); the first sweep test and tests/test_bench_report.py draw and read them."""
    monkeypatch.setattr(report, "write_plots", lambda summary, out: {})


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    kube_api.set_stage("serving")
    assert kube_api.rayservice is not None
    # The live RayService carries the spec this app renders (image, serveConfigV2).
    kube_api.rayservice["spec"] = render_rayservice(DEFAULTS, image=IMAGE)["spec"]
    harness = cli_harness(kube_api, tmp_path)
    harness.session.stub("pricing").add_response(
        "get_products",
        {"PriceList": [_price_item("2.0144000000")], "FormatVersion": "aws_v1"},
        {
            "ServiceCode": "AmazonEC2",
            "Filters": pricing.product_filters("g6.8xlarge", "us-west-2"),
            "FormatVersion": "aws_v1",
            "MaxResults": 10,
        },
    )
    return harness


def _log(*levels: int, failed: tuple[int, ...] = ()) -> str:
    """The pod's log as the script writes it: vLLM's chatter, markers and result files."""
    lines = []
    for c in levels:
        name = f"concurrency-{c}.json"
        lines += [
            f"[bench] level concurrency={c}: started",
            "Namespace(backend='openai', ...)",
            "============ Serving Benchmark Result ============",
        ]
        if c in failed:
            lines += [
                "Traceback (most recent call last):",
                "OSError: Can't load tokenizer for 'Qwen/Qwen3.5-9B'.",
                f"[bench] level concurrency={c}: FAILED (exit 1, no result file)",
            ]
            continue
        lines += [
            bench_job.BEGIN.format(name=name),
            _fixture(c),
            bench_job.END.format(name=name),
            f"[bench] level concurrency={c}: done (exit 0)",
        ]
    return "\n".join(lines) + "\n"


def _the_job(kube_api: FakeKubeApi) -> dict[str, Any]:
    (request,) = kube_api.requests_to(JOBS, "POST")
    return dict(json.loads(request.body))


def _script_args(job: dict[str, Any]) -> list[list[str]]:
    """Each level's `vllm bench serve` argv, parsed back from the Job's script."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    script = container["args"][0]
    return [shlex.split(line)[3:] for line in script.splitlines() if line.startswith("level ")]


def _tokenizer_fetch(job: dict[str, Any]) -> list[str]:
    """The repo, revision, file patterns and folder of the script's tokenizer download."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    (line,) = [x for x in container["args"][0].splitlines() if x.startswith("if ! python3 -c ")]
    argv = shlex.split(line.removeprefix("if ! ").removesuffix("; then"))
    assert argv[:2] == ["python3", "-c"] and "snapshot_download(" in argv[2]
    assert "revision=sys.argv[2]" in argv[2] and "local_dir=sys.argv[4]" in argv[2]
    return argv[3:]


def _run_through(kube_api: FakeKubeApi, cli: Harness, *steps: Any) -> None:
    """One callback per poll: how the Job's pod and status move between polls."""
    cli.clock.on_sleep = list(steps)


def _job_ends(
    kube_api: FakeKubeApi, log: str, *, succeeded: bool = True, **pod: Any
) -> Callable[[], None]:
    """A poll's callback: the Job's pod has terminated (``pod``: its ``reason`` and
    ``exit_code``, as make_job_pod takes them) having logged ``log``, and the Job ends."""

    def ends() -> None:
        job = next(iter(kube_api.jobs.values()))
        made = make_job_pod(job, state="terminated", **pod)
        kube_api.pods.append(made)
        kube_api.pod_logs[made["metadata"]["name"]] = log
        finish_job(job, succeeded=succeeded)

    return ends


def _pod_appears(kube_api: FakeKubeApi, **pod: Any) -> Callable[[], None]:
    """A poll's callback: the Job's pod appears, not running (``pod``: its ``state``,
    ``reason`` and ``message``, as make_job_pod takes them)."""

    def appears() -> None:
        job = next(iter(kube_api.jobs.values()))
        kube_api.pods.append(make_job_pod(job, **pod))

    return appears


def test_sweep_runs_as_a_job_is_collected_and_deleted(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "pd"

    def running() -> None:
        job = kube_api.jobs[next(iter(kube_api.jobs))]
        pod = make_job_pod(job)
        kube_api.pods.append(pod)
        kube_api.pod_logs[pod["metadata"]["name"]] = _log(1)

    def done() -> None:
        job = kube_api.jobs[next(iter(kube_api.jobs))]
        (pod,) = [p for p in kube_api.pods if "bench" in p["metadata"]["name"]]
        pod["status"] = make_job_pod(job, state="terminated")["status"]
        kube_api.pod_logs[pod["metadata"]["name"]] = _log(1, 4)
        finish_job(job, succeeded=True)

    _run_through(kube_api, cli, running, done)
    result = cli.run("bench", "--concurrency", "1,4", "--out", str(out))
    assert result.code == 0, result.out + result.err

    job = _the_job(kube_api)
    assert job["metadata"]["name"].startswith("ray-llm-bench-")
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 3600
    pod_spec = spec["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"role": "system"}
    assert pod_spec["tolerations"] == []  # never on a (tainted) GPU node
    assert pod_spec["restartPolicy"] == "Never"
    (container,) = pod_spec["containers"]
    assert container["image"] == IMAGE  # the image the RayService runs, read from it
    assert spec["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "ray-pd-eks-bench"
    levels = _script_args(job)
    assert len(levels) == 2
    first = levels[0]
    assert first[:3] == ["vllm", "bench", "serve"]

    def flag(argv: list[str], name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag(first, "--base-url") == "http://ray-llm-serve-svc.inference:8000"
    assert flag(first, "--model") == "qwen3.5-9b"
    # The model's own tokenizer at the revision the engines serve (modelRevision, read from
    # the RayService's engine_kwargs), downloaded first: vllm bench serve has no revision flag.
    assert flag(first, "--tokenizer") == bench_job.TOKENIZER_DIR == "/work/tokenizer"
    assert _tokenizer_fetch(job) == [
        "Qwen/Qwen3.5-9B",
        "c202236235762e1c871ad0ccb60c8ee5ba337b9a",
        "*.json,*.txt,*.model,*.tiktoken,*.jinja",
        "/work/tokenizer",
    ]
    assert flag(first, "--dataset-name") == "random"
    assert (flag(first, "--random-input-len"), flag(first, "--random-output-len")) == (
        "3000",
        "150",
    )
    assert flag(first, "--percentile-metrics") == "ttft,tpot,itl,e2el"
    assert flag(first, "--metric-percentiles") == "50,90,99"
    assert flag(first, "--seed") == "0" and "--save-result" in first
    assert [flag(a, "--max-concurrency") for a in levels] == ["1", "4"]
    assert [flag(a, "--num-prompts") for a in levels] == ["16", "32"]

    # Progress was streamed as it came, then the Job was deleted with its pod.
    assert "level concurrency=1: started" in result.out
    assert "level concurrency=4: done (exit 0)" in result.out
    (delete,) = kube_api.requests_to(JOBS, "DELETE")
    assert delete.query == {"propagationPolicy": "Background"}
    assert kube_api.jobs == {} and not [
        p for p in kube_api.pods if "bench" in p["metadata"]["name"]
    ]

    # Raw files unchanged; results and report written next to them.
    assert (out / "concurrency-1.json").read_text() == _fixture(1)
    assert (out / "concurrency-4.json").read_text() == _fixture(4)
    written = json.loads((out / "results.json").read_text())
    assert written["label"] == "pd-LIBFABRIC"
    config = written["config"]
    assert (config["servingMode"], config["kvBackend"]) == ("pd", "LIBFABRIC")
    assert (config["gpuNodeType"], config["gpuNodeCount"], config["gpuCount"]) == (
        "g6.8xlarge",
        2,
        2,
    )
    assert config["gpuPricePerHourUsd"] == 2.0144
    assert config["priceSource"] == "AWS Price List API (On-Demand, Linux, us-west-2)"
    assert config["image"] == IMAGE
    assert [r["concurrency"] for r in written["runs"]] == [1, 4]
    assert (out / "report.md").is_file() and (out / "itl.png").is_file()
    cli.session.assert_no_pending_responses()


def test_pod_that_cannot_pull_its_image_fails_with_the_reason(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    stuck = _pod_appears(
        kube_api,
        state="waiting",
        reason="ImagePullBackOff",
        message='Back-off pulling image "ray:serve-llm-cuda-v1.0"',
    )
    _run_through(kube_api, cli, stuck)
    err = cli.fails("bench", "--out", str(tmp_path / "x"))
    assert "the benchmark Job cannot run: pod ray-llm-bench-" in err
    assert 'is ImagePullBackOff: Back-off pulling image "ray:serve-llm-cuda-v1.0"' in err
    assert kube_api.requests_to(JOBS, "DELETE") and kube_api.jobs == {}
    assert not (tmp_path / "x").exists()


def test_unschedulable_pod_waits_out_the_grace_then_fails(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    pending = _pod_appears(
        kube_api, state="pending", message="0/3 nodes are available: Insufficient cpu."
    )
    _run_through(kube_api, cli, pending)
    err = cli.fails("bench", "--out", str(tmp_path / "x"))
    assert "cannot be scheduled on the system node: 0/3 nodes are available" in err


def test_a_job_that_cannot_create_its_pod_fails_with_the_controllers_reason(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    def rejected() -> None:
        (name,) = kube_api.jobs
        event = make_event(
            name,
            "FailedCreate",
            f'Error creating: pods "{name}-x7k2p" is forbidden: violates PodSecurity '
            '"restricted:latest": runAsNonRoot != true',
        )
        event["involvedObject"]["kind"] = "Job"
        kube_api.events = [event]

    # No pod for six polls (60 s): then the controller's event is the answer.
    _run_through(kube_api, cli, rejected, *([lambda: None] * 6))
    err = cli.fails("bench", "--out", str(tmp_path / "x"))
    assert "the Job controller cannot create its pod: Error creating: pods" in err
    assert 'violates PodSecurity "restricted:latest"' in err
    assert cli.clock.sleeps.count(10.0) == 6
    assert kube_api.jobs == {}


def test_job_killed_without_results_reports_the_pods_ending(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    killed = _job_ends(
        kube_api,
        "[bench] level concurrency=1: started\n",
        succeeded=False,
        reason="OOMKilled",
        exit_code=137,
    )
    _run_through(kube_api, cli, killed)
    err = cli.fails("bench", "--out", str(tmp_path / "x"))
    assert "ended Failed with no results: BackoffLimitExceeded" in err
    assert "ended OOMKilled with exit code 137" in err
    assert kube_api.jobs == {}


@pytest.mark.usefixtures("no_plots")
def test_a_level_without_a_result_is_reported_failed_with_its_output(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "pd"

    ends = _job_ends(kube_api, _log(1, 4, failed=(4,)), succeeded=False, exit_code=1)
    _run_through(kube_api, cli, ends)
    result = cli.run("bench", "--concurrency", "1,4", "--out", str(out))
    assert result.code == 1
    written = json.loads((out / "results.json").read_text())
    failed = written["runs"][1]
    assert (failed["concurrency"], failed["status"]) == (4, "failed")
    assert "OSError: Can't load tokenizer for 'Qwen/Qwen3.5-9B'." in failed["error"]
    assert failed["ttft_ms"] is None
    assert "- pd-LIBFABRIC @ 4: vllm bench serve wrote no result" in (out / "report.md").read_text()
    assert "level concurrency=4 FAILED" in result.err


def test_nothing_is_created_while_the_app_is_not_running(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.rayservice = make_rayservice(ready=False, app_status="DEPLOYING")
    result = cli.run("bench")
    assert result.code == 1 and "the Serve app is not RUNNING" in result.err
    assert kube_api.requests_to(JOBS) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "0,4"], "each level must be 1..1024"),
        (["--concurrency", "1,1"], "a level is repeated"),
        (["--concurrency", "a"], "expected numbers"),
        (["--input-len", "4000", "--output-len", "97"], "exceeds the deployed maxModelLen 4096"),
        (["--prompts", "0"], "--prompts must be at least 1"),
        (["--concurrency", "1,1025"], "each level must be 1..1024"),
        (["--tokenizer", "not a repo"], "expected a Hugging Face repo"),
        (["--tokenizer-revision=-main"], "expected a Hugging Face revision"),
        (["--tokenizer-revision", "r" * 129], "expected a Hugging Face revision"),
        (["--timeout-minutes", "0"], "--timeout-minutes must be at least 1"),
        (["--price-per-hour", "0"], "--price-per-hour must be a positive number"),
    ],
)
def test_bad_options_are_usage_errors(
    kube_api: FakeKubeApi, cli: Harness, argv: list[str], message: str
) -> None:
    result = cli.run("bench", *argv)
    assert result.code == 2 and message in result.err
    assert kube_api.requests_to(JOBS) == []


@pytest.mark.usefixtures("no_plots")
def test_default_out_folder_is_named_after_a_safe_label(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    _run_through(kube_api, cli, _job_ends(kube_api, _log(1)))
    result = cli.run("bench", "--concurrency", "1", "--label", "pd/EFA run 1")
    assert result.code == 0, result.err
    (folder,) = (tmp_path / "bench-results").iterdir()
    assert folder.name.startswith("pd-EFA-run-1-2")  # then the UTC time
    assert json.loads((folder / "results.json").read_text())["label"] == "pd/EFA run 1"


def test_an_output_folder_with_results_is_not_mixed_into(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "concurrency-1.json").write_text(_fixture(1))
    result = cli.run("bench", "--out", str(used))
    assert result.code == 2 and "already holds results: choose an empty folder" in result.err
    assert kube_api.requests_to(JOBS) == []


def test_interrupted_sweep_still_deletes_its_job(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    _run_through(kube_api, cli, interrupt)
    result = cli.run("bench", "--out", str(tmp_path / "x"))
    assert result.code == 130 and "interrupted" in result.err
    (delete,) = kube_api.requests_to(JOBS, "DELETE")
    assert delete.query == {"propagationPolicy": "Background"}
    assert kube_api.jobs == {}


def test_concurrency_limits_and_order() -> None:
    from ray_pd_eks.cli.bench import parse_concurrency

    assert parse_concurrency("32,1,1024") == (32, 1, 1024)  # as given, up to the limit
    assert parse_concurrency("1") == (1,)


def test_longest_prompt_that_fits_is_accepted(kube_api: FakeKubeApi, cli: Harness) -> None:
    _run_through(
        kube_api, cli, lambda: finish_job(next(iter(kube_api.jobs.values())), succeeded=False)
    )
    result = cli.run("bench", "--input-len", "4000", "--output-len", "96")
    assert "maxModelLen" not in result.err  # 4000 + 96 = 4096 fits; the Job was created
    assert kube_api.requests_to(JOBS, "POST")


@pytest.mark.usefixtures("no_plots")
def test_price_falls_back_to_the_dated_table_when_the_api_is_denied(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    kube_api.set_stage("serving")
    assert kube_api.rayservice is not None
    kube_api.rayservice["spec"] = render_rayservice(
        DEFAULTS.with_overrides({"servingMode": "aggregated"}), image=IMAGE
    )["spec"]
    cli = cli_harness(kube_api, tmp_path)
    cli.session.stub("pricing").add_client_error(
        "get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts"
    )

    _run_through(kube_api, cli, _job_ends(kube_api, _log(1)))
    out = tmp_path / "agg"
    result = cli.run(
        "bench", "--concurrency", "1", "--out", str(out), "--tokenizer", "Qwen/Qwen3-8B"
    )
    assert result.code == 0, result.err
    (argv,) = _script_args(_the_job(kube_api))
    assert argv[argv.index("--tokenizer") + 1] == "/work/tokenizer"
    # Another repo's tokenizer: its main branch unless --tokenizer-revision names one.
    assert _tokenizer_fetch(_the_job(kube_api))[:2] == ["Qwen/Qwen3-8B", "main"]
    config = json.loads((out / "bench-meta.json").read_text())["config"]
    assert (config["tokenizer"], config["tokenizerRevision"]) == ("Qwen/Qwen3-8B", "main")
    assert config["servingMode"] == "aggregated" and config["engines"] == 2
    assert config["kvBackend"] is None
    assert config["gpuPricePerHourUsd"] == pricing.ON_DEMAND_USD_PER_HOUR["g6.8xlarge"]
    assert "dated 2026-11" in config["priceSource"]
    assert "Price List API was not usable: AccessDeniedException" in config["priceSource"]
    assert json.loads((out / "results.json").read_text())["label"] == "aggregated"


def test_job_manifest_is_the_commented_template_filled() -> None:
    sweep = replace(SWEEP, label="it's")
    manifest = bench_job.render_job(
        sweep, name="n", namespace="ns", image="i:1", deadline_seconds=60
    )
    assert manifest["metadata"] == {
        "name": "n",
        "namespace": "ns",
        "labels": {
            "app.kubernetes.io/name": "ray-pd-eks-bench",
            "app.kubernetes.io/part-of": "ray-pd-eks",
        },
    }
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/bash", "-c"]
    assert "--label 'it'\"'\"'s'" in container["args"][0]  # quoted for the shell
    assert manifest["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest
    assert bench_job.job_name("r" * 47, "20261130101500") == "r" * 42 + "-bench-20261130101500"
    assert len(bench_job.job_name("r" * 47, "20261130101500")) <= 63


def test_result_blocks_are_recovered_byte_for_byte() -> None:
    text = _fixture(16)
    view = bench_job.read_log(_log(16))
    assert view.results == {"concurrency-16.json": text}
    assert view.progress == ["level concurrency=16: started", "level concurrency=16: done (exit 0)"]
    assert view.failed_levels == {}
    assert SYSTEM_NODE  # the pods of make_job_pod land on the system node


def test_the_deployed_engine_profile_is_read_from_the_live_serve_config() -> None:
    """bench records what the RayService runs (not what the local settings say), and the
    default label names a profile other than the default."""
    from types import SimpleNamespace

    from pd_constructs.serving.workload import render_rayservice
    from ray_pd_eks.cli.bench import deployed_settings, profile_suffix
    from ray_pd_eks.config import DEFAULTS

    app: Any = SimpleNamespace(config=DEFAULTS)
    plain = deployed_settings(render_rayservice(DEFAULTS, image="img:1"), app)
    assert {k: plain[k] for k in ("quantization", "kvCacheDtype", "requestRouter")} == {
        "quantization": "none",
        "kvCacheDtype": "auto",
        "requestRouter": "power-of-two",
    }
    assert (plain["enforceEager"], plain["dtype"], profile_suffix(plain)) == (True, "bfloat16", "")
    live = DEFAULTS.with_overrides(
        {
            "quantization": "fp8",
            "kvCacheDtype": "fp8",
            "enforceEager": False,
            "requestRouter": "prefix-aware",
            "gpuNodeCount": 3,
            "decodeReplicas": 2,
        }
    )
    found = deployed_settings(render_rayservice(live, image="img:1"), app)
    assert (found["quantization"], found["kvCacheDtype"], found["requestRouter"]) == (
        "fp8",
        "fp8",
        "prefix-aware",
    )
    assert found["enforceEager"] is False and found["decodeReplicas"] == 2
    assert profile_suffix(found) == "-fp8w-fp8kv-graphs-prefix"
    aggregated = DEFAULTS.with_overrides(
        {"servingMode": "aggregated", "requestRouter": "prefix-aware"}
    )
    found = deployed_settings(render_rayservice(aggregated, image="img:1"), app)
    assert (found["servingMode"], found["requestRouter"]) == ("aggregated", "prefix-aware")


# -- the tokenizer at the served revision ---------------------------------------------------


def test_the_tokenizer_revision_is_the_one_the_live_engines_load() -> None:
    """The revision comes from the RayService's engine_kwargs (what serves), not from the
    local settings; a staged copy (no revision in the engines) falls back to the setting."""
    from types import SimpleNamespace

    from ray_pd_eks.cli.bench import deployed_settings, tokenizer_revision
    from tests.conftest import S3_URI

    app: Any = SimpleNamespace(config=DEFAULTS)
    live = DEFAULTS.with_overrides({"modelRevision": "0123abcd" * 5})
    deployed = deployed_settings(render_rayservice(live, image="img:1"), app)
    assert deployed["modelRevision"] == "0123abcd" * 5 != DEFAULTS.model_revision
    own: Any = SimpleNamespace(tokenizer=None, tokenizer_revision=None)
    assert tokenizer_revision(own, deployed) == "0123abcd" * 5
    named: Any = SimpleNamespace(tokenizer="Qwen/Qwen3.5-9B", tokenizer_revision=None)
    assert tokenizer_revision(named, deployed) == "0123abcd" * 5  # the model's own repo
    other: Any = SimpleNamespace(tokenizer="Qwen/Qwen3-8B", tokenizer_revision=None)
    assert tokenizer_revision(other, deployed) == "main"
    pinned: Any = SimpleNamespace(tokenizer="Qwen/Qwen3-8B", tokenizer_revision="v2.0")
    assert tokenizer_revision(pinned, deployed) == "v2.0"
    staged = DEFAULTS.with_overrides({"modelS3Uri": S3_URI, "modelRevision": "v9"})
    app_staged: Any = SimpleNamespace(config=staged)
    found = deployed_settings(render_rayservice(staged, image="img:1"), app_staged)
    assert found["modelSource"] == "Qwen/Qwen3.5-9B" and found["modelRevision"] == "v9"


def test_an_explicit_tokenizer_revision_is_downloaded_and_recorded(
    kube_api: FakeKubeApi, cli: Harness, tmp_path: Path
) -> None:
    _run_through(kube_api, cli, _job_ends(kube_api, _log(1)))
    out = tmp_path / "rev"
    result = cli.run("bench", "--concurrency", "1", "--out", str(out), "--tokenizer-revision", "v1")
    assert result.code == 0, result.err
    assert _tokenizer_fetch(_the_job(kube_api))[:2] == ["Qwen/Qwen3.5-9B", "v1"]
    config = json.loads((out / "bench-meta.json").read_text())["config"]
    assert (config["tokenizer"], config["tokenizerRevision"]) == ("Qwen/Qwen3.5-9B", "v1")


def _run_script(tmp_path: Path, python_exit: int) -> tuple[int, str, list[str]]:
    """The Job's script under bash, with stand-ins for python3 (the download) and vllm that
    record their arguments; the script's /work paths moved under tmp_path."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool, code in (("python3", python_exit), ("vllm", 0)):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit {code}\n')
        stub.chmod(0o755)
    sweep = replace(
        SWEEP, tokenizer="o/m", tokenizer_revision="abc123", concurrency=(1, 4), prompts=(16, 32)
    )
    script = sweep.script().replace("/work/", f"{tmp_path}/work/")
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        timeout=30,
        check=False,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, done.stdout, lines


def test_a_tokenizer_that_does_not_download_fails_the_job_before_any_level(
    tmp_path: Path,
) -> None:
    code, out, calls = _run_script(tmp_path, python_exit=1)
    assert code == 1
    assert "[bench] tokenizer o/m@abc123: download failed" in out
    assert [c.split()[0] for c in calls] == ["python3"]  # vllm never ran
    assert "level concurrency" not in out


def test_the_levels_run_with_the_downloaded_tokenizer(tmp_path: Path) -> None:
    code, out, calls = _run_script(tmp_path, python_exit=0)
    assert f"[bench] tokenizer o/m@abc123 in {tmp_path}/work/tokenizer" in out
    fetch, *levels = calls
    assert fetch.startswith("python3 -c ") and fetch.endswith(
        f" o/m abc123 *.json,*.txt,*.model,*.tiktoken,*.jinja {tmp_path}/work/tokenizer"
    )
    assert len(levels) == 2 and all(f"--tokenizer {tmp_path}/work/tokenizer " in c for c in levels)
    assert code == 1  # the stand-in vllm wrote no result file: each level is reported failed
    assert "level concurrency=4: FAILED (exit 0, no result file)" in out


# -- warm spare nodes are left out of the cost per token ------------------------------------------


class _KubeApiError(Exception):
    pass


class _Cluster:
    """What ``gpu_nodes`` reads: the GPU nodes and the warm-up namespace's pods."""

    def __init__(self, nodes: list[dict[str, Any]], warmup: list[dict[str, Any]] | None) -> None:
        self.nodes, self.warmup = nodes, warmup
        self.app = type("App", (), {"config": DEFAULTS})()
        self.kube = type("Kube", (), {"KubeApiError": _KubeApiError})()
        self.client = self

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        assert path == "/api/v1/nodes" and params == {"labelSelector": "role=gpu-worker"}
        return {"items": self.nodes}

    def get_json(self, path: str) -> dict[str, Any]:
        assert path == f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods"
        if self.warmup is None:
            raise _KubeApiError("forbidden")
        return {"items": self.warmup}


def _spare_pod(node: str | None, phase: str = "Running", app: str = "gpu-warm-spare") -> dict:
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": app}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def _gpu(name: str, instance_type: str = "g6.8xlarge") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": instance_type}}
    }


def test_a_node_held_by_a_warm_spare_is_not_a_serving_node() -> None:
    nodes = [_gpu("a"), _gpu("b"), _gpu("c")]
    warmup = [
        _spare_pod("c"),
        _spare_pod(None, phase="Pending"),  # the next spare, not placed yet
        _spare_pod("a", app="image-prepull"),
        _spare_pod("b", phase="Pending"),
    ]
    assert bench.gpu_nodes(_Cluster(nodes, warmup)) == ("g6.8xlarge", 2, 1)  # type: ignore[arg-type]


def test_without_the_warm_up_namespace_every_gpu_node_counts() -> None:
    nodes = [_gpu("a"), _gpu("b")]
    assert bench.gpu_nodes(_Cluster(nodes, None)) == ("g6.8xlarge", 2, 0)  # type: ignore[arg-type]


def test_the_settings_answer_when_the_serving_nodes_do_not_agree() -> None:
    nodes = [_gpu("a"), _gpu("b", "g6e.8xlarge")]
    assert bench.gpu_nodes(_Cluster(nodes, [])) == ("g6.8xlarge", 2, 0)  # type: ignore[arg-type]
    assert bench.gpu_nodes(_Cluster([], [])) == (  # type: ignore[arg-type]
        DEFAULTS.gpu_node_type,
        DEFAULTS.gpu_node_count,
        0,
    )


def test_the_placeholders_label_is_the_one_the_app_renders() -> None:
    spare_config = DEFAULTS.with_overrides(
        {"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4, "gpuWarmSpareNodes": 1}
    )
    (_, deployment) = render_warm_spares(spare_config, image="pause@sha256:" + "0" * 64)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == WARM_SPARE_APP
