"""``coldstart``: a GPU node's measured steps from its status timestamps, beside the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import timeline
from ray_pd_eks.cli import coldstart
from ray_pd_eks.cli.errors import CheckFailed
from tests.cli_fixtures import REGION, Harness, cli_harness, write_cdk_json
from tests.fakes.kube_api import GPU_NODE_A, GPU_NODE_B, WARMUP_NAMESPACE, FakeKubeApi, make_node
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


def worker(node: str = GPU_NODE_A, *, started: float | None = 4.1) -> dict[str, Any]:
    return pod(
        f"ray-worker-{node[:8]}",
        node=node,
        labels={"ray.io/node-type": "worker"},
        namespace="inference",
        containers=[container("ray-worker", started=started)],
    )


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
    assert all(s.note == "" for s in found.steps)


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
        gpu_node(), T0, "EC2", [prepull(GPU_NODE_B), prefetch(GPU_NODE_B)], [worker(GPU_NODE_B)], []
    )
    assert [s.note for s in found.steps] == [
        "",
        "no image-prepull pod on the node",
        "no model-prefetch pod on the node",
        "no Ray worker pod on the node",
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
    assert "not timed: the engine's start and Serve's (modelled 4.6-7.1" in run.out


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
