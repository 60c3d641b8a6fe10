"""``coldstart``: a GPU node's measured steps from its status timestamps, beside the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import lambda_code, timeline
from ray_pd_eks.cli import coldstart
from ray_pd_eks.cli.errors import CheckFailed
from tests.cli_fixtures import REGION, Harness, cli_harness, stub_cluster, write_cdk_json
from tests.fakes.kube_api import (
    CONTROLLER_LOG,
    DECODE_DEPLOYMENT,
    GPU_NODE_A,
    GPU_NODE_B,
    PREFILL_DEPLOYMENT,
    RAY_HEAD_ID,
    RAY_NODE_A,
    WARMUP_NAMESPACE,
    WORKER_IP_A,
    WORKER_IP_B,
    FakeKubeApi,
    make_node,
    make_pd_serve_applications,
    make_rayservice,
)
from tests.synth import Synthesized

pytest_plugins = ["tests.fakes.fixtures"]

T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
INSTANCE_A = "i-0123456789abcdef0"
INSTANCE_B = "i-0fedcba9876543210"


def at(minutes: float) -> str:
    """An API timestamp ``minutes`` after T0 (whole seconds, as the API server writes them)."""
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_node(
    name: str = GPU_NODE_A,
    *,
    registered: float = 1.5,
    ready: float | None = 2.5,
    instance: str | None = INSTANCE_A,
) -> dict[str, Any]:
    node = make_node(name)
    node["metadata"]["creationTimestamp"] = at(registered)
    if instance:
        node.setdefault("spec", {})["providerID"] = f"aws:///us-west-2b/{instance}"
    conditions = [c for c in node["status"].get("conditions", []) if c["type"] != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready is not None else "False",
            "lastTransitionTime": at(ready if ready is not None else registered),
        }
    )
    node["status"]["conditions"] = conditions
    return node


def container(
    name: str,
    *,
    started: float | None,
    finished: float | None = None,
    exit_code: int = 0,
    restarts: int = 0,
) -> dict[str, Any]:
    if started is None:
        state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
    elif finished is None:
        state = {"running": {"startedAt": at(started)}}
    else:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": at(started),
                "finishedAt": at(finished),
            }
        }
    return {"name": name, "restartCount": restarts, "state": state}


def pod(
    name: str,
    *,
    node: str,
    labels: dict[str, str],
    namespace: str,
    sandbox: float | None = None,
    start: float | None = None,
    containers: list[dict[str, Any]] | None = None,
    inits: list[dict[str, Any]] | None = None,
    created: float = 0.0,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "conditions": []}
    if sandbox is not None:
        status["conditions"].append(
            {
                "type": "PodReadyToStartContainers",
                "status": "True",
                "lastTransitionTime": at(sandbox),
            }
        )
    if start is not None:
        status["startTime"] = at(start)
    status["containerStatuses"] = containers or []
    if inits is not None:
        status["initContainerStatuses"] = inits
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "creationTimestamp": at(created),
        },
        "spec": {"nodeName": node},
        "status": status,
    }


def prepull(
    node: str = GPU_NODE_A,
    *,
    sandbox: float | None = 2.6,
    pulled: float | None = 4.0,
    restarts: int = 0,
    start: float | None = None,
) -> dict[str, Any]:
    return pod(
        f"image-prepull-{node[:8]}",
        node=node,
        labels={"app.kubernetes.io/name": "image-prepull"},
        namespace=WARMUP_NAMESPACE,
        sandbox=sandbox,
        start=start,
        containers=[container("hold-image", started=pulled, restarts=restarts)],
    )


def prefetch(node: str = GPU_NODE_A, *, download: dict[str, Any] | None = None) -> dict[str, Any]:
    fetch = download or container("prefetch-model", started=2.9, finished=3.9)
    return pod(
        f"model-prefetch-{node[:8]}",
        node=node,
        labels={"app.kubernetes.io/name": "model-prefetch"},
        namespace=WARMUP_NAMESPACE,
        inits=[fetch],
        containers=[container("done", started=3.95)],
    )


def worker(
    node: str = GPU_NODE_A, *, started: float | None = 4.1, ip: str | None = WORKER_IP_A
) -> dict[str, Any]:
    found = pod(
        f"ray-worker-{node[:8]}",
        node=node,
        labels={"ray.io/node-type": "worker"},
        namespace="inference",
        containers=[container("ray-worker", started=started)],
    )
    if ip:
        found["status"]["podIP"] = ip
    return found


def pulled_event(pod_name: str, message: str) -> dict[str, Any]:
    return {
        "reason": "Pulled",
        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": WARMUP_NAMESPACE},
        "message": message,
    }


def steps(found: coldstart.NodeColdStart) -> dict[str, coldstart.Step]:
    return {s.name.split(" (")[0]: s for s in found.steps}


def minutes(value: datetime | None) -> float | None:
    return None if value is None else round((value - T0).total_seconds() / 60, 2)


# -- the measurement -----------------------------------------------------------------------------


def test_a_scaled_out_node_is_measured_from_its_launch() -> None:
    found = coldstart.measure(
        gpu_node(), T0, "EC2 LaunchTime", [prepull(), prefetch()], [worker()], []
    )
    by = steps(found)
    assert found.instance_id == INSTANCE_A and found.instance_type == "g6.8xlarge"
    assert minutes(by["joined"].end) == 2.5
    assert (minutes(by["Ray image pulled"].start), minutes(by["Ray image pulled"].end)) == (
        2.6,
        4.0,
    )
    weights = by["weights downloaded"]
    assert weights.name == "weights downloaded (model-prefetch: prefetch-model)"
    assert (minutes(weights.start), minutes(weights.end)) == (2.9, 3.9)
    assert minutes(by["Ray worker container started"].end) == 4.1
    assert all(s.note == "" for s in found.steps[:4])
    # Without Serve's view the engine's two steps say so rather than guess.
    assert [(s.name, s.end, s.note) for s in found.steps[4:]] == [
        (coldstart.ENGINE_STEP, None, "Serve not read"),
        (coldstart.SERVING_STEP, None, ""),
    ]


def test_without_the_launch_time_the_registration_stands_in() -> None:
    found = coldstart.measure(
        gpu_node(registered=1.5), None, "the node's registration (x)", [], [], []
    )
    assert found.launch == T0 + timedelta(minutes=1.5)
    assert found.launch_source == "the node's registration (x)"


def test_a_node_without_a_registration_time_is_an_error() -> None:
    node = gpu_node()
    del node["metadata"]["creationTimestamp"]
    with pytest.raises(CheckFailed, match="has no creationTimestamp"):
        coldstart.measure(node, None, "x", [], [], [])


def test_a_node_not_ready_has_no_join_time() -> None:
    step = coldstart.joined_step(gpu_node(ready=None))
    assert (step.end, step.note) == (None, "not Ready")


def test_pods_of_other_nodes_are_not_counted() -> None:
    found = coldstart.measure(
        gpu_node(),
        T0,
        "EC2",
        [prepull(GPU_NODE_B), prefetch(GPU_NODE_B)],
        [worker(GPU_NODE_B, ip=WORKER_IP_B)],
        [],
        view(replicas=(replica(ip=WORKER_IP_B),)),
    )
    assert [s.note for s in found.steps] == [
        "",
        "no image-prepull pod on the node",
        "no model-prefetch pod on the node",
        "no Ray worker pod on the node",
        "no Ray worker pod on the node",
        "",
    ]


def test_the_newest_pod_on_the_node_counts() -> None:
    old, new = prepull(pulled=4.0), prepull(pulled=9.0)
    old["metadata"]["creationTimestamp"], new["metadata"]["creationTimestamp"] = at(1), at(8)
    step = coldstart.image_step(
        coldstart._on_node([new, old], GPU_NODE_A, "app.kubernetes.io/name", "image-prepull")
    )
    assert minutes(step.end) == 9.0


@pytest.mark.parametrize(
    ("kwargs", "start", "end", "note"),
    [
        ({}, 2.6, 4.0, ""),
        ({"pulled": None}, 2.6, None, "pulling"),
        ({"restarts": 1}, 2.6, None, "restarted since: its first start is not kept"),
        (
            {"sandbox": None, "start": 2.55},
            2.55,
            4.0,
            "from the pod's start (no sandbox condition)",
        ),
    ],
)
def test_the_image_pull_runs_from_the_sandbox_to_the_container_start(
    kwargs: dict[str, Any], start: float, end: float | None, note: str
) -> None:
    step = coldstart.image_step(prepull(**kwargs))
    assert (minutes(step.start), minutes(step.end), step.note) == (start, end, note)


def test_an_exited_pre_pull_container_still_gives_its_start() -> None:
    p = prepull()
    p["status"]["containerStatuses"] = [container("hold-image", started=4.0, finished=50)]
    assert minutes(coldstart.image_step(p).end) == 4.0


@pytest.mark.parametrize(
    ("download", "name", "start", "end", "note"),
    [
        (
            container("stage-model", started=3.2, finished=3.95),
            "weights downloaded (model-prefetch: stage-model)",
            3.2,
            3.95,
            "",
        ),
        (
            container("prefetch-model", started=3.0, finished=4.5, restarts=2),
            "weights downloaded (model-prefetch: prefetch-model)",
            3.0,
            4.5,
            "last of its tries",
        ),
        (
            container("prefetch-model", started=3.0),
            "weights downloaded (model-prefetch)",
            3.0,
            None,
            "downloading",
        ),
        (
            container("prefetch-model", started=3.0, finished=3.5, exit_code=1),
            "weights downloaded (model-prefetch)",
            None,
            None,
            "prefetch-model failed",
        ),
        (
            container("prefetch-model", started=None),
            "weights downloaded (model-prefetch)",
            None,
            None,
            "waiting to start",
        ),
        (
            container("hf-token", started=2.8, finished=2.85),
            "weights downloaded (model-prefetch)",
            None,
            None,
            "no download container",
        ),
    ],
)
def test_the_weights_are_the_download_containers_run(
    download: dict[str, Any], name: str, start: float | None, end: float | None, note: str
) -> None:
    step = coldstart.weights_step(prefetch(download=download))
    assert (step.name, minutes(step.start), minutes(step.end), step.note) == (
        name,
        start,
        end,
        note,
    )


@pytest.mark.parametrize(
    ("kwargs", "end", "note"),
    [({}, 4.1, ""), ({"started": None}, None, "not started")],
)
def test_the_worker_start(kwargs: dict[str, Any], end: float | None, note: str) -> None:
    step = coldstart.worker_step(worker(**kwargs))
    assert (minutes(step.end), step.note) == (end, note)


def test_a_restarted_worker_has_no_first_start() -> None:
    w = worker()
    w["status"]["containerStatuses"][0]["restartCount"] = 1
    assert coldstart.worker_step(w).note == "restarted since"


# -- the kubelet's own pull figure ---------------------------------------------------------------


KUBELET_PULLED = (
    'Successfully pulled image "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray@sha256:ab" in '
    "1m23.5s (1m31s including waiting). Image size: 19876543210 bytes."
)


def test_the_kubelets_pull_figure_is_read_from_its_event() -> None:
    p = prepull()
    events = [
        pulled_event("other", KUBELET_PULLED.replace("1m23.5s", "9s")),
        pulled_event(p["metadata"]["name"], KUBELET_PULLED),
    ]
    assert coldstart.pulled_figure(events, p) == (
        "the kubelet pulled the Ray image in 1.4 min (1.5 min with its wait in the pull queue); "
        "image size 19.9 GB"
    )


def test_a_pull_figure_without_wait_or_size() -> None:
    p = prepull()
    message = 'Successfully pulled image "x" in 850ms'
    assert coldstart.pulled_figure([pulled_event(p["metadata"]["name"], message)], p) == (
        "the kubelet pulled the Ray image in 0.0 min"
    )


def test_no_pull_figure_without_its_event_or_pod() -> None:
    p = prepull()
    already = 'Container image "x" already present on machine'
    assert coldstart.pulled_figure([pulled_event(p["metadata"]["name"], already)], p) is None
    assert coldstart.pulled_figure([pulled_event("x", KUBELET_PULLED)], {}) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m32.5s", 92.5), ("850ms", 0.85), ("1h2m3s", 3723.0), ("12µs", 12e-6), ("2s", 2.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert coldstart.go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "1m32", "s", "1m 2s"])
def test_what_is_no_go_duration(text: str) -> None:
    assert coldstart.go_duration_seconds(text) is None


@pytest.mark.parametrize(
    ("provider", "found"),
    [
        ("aws:///us-west-2b/i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("kwok://node-1", None),
        ("aws:///us-west-2b/", None),
        ("", None),
    ],
)
def test_instance_id_from_the_provider_id(provider: str, found: str | None) -> None:
    assert coldstart.instance_id({"spec": {"providerID": provider}}) == found


@pytest.mark.parametrize(
    ("value", "found"),
    [("2026-12-02T10:00:00Z", T0), ("", None), (None, None), ("yesterday", None)],
)
def test_api_timestamps(value: Any, found: datetime | None) -> None:
    assert coldstart.parse_time(value) == found


# -- the model beside it --------------------------------------------------------------------------


def test_the_modelled_steps_are_the_scale_out_model_of_the_settings() -> None:
    model = timeline.scale_out_model(
        fast_pull=True, disk_mbps=timeline.NVME_MBPS, weights_in_s3=False
    )
    assert [(name, round(s, 2), round(e, 2)) for name, s, e in model.steps] == [
        ("node launches, boots and joins", 0.0, 3.0),
        ("pull Ray image (SOCI parallel pull)", 3.0, 4.56),
        ("download weights from Hugging Face", 3.4, 4.4),
        ("EFA and NVIDIA device plugins", 3.0, 3.3),
        ("vLLM engine loads the weights and starts", 4.56, 6.56),
        ("replica serves", 6.56, 7.06),
    ]
    assert model.spare_steps == ()


def test_a_spare_adds_its_own_steps() -> None:
    model = timeline.scale_out_model(
        fast_pull=True, disk_mbps=timeline.NVME_MBPS, weights_in_s3=False, warm_spares=True
    )
    assert model.spare_minutes == pytest.approx(2.7)


def test_the_cli_models_the_scale_out_as_the_templates_do(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    """The command reads the model's inputs from the settings, the deploy timeline from the
    templates: both give the same steps for the default app and for the variant (root volume,
    weights from S3, a warm spare)."""
    for app in (default_app, variant_app):
        from_templates = timeline.scale_out(timeline.Deploy.from_assembly(app.outdir))
        assert coldstart.scale_out_of(app.config) == from_templates
    assert variant_app.config.model_s3_uri and not variant_app.config.uses_local_nvme


# -- the command ----------------------------------------------------------------------------------


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    kube_api.nodes = [gpu_node()]
    kube_api.warmup_daemonsets = []
    kube_api.warmup_pods = [prepull(), prefetch()]
    kube_api.pods = [worker()]
    return cli_harness(kube_api, tmp_path)


def stub_launch(h: Harness, times: dict[str, datetime]) -> None:
    h.session.stub("ec2").add_response(
        "describe_instances",
        {
            "Reservations": [
                {"Instances": [{"InstanceId": i, "LaunchTime": t} for i, t in times.items()]}
            ]
        },
        {"InstanceIds": list(times)},
    )


def cells(out: str, first: str) -> list[str]:
    for line in out.splitlines():
        if line.strip().startswith(first):
            return [c.strip() for c in line.strip()[len(first) :].split("  ") if c.strip()]
    raise AssertionError(f"no line {first!r} in:\n{out}")


def test_the_command_prints_each_step_with_the_models(cli: Harness) -> None:
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    assert (
        f"GPU node {GPU_NODE_A} (g6.8xlarge, {INSTANCE_A}), launched 2026-12-02 10:00:00 UTC "
        "(from EC2 LaunchTime)" in run.out
    )
    assert cells(run.out, "joined (Ready)") == ["0.0", "2.5", "2.5", "0.0-3.0"]
    assert cells(run.out, "Ray image pulled (image-prepull)") == ["2.6", "4.0", "1.4", "3.0-4.6"]
    assert cells(run.out, "weights downloaded (model-prefetch: prefetch-model)") == [
        "2.9",
        "3.9",
        "1.0",
        "3.4-4.4",
    ]
    assert cells(run.out, "Ray worker container started") == ["4.1", "4.1", "-", "4.6"]
    assert "\n  in the model a new node serves after 7.1 min\n" in run.out  # not served: no figure


def test_the_model_follows_the_settings(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    kube_api.nodes = [gpu_node()]
    kube_api.warmup_daemonsets = []  # an empty warm-up namespace lists no pods
    h = cli_harness(kube_api, tmp_path)
    h.cdk_json = write_cdk_json(tmp_path, region=REGION, modelS3Uri="s3://models/qwen/")
    stub_launch(h, {INSTANCE_A: T0})
    run = h.run("coldstart")
    assert run.code == 0, run.err
    assert cells(run.out, "weights downloaded (model-prefetch)")[-2:] == [
        "3.2-4.0",
        "no model-prefetch pod on the node",
    ]


def test_ec2_refused_falls_back_to_the_registration(cli: Harness) -> None:
    cli.session.stub("ec2").add_client_error(
        "describe_instances", "UnauthorizedOperation", "not authorized"
    )
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    assert "launched 2026-12-02 10:01:30 UTC (from the node's registration " in run.out
    assert "(ec2:DescribeInstances: UnauthorizedOperation))" in run.out
    # 2.5 - 1.5: the minutes count from the registration.
    assert cells(run.out, "joined (Ready)")[:2] == ["0.0", "1.0"]


def test_an_instance_ec2_does_not_list_falls_back(cli: Harness, kube_api: FakeKubeApi) -> None:
    kube_api.nodes = [gpu_node(), gpu_node(GPU_NODE_B, instance=INSTANCE_B, registered=0.5)]
    # One call for both instances (oldest node first); EC2 lists only one of them.
    cli.session.stub("ec2").add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [{"InstanceId": INSTANCE_A, "LaunchTime": T0}]}]},
        {"InstanceIds": [INSTANCE_B, INSTANCE_A]},
    )
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    assert f"{GPU_NODE_B} (g6.8xlarge, {INSTANCE_B}), launched 2026-12-02 10:00:30 UTC" in run.out
    assert "(from the node's registration (EC2 did not list the instance))" in run.out
    # Oldest node first.
    assert run.out.index(GPU_NODE_B) < run.out.index(f"GPU node {GPU_NODE_A}")


def test_the_node_option_picks_one(cli: Harness, kube_api: FakeKubeApi) -> None:
    kube_api.nodes = [gpu_node(), gpu_node(GPU_NODE_B, instance=INSTANCE_B)]
    stub_launch(cli, {INSTANCE_B: T0})
    run = cli.run("coldstart", "--node", GPU_NODE_B)
    assert run.code == 0, run.err
    assert GPU_NODE_B in run.out and GPU_NODE_A not in run.out


def test_an_unknown_node_exits_1(cli: Harness) -> None:
    run = cli.run("coldstart", "--node", "ip-10-0-9-9")
    assert run.code == 1
    assert "no GPU node (role=gpu-worker) named ip-10-0-9-9" in run.err


def test_no_gpu_node_exits_1(cli: Harness, kube_api: FakeKubeApi) -> None:
    kube_api.nodes = []
    run = cli.run("coldstart")
    assert run.code == 1
    assert "no GPU node (role=gpu-worker) in the cluster" in run.err


def test_a_node_without_an_instance_id_asks_ec2_nothing(
    cli: Harness, kube_api: FakeKubeApi
) -> None:
    kube_api.nodes = [gpu_node(instance=None)]
    run = cli.run("coldstart")  # an unexpected EC2 call would fail the stub
    assert run.code == 0, run.err
    assert "(from the node's registration (no EC2 instance id in its providerID))" in run.out


# -- what the mutation run showed untested ---------------------------------------------------------


def test_a_node_not_ready_keeps_the_steps_name() -> None:
    assert coldstart.joined_step(gpu_node(ready=None)).name == "joined (Ready)"


def test_the_events_k8s_io_shape_is_read_too() -> None:
    p = prepull()
    event = {
        "reason": "Pulled",
        "regarding": {"name": p["metadata"]["name"]},
        "note": KUBELET_PULLED,
    }
    assert coldstart.pulled_figure([event], p) is not None


def test_later_events_of_other_pods_or_reasons_do_not_hide_the_pull() -> None:
    p = prepull()
    name = p["metadata"]["name"]
    message = (
        'Successfully pulled image "x" in 12m0s (12m30s including waiting). '
        "Image size: 1050000000 bytes."
    )
    events = [
        pulled_event(name, message),
        pulled_event(name, 'Container image "x" already present on machine'),
        {**pulled_event(name, message.replace("12m0s", "1s")), "reason": "Started"},
        pulled_event("another-pod", message.replace("12m0s", "2s")),
    ]
    assert coldstart.pulled_figure(events, p) == (
        "the kubelet pulled the Ray image in 12.0 min (12.5 min with its wait in the pull "
        "queue); image size 1.1 GB"
    )


def test_a_pull_figure_with_an_unreadable_duration_is_skipped() -> None:
    p = prepull()
    bad = pulled_event(p["metadata"]["name"], 'Successfully pulled image "x" in 3.s')
    assert coldstart.pulled_figure([bad], p) is None


class _Ec2:
    def __init__(
        self, pages: list[dict[str, Any]] | None = None, error: Exception | None = None
    ) -> None:
        self.pages, self.error = pages or [], error

    def client(self, service: str) -> Any:
        assert service == "ec2"
        return self

    def get_paginator(self, name: str) -> Any:
        assert name == "describe_instances"
        return self

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        if self.error:
            raise self.error
        return self.pages


def _app(ec2: _Ec2) -> Any:
    return type("FakeApp", (), {"aws": ec2})()


def test_launch_times_read_every_page_and_skip_what_has_no_time() -> None:
    pages: list[dict[str, Any]] = [
        {"Reservations": [{"Instances": [{"InstanceId": INSTANCE_A, "LaunchTime": T0}]}]},
        {},
        {"Reservations": [{}, {"Instances": [{"InstanceId": INSTANCE_B}]}]},
    ]
    times, source = coldstart.launch_times(_app(_Ec2(pages)), [INSTANCE_A, INSTANCE_B])
    assert (times, source) == ({INSTANCE_A: T0}, "EC2 LaunchTime")


def test_launch_times_name_a_refusal_without_a_code() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    refused = ClientError({}, "DescribeInstances")
    assert coldstart.launch_times(_app(_Ec2(error=refused)), [INSTANCE_A]) == (
        {},
        "the node's registration (ec2:DescribeInstances: error)",
    )
    offline = EndpointConnectionError(endpoint_url="https://ec2")
    times, source = coldstart.launch_times(_app(_Ec2(error=offline)), [INSTANCE_A])
    assert times == {} and source.startswith("the node's registration (ec2:DescribeInstances: ")
    assert "https://ec2" in source


def test_the_model_writes_the_unpacked_image_at_the_disks_rate() -> None:
    # On a gp3 baseline root volume the write, not the download, sets the pull: 2 x 20 GB at
    # 125 MB/s.
    model = timeline.scale_out_model(fast_pull=True, disk_mbps=125.0, weights_in_s3=True)
    steps = {name: (start, end) for name, start, end in model.steps}
    assert steps["pull Ray image (SOCI parallel pull)"] == pytest.approx(
        (3.0, 3.0 + 20 * 2 * 1000 / 125 / 60), abs=1e-9
    )
    assert steps["download weights from S3"] == pytest.approx(
        (3.2, 3.2 + 18 * 1000 / 400 / 60), abs=1e-9
    )
    slow = timeline.scale_out_model(fast_pull=False, disk_mbps=2000.0, weights_in_s3=False)
    slow_steps = {name: (start, end) for name, start, end in slow.steps}
    assert slow_steps["pull Ray image (containerd's default pull)"] == pytest.approx(
        (3.0, 3.0 + 20 * 1000 / 100 / 60), abs=1e-9
    )
    assert slow_steps["download weights from Hugging Face"] == pytest.approx(
        (3.4, 3.4 + 18 * 1000 / 300 / 60), abs=1e-9
    )


def test_a_sandbox_not_ready_falls_back_to_the_pods_start() -> None:
    p = prepull(start=2.55)
    p["status"]["conditions"][0]["status"] = "False"
    step = coldstart.image_step(p)
    assert (minutes(step.start), step.note) == (2.55, "from the pod's start (no sandbox condition)")


def test_a_worker_not_started_keeps_the_steps_name() -> None:
    assert coldstart.worker_step(worker(started=None)).name == "Ray worker container started"


def test_the_spares_steps() -> None:
    model = timeline.scale_out_model(
        fast_pull=True, disk_mbps=timeline.NVME_MBPS, weights_in_s3=False, warm_spares=True
    )
    assert [(n, round(s, 2), round(e, 2)) for n, s, e in model.spare_steps] == [
        ("worker pod preempts the placeholder and starts", 0.0, 0.2),
        ("vLLM engine loads the weights and starts", 0.2, 2.2),
        ("replica serves", 2.2, 2.7),
    ]


# -- the engine and Serve, from Serve's logs ------------------------------------------------------


def serve_at(minutes: float) -> str:
    """A Serve log time ``minutes`` after T0, as Ray's text format writes it (logging's default
    ``%Y-%m-%d %H:%M:%S,mmm``), in UTC (the Ray pods' TZ)."""
    when = T0 + timedelta(minutes=minutes)
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d}"


def replica_line(minutes: float, message: str, replica: str = "abcd1234") -> str:
    # ServeFormatter: "%(levelname)s %(asctime)s {component} {component id} -- %(message)s".
    return f"INFO {serve_at(minutes)} {DECODE_DEPLOYMENT} {replica} -- {message}"


def controller_line(minutes: float, replica: str, *, init: float | None = 95.1) -> str:
    # deployment_state.py's line when a replica turns RUNNING (Ray 2.58, word for word).
    text = (
        f"INFO {serve_at(minutes)} controller 521 -- Replica(id='{replica}', "
        f"deployment='{DECODE_DEPLOYMENT}', app='qwen') started successfully on node "
        f"'{RAY_NODE_A}' after 380.2s (PID: 4242)."
    )
    if init is not None:
        text += (
            f" Replica constructor, reconfigure method, and initial health check took {init:.1f}s."
        )
    return text


REPLICA_LOG = "\n".join(
    [
        replica_line(4.7, coldstart.ENGINE_STARTED),
        "INFO 12-02 10:04:50 [loader.py:456] Loading weights took 9.87 seconds",  # vLLM's own
        "Traceback (most recent call last):",
        replica_line(6.2, coldstart.ENGINE_DONE),
        replica_line(6.3, "GET /health 200 1.2ms"),
    ]
)


def replica(
    replica_id: str = "abcd1234",
    *,
    ip: str = WORKER_IP_A,
    state: str = "RUNNING",
    deployment: str = DECODE_DEPLOYMENT,
) -> Any:
    from ray_pd_eks import lambda_code

    return lambda_code.placement().ServeReplica(
        deployment=deployment,
        role="decode",
        state=state,
        node_id=RAY_NODE_A,
        node_ip=ip,
        actor_name="",
        worker_id="",
        pid=4242,
        log_file_path=f"/serve/replica_qwen_{replica_id}.log",
        replica_id=replica_id,
    )


def view(**kwargs: Any) -> coldstart.ServeView:
    defaults: dict[str, Any] = {
        "replicas": (replica(),),
        "logs": {"abcd1234": REPLICA_LOG},
        "controller": coldstart.serve_lines(controller_line(6.5, "abcd1234")),
    }
    return coldstart.ServeView(**{**defaults, **kwargs})


def test_serve_lines_read_rays_text_format_in_utc_and_skip_the_rest() -> None:
    lines = coldstart.serve_lines(REPLICA_LOG)
    assert [(minutes(line.at), line.message) for line in lines] == [
        (4.7, "Started initializing replica."),
        (6.2, "Finished initializing replica."),
        (6.3, "GET /health 200 1.2ms"),
    ]
    assert all(line.at.tzinfo is UTC for line in lines)
    (line,) = coldstart.serve_lines("WARNING 2026-12-02 10:00:01,250 controller 1 -- late ")
    assert (line.at, line.message) == (T0 + timedelta(seconds=1.25), "late")


def test_the_engine_is_bracketed_by_the_replicas_two_lines() -> None:
    start, end = coldstart.engine_times(REPLICA_LOG)
    assert (minutes(start), minutes(end)) == (4.7, 6.2)


@pytest.mark.parametrize(
    ("lines", "found"),
    [
        ([(4.7, coldstart.ENGINE_STARTED)], (4.7, None)),  # still starting
        ([(4.6, coldstart.ENGINE_DONE)], (None, None)),  # no start line: no time
        # A "finished" before the start belongs to nothing; the first start counts.
        (
            [
                (4.6, coldstart.ENGINE_DONE),
                (4.7, coldstart.ENGINE_STARTED),
                (4.8, coldstart.ENGINE_STARTED),
                (6.0, coldstart.ENGINE_DONE),
                (6.1, coldstart.ENGINE_DONE),
            ],
            (4.7, 6.0),
        ),
        ([], (None, None)),
    ],
)
def test_engine_times_branches(
    lines: list[tuple[float, str]], found: tuple[float | None, float | None]
) -> None:
    start, end = coldstart.engine_times("\n".join(replica_line(m, text) for m, text in lines))
    assert (minutes(start), minutes(end)) == found


def test_the_controller_line_of_the_replica_counts() -> None:
    lines = coldstart.serve_lines(
        "\n".join(
            [
                f"INFO {serve_at(5.0)} controller 521 -- Starting Replica(id='abcd1234', "
                f"deployment='{DECODE_DEPLOYMENT}', app='qwen').",
                controller_line(6.4, "other999"),
                controller_line(6.5, "abcd1234", init=None),  # without the latency sentence
                controller_line(9.0, "abcd1234"),  # a later recovery: the first one counts
            ]
        )
    )
    assert minutes(coldstart.running_at(lines, "abcd1234")) == 6.5
    assert coldstart.running_at(lines, "abcd123") is None  # ids match whole
    assert coldstart.running_at(lines, "missing") is None


def test_serve_steps_time_the_engine_and_the_first_running() -> None:
    engine, serving = coldstart.serve_steps(view(), worker())
    assert (engine.name, minutes(engine.start), minutes(engine.end)) == (
        coldstart.ENGINE_STEP,
        4.7,
        6.2,
    )
    assert engine.note == DECODE_DEPLOYMENT
    assert (serving.name, minutes(serving.start), minutes(serving.end), serving.note) == (
        coldstart.SERVING_STEP,
        6.2,
        6.5,
        "",
    )


@pytest.mark.parametrize(
    ("serve", "pod", "engine_note", "serving_note"),
    [
        (
            coldstart.ServeView(reason="Serve unreadable: 503"),
            worker(),
            "Serve unreadable: 503",
            "",
        ),
        (coldstart.ServeView(), {}, "no Ray worker pod on the node", ""),
        (coldstart.ServeView(), worker(ip=None), "the worker pod has no IP yet", ""),
        (coldstart.ServeView(), worker(), "no engine replica on the worker pod (yet)", ""),
        (
            view(replicas=(replica(ip=WORKER_IP_B),)),
            worker(),
            "no engine replica on the worker pod (yet)",
            "",
        ),
        (
            view(logs={}, log_errors={"abcd1234": "its log unreadable (500)"}),
            worker(),
            f"{DECODE_DEPLOYMENT}: its log unreadable (500)",
            "",
        ),
        (view(logs={}), worker(), f"{DECODE_DEPLOYMENT}: its log was not read", ""),
        (
            view(logs={"abcd1234": replica_line(6.2, coldstart.ENGINE_DONE)}),
            worker(),
            f"{DECODE_DEPLOYMENT}: no start line in its log's head",
            "",
        ),
        (
            view(
                replicas=(replica(state="STARTING"),),
                logs={"abcd1234": replica_line(4.7, coldstart.ENGINE_STARTED)},
                controller=(),
            ),
            worker(),
            f"{DECODE_DEPLOYMENT}: starting",
            "replica STARTING",
        ),
        (
            view(replicas=(replica(state=""),), controller=()),
            worker(),
            DECODE_DEPLOYMENT,
            "replica in no known state",
        ),
        (
            view(controller=(), controller_error="the controller's log unreadable (500)"),
            worker(),
            DECODE_DEPLOYMENT,
            "the controller's log unreadable (500)",
        ),
        (
            view(controller=()),
            worker(),
            DECODE_DEPLOYMENT,
            "not in the controller's log lines read (--log-lines)",
        ),
    ],
)
def test_serve_steps_say_why_a_time_is_missing(
    serve: coldstart.ServeView, pod: dict[str, Any], engine_note: str, serving_note: str
) -> None:
    engine, serving = coldstart.serve_steps(serve, pod)
    assert (engine.name, serving.name) == (coldstart.ENGINE_STEP, coldstart.SERVING_STEP)
    assert (engine.note, serving.note) == (engine_note, serving_note)
    if serving_note:
        assert serving.end is None and serving.start is None


def test_of_two_replicas_on_the_node_the_first_to_finish_counts() -> None:
    late = "\n".join(
        [replica_line(4.8, coldstart.ENGINE_STARTED), replica_line(6.9, coldstart.ENGINE_DONE)]
    )
    starting = replica_line(4.5, coldstart.ENGINE_STARTED)
    serve = view(
        replicas=(
            replica("late0001", deployment=PREFILL_DEPLOYMENT),
            replica("start001"),
            replica("first001"),
        ),
        logs={"late0001": late, "start001": starting, "first001": REPLICA_LOG},
        controller=coldstart.serve_lines(controller_line(6.5, "first001")),
    )
    engine, serving = coldstart.serve_steps(serve, worker())
    assert (minutes(engine.start), minutes(engine.end), minutes(serving.end)) == (4.7, 6.2, 6.5)
    # None finished: the first to start; none started: the first listed.
    later = replica_line(4.8, coldstart.ENGINE_STARTED)
    pair = (replica("later001", deployment=PREFILL_DEPLOYMENT), replica("start001"))
    unread = replica("unread01")
    engine, _ = coldstart.serve_steps(
        view(replicas=(unread, *pair), logs={"later001": later, "start001": starting}), worker()
    )
    assert (minutes(engine.start), engine.end, engine.note) == (
        4.5,
        None,
        f"{DECODE_DEPLOYMENT}: starting",
    )
    engine, _ = coldstart.serve_steps(view(replicas=pair, logs={}), worker())
    assert engine.note == f"{PREFILL_DEPLOYMENT}: its log was not read"


def test_the_ray_pods_log_in_utc_as_the_command_reads_them() -> None:
    """Two-way: coldstart reads Serve's times as UTC; every Ray container of the rendered
    RayService (the head runs the controller, the workers the replicas) pins TZ=UTC."""
    from pd_constructs.serving.workload import LOG_CLOCK_ENV, render_rayservice
    from ray_pd_eks.config import DEFAULTS

    assert LOG_CLOCK_ENV == ({"name": "TZ", "value": "UTC"},)
    spec = render_rayservice(DEFAULTS, image="img:1")["spec"]["rayClusterConfig"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    ray_containers = [
        c
        for group in groups
        for c in group["template"]["spec"]["containers"]
        if c["name"] in ("ray-head", "ray-worker")
    ]
    assert len(ray_containers) == 2
    for c in ray_containers:
        assert {"name": "TZ", "value": "UTC"} in c["env"], c["name"]
    (line,) = coldstart.serve_lines(replica_line(0.0, "x"))
    assert line.at == T0


def serving_cluster(kube_api: FakeKubeApi, *, logs: bool = True) -> None:
    """The fake dashboard with Serve's replicas and, with ``logs``, the decode replica's log on
    node A and the controller's log on the head."""
    serve = make_pd_serve_applications(decode=(RAY_NODE_A, WORKER_IP_A), prefill=("d" * 56, "x"))
    kube_api.rayservice = make_rayservice()  # KubeRay's head Service exists with it
    kube_api.serve_applications = serve
    decode = serve["applications"]["qwen"]["deployments"][DECODE_DEPLOYMENT]["replicas"][0]
    if logs:
        kube_api.ray_logs[RAY_NODE_A] = {
            decode["log_file_path"].lstrip("/"): REPLICA_LOG.replace("abcd1234", "x")
        }
        kube_api.ray_logs[RAY_HEAD_ID] = {
            CONTROLLER_LOG.lstrip("/"): controller_line(6.5, decode["replica_id"])
        }


def test_the_command_times_the_engine_and_serve_from_their_logs(
    cli: Harness, kube_api: FakeKubeApi
) -> None:
    serving_cluster(kube_api)
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    assert cells(run.out, coldstart.ENGINE_STEP) == [
        "4.7",
        "6.2",
        "1.5",
        "4.6-6.6",
        DECODE_DEPLOYMENT,
    ]
    assert cells(run.out, coldstart.SERVING_STEP) == ["6.2", "6.5", "0.3", "6.6-7.1"]
    assert (
        "  this node served 6.5 min after its launch; in the model a new node serves after 7.1 min"
    ) in run.out
    assert "not timed" not in run.out


def test_the_controller_read_is_bounded_by_log_lines(cli: Harness, kube_api: FakeKubeApi) -> None:
    serving_cluster(kube_api)
    path = CONTROLLER_LOG.lstrip("/")
    kube_api.ray_logs[RAY_HEAD_ID][path] += "\n" + "\n".join(
        f"INFO {serve_at(7.0)} controller 521 -- autoscaling decision {i}" for i in range(5)
    )
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart", "--log-lines", "5")
    assert run.code == 0, run.err
    assert cells(run.out, coldstart.SERVING_STEP)[-1] == (
        "not in the controller's log lines read (--log-lines)"
    )
    (read,) = [r for r in kube_api.requests_to("api/v0/logs/file") if path in str(r.query)]
    assert read.query["lines"] == "5"
    stub_cluster(cli.session, kube_api.url, kube_api.ca_data)
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart", "--log-lines", "6")
    assert cells(run.out, coldstart.SERVING_STEP)[:2] == ["6.2", "6.5"]


def test_without_serve_the_kubernetes_steps_are_still_measured(
    cli: Harness, kube_api: FakeKubeApi
) -> None:
    stub_launch(cli, {INSTANCE_A: T0})  # serve_applications unset: the dashboard answers 503
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    engine = cells(run.out, coldstart.ENGINE_STEP)
    assert engine[:3] == ["-", "-", "-"] and engine[-1].startswith("Serve unreadable: ")
    assert cells(run.out, "Ray worker container started")[:2] == ["4.1", "4.1"]


def test_unreadable_logs_are_named(cli: Harness, kube_api: FakeKubeApi) -> None:
    serving_cluster(kube_api, logs=False)
    assert kube_api.serve_applications is not None
    kube_api.serve_applications["controller_info"].pop("log_file_path")
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart")
    assert run.code == 0, run.err
    engine = cells(run.out, coldstart.ENGINE_STEP)
    assert engine[:3] == ["-", "-", "-"]
    # Ray 2.58 answers a missing file with a 500 naming it (the fake does the same).
    assert engine[-1].startswith(f"{DECODE_DEPLOYMENT}: its log unreadable (")
    assert "A file is not found at: /tmp/ray/session_latest/logs/serve/replica_" in engine[-1]
    assert cells(run.out, coldstart.SERVING_STEP)[-1] == "the controller's log unnamed"


class _Dashboard:
    """The Ray dashboard's three reads ``read_serve`` makes, recorded; ``fail`` names what
    raises (``serve``, or a file name)."""

    def __init__(self, serve_json: dict[str, Any], files: dict[str, str], fail: set[str]) -> None:
        self.serve_json, self.files, self.fail = serve_json, files, fail
        self.heads: list[tuple[str, str, int, bool, bool]] = []
        self.tails: list[tuple[str, str, int]] = []

    def _error(self, what: str, reason: str) -> Exception:
        return lambda_code.kube().KubeApiError(f"GET {what} failed", status=500, reason=reason)

    def serve_applications(self) -> dict[str, Any]:
        if "serve" in self.fail:
            raise self._error("api/serve/applications/", "")
        return self.serve_json

    def read_log_head(
        self, node_id: str, filename: str, *, max_bytes: int, until: Any
    ) -> tuple[str, bool]:
        done = replica_line(6.2, coldstart.ENGINE_DONE)
        self.heads.append((node_id, filename, max_bytes, until(done), until(REPLICA_LOG[:80])))
        if filename in self.fail:
            raise self._error(filename, "boom" if "quiet" not in filename else "")
        return self.files[filename], True

    def read_log(self, node_id: str, filename: str, *, lines: int) -> str:
        self.tails.append((node_id, filename, lines))
        if filename in self.fail:
            raise self._error(filename, "boom")
        return self.files[filename]


class _Cluster:
    def __init__(self, dashboard: _Dashboard) -> None:
        self.kube = lambda_code.kube()
        self._dashboard = dashboard

    def dashboard(self) -> _Dashboard:
        return self._dashboard


def _replica_json(rid: str, deployment: str, ip: str, node: str = RAY_NODE_A) -> dict[str, Any]:
    return {
        "replica_id": rid,
        "state": "RUNNING",
        "node_id": node,
        "node_ip": ip,
        "log_file_path": f"/serve/replica_qwen_{rid}.log",
    }


def _serve_json(*replicas: tuple[str, dict[str, Any]], controller: bool = True) -> dict[str, Any]:
    deployments: dict[str, Any] = {}
    for deployment, rep in replicas:
        deployments.setdefault(deployment, {"name": deployment, "replicas": []})
        deployments[deployment]["replicas"].append(rep)
    info = {"node_id": RAY_HEAD_ID, "log_file_path": CONTROLLER_LOG} if controller else {}
    return {"controller_info": info, "applications": {"qwen": {"deployments": deployments}}}


def read(
    serve_json: dict[str, Any], files: dict[str, str], fail: set[str] | None = None
) -> tuple[coldstart.ServeView, _Dashboard]:
    from types import SimpleNamespace

    dashboard = _Dashboard(serve_json, files, fail or set())
    cluster: Any = _Cluster(dashboard)
    config: Any = SimpleNamespace(application_name="qwen")
    return coldstart.read_serve(cluster, config, {WORKER_IP_A}, 7), dashboard


CONTROLLER_FILE = CONTROLLER_LOG.lstrip("/")
FILES = {
    "serve/replica_qwen_dec1.log": REPLICA_LOG,
    CONTROLLER_FILE: controller_line(6.5, "dec1"),
}


def test_read_serve_reads_the_engines_on_the_nodes_and_the_controller() -> None:
    serve = _serve_json(
        (DECODE_DEPLOYMENT, _replica_json("dec1", DECODE_DEPLOYMENT, WORKER_IP_A)),
        (PREFILL_DEPLOYMENT, _replica_json("pre1", PREFILL_DEPLOYMENT, WORKER_IP_B)),  # elsewhere
        ("OpenAiIngress", _replica_json("ing1", "OpenAiIngress", WORKER_IP_A)),  # no engine
    )
    found, dashboard = read(serve, FILES)
    assert [r.replica_id for r in found.replicas] == ["dec1"]
    assert found.logs == {"dec1": REPLICA_LOG} and found.log_errors == {}
    # The head of the replica's log, relative to Ray's log directory, up to the end line.
    assert dashboard.heads == [
        (RAY_NODE_A, "serve/replica_qwen_dec1.log", coldstart.REPLICA_LOG_HEAD_BYTES, True, False)
    ]
    assert coldstart.REPLICA_LOG_HEAD_BYTES == 4 * 1024 * 1024
    assert dashboard.tails == [(RAY_HEAD_ID, CONTROLLER_FILE, 7)]
    assert found.controller == coldstart.serve_lines(FILES[CONTROLLER_FILE])
    assert (found.controller_error, found.reason) == ("", "")


def test_read_serve_names_what_it_could_not_read() -> None:
    unnamed = _replica_json("dec0", DECODE_DEPLOYMENT, WORKER_IP_A, node="")
    failing = _replica_json("dec2", DECODE_DEPLOYMENT, WORKER_IP_A)
    quiet = _replica_json("dec3quiet", DECODE_DEPLOYMENT, WORKER_IP_A)
    serve = _serve_json(
        (DECODE_DEPLOYMENT, unnamed),
        (DECODE_DEPLOYMENT, _replica_json("dec1", DECODE_DEPLOYMENT, WORKER_IP_A)),
        (DECODE_DEPLOYMENT, failing),
        (DECODE_DEPLOYMENT, quiet),
    )
    fail = {"serve/replica_qwen_dec2.log", "serve/replica_qwen_dec3quiet.log"}
    found, _ = read(serve, FILES, fail)
    assert found.logs == {"dec1": REPLICA_LOG}  # the ones after an unnamed log are read
    assert found.log_errors == {
        "dec0": "its log is not named yet",
        "dec2": "its log unreadable (boom)",
        "dec3quiet": "its log unreadable (GET serve/replica_qwen_dec3quiet.log failed)",
    }
    assert found.controller_error == ""


def test_read_serve_without_the_controllers_log_keeps_the_replicas() -> None:
    replica_json = _replica_json("dec1", DECODE_DEPLOYMENT, WORKER_IP_A)
    for serve in (
        _serve_json((DECODE_DEPLOYMENT, replica_json), controller=False),
        {
            **_serve_json((DECODE_DEPLOYMENT, replica_json)),
            "controller_info": {"log_file_path": CONTROLLER_LOG},  # no node
        },
    ):
        found, dashboard = read(serve, FILES, {"serve/replica_qwen_dec1.log"})
        assert found.controller_error == "the controller's log unnamed"
        assert [r.replica_id for r in found.replicas] == ["dec1"]
        assert found.log_errors == {"dec1": "its log unreadable (boom)"}
        assert dashboard.tails == []
    found, _ = read(_serve_json((DECODE_DEPLOYMENT, replica_json)), FILES, {CONTROLLER_FILE})
    assert found.controller_error == "the controller's log unreadable (boom)"
    assert (found.logs, found.controller) == ({"dec1": REPLICA_LOG}, ())
    assert [r.replica_id for r in found.replicas] == ["dec1"]
    found, _ = read(
        _serve_json((DECODE_DEPLOYMENT, replica_json)),
        FILES,
        {"serve/replica_qwen_dec1.log", CONTROLLER_FILE},
    )
    # Both unreadable: each says so.
    assert found.log_errors == {"dec1": "its log unreadable (boom)"}
    assert found.controller_error == "the controller's log unreadable (boom)"


def test_read_serve_when_serve_is_unreadable() -> None:
    found, dashboard = read(_serve_json(), FILES, {"serve"})
    assert found.reason == "Serve unreadable: GET api/serve/applications/ failed"
    assert (found.replicas, dashboard.heads, dashboard.tails) == ((), [], [])


def test_log_lines_of_one_reads_the_controllers_last_line(
    cli: Harness, kube_api: FakeKubeApi
) -> None:
    serving_cluster(kube_api)
    stub_launch(cli, {INSTANCE_A: T0})
    run = cli.run("coldstart", "--log-lines", "1")
    assert run.code == 0, run.err
    assert cells(run.out, coldstart.SERVING_STEP)[:2] == ["6.2", "6.5"]  # the one line it is


@pytest.mark.parametrize("lines", ["0", "-1"])
def test_log_lines_below_one_is_refused_before_any_call(
    kube_api: FakeKubeApi, tmp_path: Path, lines: str
) -> None:
    h = Harness(write_cdk_json(tmp_path))  # no AWS call is stubbed: none may be made
    run = h.run("coldstart", "--log-lines", lines)
    assert run.code == 2
    assert f"--log-lines {lines}: must be at least 1 (the last N lines of the Serve" in run.err
    assert kube_api.requests == []


@pytest.mark.parametrize(
    ("init", "end", "note"),
    [
        (90.0, 6.2, "end from the controller's constructor time"),
        (0.0, 4.7, "end from the controller's constructor time"),
        (None, None, "starting"),
    ],
)
def test_an_engine_log_without_its_finished_line_ends_at_the_controllers_figure(
    init: float | None, end: float | None, note: str
) -> None:
    """Ray 2.58 with vLLM 0.26 (the serving tier's real replicas, and a GPU run's): the engine
    replica's own log stops before "Finished initializing replica.", while the controller's
    RUNNING line says how long the constructor took."""
    started_only = replica_line(4.7, coldstart.ENGINE_STARTED)
    engine, serving = coldstart.serve_steps(
        view(
            logs={"abcd1234": started_only},
            controller=coldstart.serve_lines(controller_line(6.5, "abcd1234", init=init)),
        ),
        worker(),
    )
    assert (minutes(engine.start), engine.end and minutes(engine.end)) == (4.7, end)
    assert engine.note == f"{DECODE_DEPLOYMENT}: {note}"
    assert minutes(serving.end) == 6.5
    assert (serving.start and minutes(serving.start)) == end
