"""``bench``: measure the endpoint with ``vllm bench serve`` in the cluster; ``bench report``:
re-render and compare results offline.

The load generator runs as a Job on the system node against ``<rayService>-serve-svc:8000``
(in-cluster: no port-forward or API server proxy in the measured path), one pass per
concurrency level. The CLI streams the Job's progress from its log, collects each level's
result file from the same log, deletes the Job, and writes the raw files, ``bench-meta.json``,
``results.json``, ``report.md`` and plots. See docs/benchmarking.md.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ray_pd_eks import lambda_code
from ray_pd_eks.bench import job as bench_job
from ray_pd_eks.bench import pricing, report, results
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.cluster import Cluster
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, CheckFailed, UsageError
from ray_pd_eks.cli.output import duration, table
from ray_pd_eks.cli.status import WARMUP_NAMESPACE, spare_nodes
from ray_pd_eks.config.rules_model import is_hf_revision
from ray_pd_eks.instance_types import gpu_spec

NAME = "bench"
# The placeholders' label (assets/manifests/gpu-warm-spare.yaml, pd_constructs/serving/warmup.py).
HELP = "benchmark the endpoint (TTFT, ITL, throughput, cost) with vllm bench serve; `report`"
DESCRIPTION = """\
Run `vllm bench serve` (from the Ray LLM image the RayService runs) as a Kubernetes Job on the
system node against <rayServiceName>-serve-svc:8000, once per concurrency level, with random
prompts of --input-len tokens asking for --output-len tokens (defaults: 3000 in, 150 out, like
RAG or summarisation). Streams progress, collects each level's result file, deletes the Job
and writes into --out: the raw vLLM result files, bench-meta.json, results.json, report.md and
ttft.png / itl.png / throughput.png, with the cost per million output tokens.

  bench report DIR [DIR...] [--out OUT]
re-renders results.json, report.md and the plots from the result files in each DIR (offline,
no cluster); with several DIRs it compares the runs side by side (e.g. pd vs aggregated).

Exit 1 when a level's requests all failed or the Job failed (the pod's reason is shown)."""

DEFAULT_CONCURRENCY = "1,4,16,32"
MAX_CONCURRENCY = 1024
UNSCHEDULABLE_GRACE_SECONDS = 120
# A Job whose controller has not created a pod after this long, with a FailedCreate event (Pod
# Security admission, a quota), will not create one.
NO_POD_GRACE_SECONDS = 60
# Container waiting reasons that will not clear by themselves.
_STUCK = frozenset(
    {
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--concurrency",
        default=DEFAULT_CONCURRENCY,
        metavar="N,N,...",
        help=f"requests in flight, one level each, in this order (default: {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--prompts",
        type=int,
        metavar="N",
        help="prompts per level (default: 8 x the level's concurrency, at least 16)",
    )
    parser.add_argument(
        "--input-len", type=int, default=3000, metavar="TOKENS", help="prompt length (3000)"
    )
    parser.add_argument(
        "--output-len", type=int, default=150, metavar="TOKENS", help="answer length (150)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random prompt seed (default: 0)")
    parser.add_argument(
        "--tokenizer",
        metavar="ORG/NAME",
        help="Hugging Face repo whose tokenizer builds the prompts (default: modelSource; give "
        "an ungated repo with the same tokenizer when the model is gated)",
    )
    parser.add_argument(
        "--tokenizer-revision",
        metavar="REV",
        help="the tokenizer's Hugging Face revision (default: the deployed modelRevision for "
        "the model's own tokenizer; main for another --tokenizer)",
    )
    parser.add_argument(
        "--label",
        help="name of this run in reports (default: the serving mode, e.g. pd-LIBFABRIC)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write the results (default: bench-results/<label>-<UTC time>)",
    )
    parser.add_argument(
        "--timeout-minutes",
        type=int,
        default=60,
        metavar="N",
        help="stop the sweep after N minutes (the Job's deadline; default: 60)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between reads of the Job's progress (default: 10)",
    )
    _price_option(parser)
    sub = parser.add_subparsers(dest="bench_command", metavar="report")
    rep = sub.add_parser(
        "report",
        help="re-render results.json, report.md and the plots from result files, offline",
        description="Read every vLLM result JSON in each DIR (whatever the file names) and "
        "write results.json, report.md and the plots; several DIRs are compared side by side.",
    )
    rep.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    rep.add_argument(
        "--out",
        dest="report_out",
        type=Path,
        metavar="OUT",
        help="output folder (default: the single input DIR; required with several)",
    )
    _price_option(rep, dest="report_price")
    rep.add_argument(
        "--gpu-nodes",
        dest="report_gpu_nodes",
        type=int,
        metavar="N",
        help="number of GPU nodes the runs used (bench-meta.json records it; give it for "
        "results without one, for the cost per token)",
    )


def _price_option(parser: argparse.ArgumentParser, dest: str = "price_per_hour") -> None:
    parser.add_argument(
        "--price-per-hour",
        dest=dest,
        type=float,
        metavar="USD",
        help="price of one GPU node per hour, instead of the Price List API or the built-in "
        "table (e.g. your negotiated or reserved price)",
    )


# --- bench report --------------------------------------------------------------------------


def render_outputs(summary: dict[str, Any], out: Path) -> list[Path]:
    """results.json, report.md and the plots into ``out``."""
    written = [results.write_results(summary, out), report.write_report(summary, out)]
    report.write_plots(summary, out)
    written += [out / name for name in report.PLOTS]
    return written


def run_report(app: App) -> int:
    args = app.args
    dirs: list[Path] = args.dirs
    if len(dirs) > 1 and args.report_out is None:
        raise UsageError("several DIRs: pass --out OUT for the comparison")
    if args.report_price is not None and args.report_price <= 0:
        raise UsageError("--price-per-hour must be a positive number of USD")
    if args.report_gpu_nodes is not None and args.report_gpu_nodes < 1:
        raise UsageError(f"--gpu-nodes {args.report_gpu_nodes}: must be at least 1")
    out = args.report_out or dirs[0]
    try:
        summary = results.collect(
            dirs, price_per_hour=args.report_price, gpu_nodes=args.report_gpu_nodes
        )
    except (results.ResultError, OSError, json.JSONDecodeError) as err:
        raise UsageError(str(err)) from None
    for path in render_outputs(summary, out):
        app.print(f"wrote {path}")
    app.print(*summary_lines(summary))
    failed = [r for r in summary["runs"] if r["status"] == "failed"]
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def summary_lines(summary: dict[str, Any]) -> list[str]:
    rows = []
    for run in summary["runs"]:
        ok = run["status"] != "failed"
        rows.append(
            [
                str(run["label"]),
                str(run["concurrency"]),
                run["status"] if ok else f"FAILED ({run.get('error', '')})",
                report.fmt(report.value(run, "ttft_ms", "p50")),
                report.fmt(report.value(run, "ttft_ms", "p99")),
                report.fmt(report.value(run, "itl_ms", "p50")),
                report.fmt(report.value(run, "itl_ms", "p99")),
                report.fmt(report.value(run, "output_throughput")),
                report.fmt(run.get("cost_per_million_output_tokens_usd"), 2),
            ]
        )
    headers = [
        "RUN",
        "CONC",
        "STATUS",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "OUT tok/s",
        "$/M out tok",
    ]
    return ["", f"{summary['label']} (latencies in ms):", *table(headers, rows)]


# --- bench ---------------------------------------------------------------------------------


def parse_concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: expected numbers like 1,4,16,32") from None
    if not levels or any(not 1 <= c <= MAX_CONCURRENCY for c in levels):
        raise UsageError(f"--concurrency {text!r}: each level must be 1..{MAX_CONCURRENCY}")
    if len(set(levels)) != len(levels):
        raise UsageError(f"--concurrency {text!r}: a level is repeated")
    return levels


def deployed_settings(rayservice: dict[str, Any], app: App) -> dict[str, Any]:
    """What the live RayService serves (mode, replicas, model, KV backend, context length),
    read from its serveConfigV2; the configured values where it does not say."""
    config = app.config
    settings: dict[str, Any] = {
        "servingMode": config.serving_mode,
        "kvBackend": config.kv_backend if config.is_pd else None,
        "modelId": config.model_id,
        "modelSource": config.model_source,
        # What the engines load; with modelS3Uri they load a local copy (no revision), whose
        # tokenizer the setting's revision of modelSource stands for.
        "modelRevision": config.model_revision,
        "maxModelLen": config.max_model_len,
        "prefillReplicas": config.prefill_replicas if config.is_pd else None,
        "decodeReplicas": config.decode_replicas if config.is_pd else None,
        "engines": None if config.is_pd else config.worker_replicas,
        # The engine profile (docs/benchmarking.md, "Engine profiles").
        "dtype": config.dtype,
        "quantization": config.quantization,
        "kvCacheDtype": config.kv_cache_dtype,
        "enforceEager": config.enforce_eager,
        "requestRouter": config.request_router,
    }
    text = ((rayservice.get("spec") or {}).get("serveConfigV2")) or ""
    try:
        serve = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return settings
    apps = [a for a in serve.get("applications") or [] if isinstance(a, dict)]
    found = next((a for a in apps if a.get("name") == config.application_name), None)
    found = found or (apps[0] if apps else {})
    args = found.get("args") or {}
    llm: dict[str, Any]
    engines: list[Any]
    if found.get("import_path") == "ray.serve.llm:build_openai_app":
        llm = next(iter(args.get("llm_configs") or []), {})
        engines = [llm]
        settings |= {
            "servingMode": "aggregated",
            "kvBackend": None,
            "prefillReplicas": None,
            "decodeReplicas": None,
            "engines": (llm.get("deployment_config") or {}).get("num_replicas"),
        }
    elif found.get("import_path") == "ray.serve.llm:build_pd_openai_app":
        llm = args.get("prefill_config") or {}
        engines = [llm, args.get("decode_config") or {}]
        extra = ((llm.get("engine_kwargs") or {}).get("kv_transfer_config") or {}).get(
            "kv_connector_extra_config"
        ) or {}
        backends = extra.get("backends") or []
        settings |= {
            "servingMode": "pd",
            "kvBackend": ",".join(map(str, backends)) or "UCX (NIXL default)",
            "prefillReplicas": (llm.get("deployment_config") or {}).get("num_replicas"),
            "decodeReplicas": (
                (args.get("decode_config") or {}).get("deployment_config") or {}
            ).get("num_replicas"),
            "engines": None,
        }
    else:
        return settings
    loading = llm.get("model_loading_config") or {}
    engine = llm.get("engine_kwargs") or {}
    settings["modelId"] = loading.get("model_id") or settings["modelId"]
    source = str(loading.get("model_source") or "")
    if _HF_REPO.match(source):  # a staged copy's local path is no use to the load generator
        settings["modelSource"] = source
    settings["maxModelLen"] = engine.get("max_model_len") or settings["maxModelLen"]
    # vLLM's tokenizer_revision (else revision) in engine_kwargs: pd_constructs/serving/workload.py
    # revision_kwargs.
    revision = engine.get("tokenizer_revision") or engine.get("revision")
    settings["modelRevision"] = str(revision or settings["modelRevision"])
    settings |= {
        "dtype": engine.get("dtype") or settings["dtype"],
        "quantization": engine.get("quantization") or "none",
        "kvCacheDtype": engine.get("kv_cache_dtype") or "auto",
        "enforceEager": bool(engine.get("enforce_eager", settings["enforceEager"])),
        "requestRouter": "power-of-two",
    }
    for cfg in engines:
        deployment = (cfg.get("deployment_config") if isinstance(cfg, dict) else None) or {}
        router = (deployment.get("request_router_config") or {}).get("request_router_class")
        if "PrefixCacheAffinityRouter" in str(router or ""):
            settings["requestRouter"] = "prefix-aware"
    return settings


def tokenizer_revision(args: argparse.Namespace, deployed: dict[str, Any]) -> str:
    """The revision of the tokenizer the prompts are built with: ``--tokenizer-revision``, else
    the revision the engines serve when the tokenizer is the model's own, else ``main``."""
    if args.tokenizer_revision:
        return str(args.tokenizer_revision)
    if args.tokenizer in (None, deployed["modelSource"]):
        return str(deployed["modelRevision"])
    return "main"


def profile_suffix(deployed: dict[str, Any]) -> str:
    """What the default label adds for an engine profile other than the default: ``-fp8w``
    (FP8 weights), ``-fp8kv``, ``-graphs`` (enforceEager off), ``-prefix`` (prefix-aware)."""
    parts = [
        "fp8w" if deployed.get("quantization") == "fp8" else "",
        "fp8kv" if deployed.get("kvCacheDtype") == "fp8" else "",
        "graphs" if deployed.get("enforceEager") is False else "",
        "prefix" if deployed.get("requestRouter") == "prefix-aware" else "",
    ]
    return "".join(f"-{p}" for p in parts if p)


def head_image(rayservice: dict[str, Any]) -> str:
    spec = ((rayservice.get("spec") or {}).get("rayClusterConfig") or {}).get("headGroupSpec")
    containers = (((spec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    image = str(containers[0].get("image") or "") if containers else ""
    if not image:
        raise CheckFailed("the RayService's head has no container image to run the benchmark")
    return image


def gpu_nodes(cluster: Cluster) -> tuple[str, int, int]:
    """(instance type, GPU nodes that serve, warm spare nodes) as the cluster has them. A node
    held by a warm spare's placeholder (``gpuWarmSpareNodes``) runs no engine, so the cost per
    token leaves it out and the report names it."""
    config = cluster.app.config
    items = cluster.get("/api/v1/nodes", {"labelSelector": "role=gpu-worker"}).get("items") or []
    spares = warm_spare_nodes(cluster)
    serving = [n for n in items if (n.get("metadata") or {}).get("name") not in spares]
    held = len(items) - len(serving)
    types = {
        str(((n.get("metadata") or {}).get("labels") or {}).get("node.kubernetes.io/instance-type"))
        for n in serving
    }
    if len(types) == 1 and None not in types:
        return types.pop(), len(serving), held
    return config.gpu_node_type, len(serving) or config.gpu_node_count, held


def warm_spare_nodes(cluster: Cluster) -> set[str]:
    """Names of the nodes a warm spare's placeholder pod runs on (``status.spare_nodes``, the
    rule ``status`` marks them by); none when the warm-up namespace cannot be read."""
    try:
        found = cluster.client.get_json(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods")
    except cluster.kube.KubeApiError:
        return set()
    return set(spare_nodes(found))


def node_price(app: App, instance_type: str) -> pricing.Price:
    """--price-per-hour, else the Price List API, else the dated table (saying why)."""
    if app.args.price_per_hour is not None:
        return pricing.Price(app.args.price_per_hour, "--price-per-hour")
    from botocore import exceptions as bce

    try:
        client = app.aws.session.client("pricing", region_name=pricing.PRICING_API_REGION)
        found = pricing.price_from_api(client, instance_type, app.aws.region)
    except (bce.BotoCoreError, bce.ClientError) as err:
        app.debug(f"pricing:GetProducts failed: {err}")
        fallback = pricing.table_price(instance_type)
        reason = err.response["Error"]["Code"] if isinstance(err, bce.ClientError) else "error"
        return pricing.Price(
            fallback.usd_per_hour,
            f"{fallback.source} (the Price List API was not usable: {reason})",
        )
    return found or pricing.table_price(instance_type)


def pod_failure(pod: dict[str, Any] | None, now: datetime) -> str | None:
    """Why the benchmark pod will never run, or None while it may still."""
    if pod is None:
        return None
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            since = lambda_code.checks().parse_time(cond.get("lastTransitionTime"))
            if since is not None and (now - since).total_seconds() >= UNSCHEDULABLE_GRACE_SECONDS:
                return (
                    f"pod {pod['metadata']['name']} cannot be scheduled on the system node: "
                    f"{cond.get('message', '')} (it needs 1 vCPU and 4 GiB free on a node "
                    "labelled role=system)"
                )
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            return (
                f"pod {pod['metadata']['name']}: container {container.get('name')} is "
                f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
            )
    return None


def pod_ending(pod: dict[str, Any] | None) -> str:
    """How the pod's container ended, for a failed Job's message ('' if it did not end)."""
    if pod is None:
        return ""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated")
        if ended:
            message = f": {ended['message']}" if ended.get("message") else ""
            return (
                f"; pod {pod['metadata']['name']} (container {container.get('name')}) ended "
                f"{ended.get('reason', '')} with exit code {ended.get('exitCode')}{message}"
            )
    return ""


def job_outcome(job: dict[str, Any]) -> tuple[str, str] | None:
    """("Complete", "") or ("Failed", reason: message) once the Job is finished."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return "Complete", ""
        if cond.get("type") == "Failed":
            return "Failed", f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return None


class _Watch:
    """The Job's pod and log, read once per poll."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        ns = cluster.namespace
        self.job_path = f"/apis/batch/v1/namespaces/{ns}/jobs/{name}"
        self.pods_path = f"/api/v1/namespaces/{ns}/pods"
        self.pod: dict[str, Any] | None = None
        self.log = ""

    def job(self) -> dict[str, Any]:
        return self.cluster.get(self.job_path)

    def failed_create(self) -> str | None:
        """The Job controller's latest FailedCreate event (why it made no pod), if any."""
        events = self.cluster.get(
            f"/api/v1/namespaces/{self.cluster.namespace}/events",
            {"fieldSelector": f"involvedObject.kind=Job,involvedObject.name={self.name}"},
        )
        found = [
            e
            for e in events.get("items") or []
            if e.get("reason") == "FailedCreate"
            and (e.get("involvedObject") or {}).get("name") == self.name
        ]
        found.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return str(found[-1].get("message") or "FailedCreate") if found else None

    def refresh(self) -> None:
        pods = self.cluster.get(
            self.pods_path, {"labelSelector": f"{bench_job.JOB_NAME_LABEL}={self.name}"}
        )
        items = sorted(
            pods.get("items") or [],
            key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")),
        )
        self.pod = items[-1] if items else None
        if self.pod is None or not (self.pod.get("spec") or {}).get("nodeName"):
            return
        started = any(
            "waiting" not in (c.get("state") or {})
            for c in (self.pod.get("status") or {}).get("containerStatuses") or []
        )
        if not started:
            return
        path = f"{self.pods_path}/{self.pod['metadata']['name']}/log"
        kube = self.cluster.kube
        try:
            self.log = self.cluster.client.get_text(path, {"container": bench_job.CONTAINER})
        except kube.KubeAuthError:
            raise
        except kube.KubeApiError as err:
            self.cluster.app.debug(f"log not readable yet: {err}")


def run(app: App) -> int:
    if getattr(app.args, "bench_command", None) == "report":
        return run_report(app)
    args = app.args
    config = app.config
    levels = parse_concurrency(args.concurrency)
    for flag, number in (
        ("--input-len", args.input_len),
        ("--output-len", args.output_len),
        ("--timeout-minutes", args.timeout_minutes),
    ):
        if number < 1:
            raise UsageError(f"{flag} must be at least 1")
    if args.prompts is not None and args.prompts < 1:
        raise UsageError("--prompts must be at least 1")
    if args.tokenizer is not None and not _HF_REPO.match(args.tokenizer):
        raise UsageError(f"--tokenizer {args.tokenizer!r}: expected a Hugging Face repo org/name")
    if args.tokenizer_revision is not None and not is_hf_revision(args.tokenizer_revision):
        raise UsageError(
            f"--tokenizer-revision {args.tokenizer_revision!r}: expected a Hugging Face "
            "revision (a commit, a tag or a branch)"
        )
    if args.poll_interval <= 0:
        raise UsageError("--poll-interval must be a positive number of seconds")
    if args.price_per_hour is not None and args.price_per_hour <= 0:
        raise UsageError("--price-per-hour must be a positive number of USD")
    if args.out is not None and args.out.is_dir() and any(args.out.glob("*.json")):
        raise UsageError(f"--out {args.out} already holds results: choose an empty folder")

    cluster = Cluster(app)
    rayservice = cluster.rayservice()
    state = lambda_code.checks().rayservice_state(rayservice, config.application_name)
    if not state.running:
        raise CheckFailed(
            f"the Serve app is not RUNNING ({state.summary()}): nothing to benchmark yet; "
            "watch it with `ray-pd-eks status --watch`"
        )
    deployed = deployed_settings(rayservice, app)
    if args.input_len + args.output_len > int(deployed["maxModelLen"]):
        raise UsageError(
            f"--input-len {args.input_len} + --output-len {args.output_len} exceeds the "
            f"deployed maxModelLen {deployed['maxModelLen']}: shorten them"
        )
    image = head_image(rayservice)
    node_type, node_count, spare_count = gpu_nodes(cluster)
    price = node_price(app, node_type)
    mode = deployed["servingMode"]
    label = args.label or (
        (f"pd-{deployed['kvBackend']}" if mode == "pd" else mode) + profile_suffix(deployed)
    )
    now = app.runtime.now()
    stamp = now.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.-]+", "-", label).strip("-.") or "run"
    out: Path = args.out or Path("bench-results") / f"{safe}-{stamp}"
    tokenizer = args.tokenizer or str(deployed["modelSource"])
    sweep = bench_job.Sweep(
        base_url=f"http://{config.ray_service_name}-serve-svc.{config.namespace}:8000",
        model=str(deployed["modelId"]),
        tokenizer=tokenizer,
        tokenizer_revision=tokenizer_revision(args, deployed),
        concurrency=levels,
        prompts=bench_job.prompts_per_level(levels, args.prompts),
        input_len=args.input_len,
        output_len=args.output_len,
        seed=args.seed,
        label=label,
    )
    name = bench_job.job_name(config.ray_service_name, stamp.replace("-", ""))
    manifest = bench_job.render_job(
        sweep,
        name=name,
        namespace=config.namespace,
        image=image,
        deadline_seconds=args.timeout_minutes * 60,
    )
    spec = gpu_spec(node_type)
    meta: dict[str, Any] = {
        "label": label,
        "created": now.astimezone(UTC).isoformat(timespec="seconds"),
        "job": name,
        "config": {
            **deployed,
            "gpuNodeType": node_type,
            "gpuModel": spec.gpu_model if spec else None,
            "gpusPerNode": spec.gpus if spec else None,
            "gpuNodeCount": node_count,
            "gpuWarmSpareNodes": spare_count,
            "gpuCount": node_count * spec.gpus if spec else None,
            "gpuPricePerHourUsd": price.usd_per_hour,
            "priceSource": price.source,
            "region": app.aws.region,
            "cluster": config.cluster_name,
            "namespace": config.namespace,
            "rayService": config.ray_service_name,
            "image": image,
            "inputLen": args.input_len,
            "outputLen": args.output_len,
            "seed": args.seed,
            "tokenizer": sweep.tokenizer,
            "tokenizerRevision": sweep.tokenizer_revision,
            "concurrency": list(levels),
            "promptsPerLevel": list(sweep.prompts),
        },
        "failed_levels": [],
    }
    app.print(
        f"Benchmark '{label}' of {deployed['modelId']} ({mode}) on {node_count} x {node_type}: "
        f"concurrency {','.join(map(str, levels))}, {args.input_len} tokens in / "
        f"{args.output_len} out, prompts per level {','.join(map(str, sweep.prompts))}"
    )
    if spare_count:
        app.print(
            f"  {spare_count} warm spare GPU node(s) (gpuWarmSpareNodes) run no engine: left out "
            "of the cost per token"
        )
    with cluster.errors():
        cluster.client.post_json(f"/apis/batch/v1/namespaces/{config.namespace}/jobs", manifest)
    app.print(f"  Job {config.namespace}/{name} created (image {image})")
    watch = _Watch(cluster, name)
    try:
        outcome = _wait(app, watch, args.timeout_minutes * 60 + 300)
        watch.refresh()  # the whole log, after the last level
    finally:
        _delete(app, cluster, name)
    return _finish(app, watch, outcome, meta, out)


def _wait(app: App, watch: _Watch, limit_seconds: float) -> tuple[str, str]:
    runtime = app.runtime
    started = runtime.clock()
    shown = 0
    while True:
        job = watch.job()
        watch.refresh()
        view = bench_job.read_log(watch.log)
        for line in view.progress[shown:]:
            app.print(f"  [{duration(runtime.clock() - started):>6}] {line}")
        shown = len(view.progress)
        outcome = job_outcome(job)
        if outcome:
            return outcome
        stuck = pod_failure(watch.pod, runtime.now())
        if watch.pod is None and runtime.clock() - started >= NO_POD_GRACE_SECONDS:
            why = watch.failed_create()
            stuck = f"the Job controller cannot create its pod: {why}" if why else None
        if stuck:
            raise CheckFailed(f"the benchmark Job cannot run: {stuck}")
        if runtime.clock() - started > limit_seconds:
            raise CheckFailed(
                f"the benchmark Job did not finish within {duration(limit_seconds)}; "
                f"last progress: {view.progress[-1] if view.progress else 'none'}"
            )
        runtime.sleep(app.args.poll_interval)


def _delete(app: App, cluster: Cluster, name: str) -> None:
    path = f"/apis/batch/v1/namespaces/{cluster.namespace}/jobs/{name}"
    kube = cluster.kube
    try:
        cluster.client.delete(path, {"propagationPolicy": "Background"})
        app.print(f"  Job {name} deleted")
    except kube.KubeApiError as err:
        if err.status != 404:
            app.warn(
                f"could not delete Job {name} ({err}); it removes itself an hour after it "
                f"ends, or run `kubectl delete job -n {cluster.namespace} {name}`"
            )


def _finish(
    app: App, watch: _Watch, outcome: tuple[str, str], meta: dict[str, Any], out: Path
) -> int:
    view = bench_job.read_log(watch.log)
    status, why = outcome
    meta["failed_levels"] = [
        {"concurrency": c, "error": f"vllm bench serve wrote no result: {tail}"}
        for c, tail in sorted(view.failed_levels.items())
    ]
    if not view.results and not meta["failed_levels"]:
        raise CheckFailed(
            f"the benchmark Job ended {status} with no results{': ' + why if why else ''}"
            f"{pod_ending(watch.pod)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    for filename, text in view.results.items():
        (out / filename).write_text(text, encoding="utf-8")  # vLLM's file, unchanged
    (out / results.META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    summary = results.collect([out])
    render_outputs(summary, out)
    app.print(*summary_lines(summary))
    app.print("", f"Results in {out}/ (report.md, results.json, plots, raw vLLM files)")
    if status == "Failed":
        app.warn(f"the benchmark Job failed ({why}){pod_ending(watch.pod)}")
    failed = [r for r in summary["runs"] if r["status"] == "failed"]
    for run in failed:
        app.warn(f"level concurrency={run['concurrency']} FAILED: {run.get('error')}")
    return EXIT_CHECK_FAILED if failed or status == "Failed" else EXIT_OK
