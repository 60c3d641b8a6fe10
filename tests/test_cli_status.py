"""``status`` (and ``--watch``) against the fake Kubernetes API over TLS."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from pd_constructs.serving import warmup
from ray_pd_eks.cli import status
from tests.cli_fixtures import (
    ACCOUNT,
    REGION,
    USER_ARN,
    Harness,
    Run,
    StubbedSession,
    cli_harness,
    stub_cluster,
    write_cdk_json,
)
from tests.fakes.kube_api import (
    GPU_NODE_A,
    GPU_NODE_B,
    RAY_CLUSTER,
    RAY_NODE_A,
    SYSTEM_NODE,
    WARMUP_NAMESPACE,
    WORKER_IP_A,
    WORKER_POD_A,
    WORKER_POD_B,
    FakeKubeApi,
    make_container_status,
    make_daemonset,
    make_event,
    make_node,
    make_object_event,
    make_pd_serve_applications,
    make_pod,
    make_rayservice,
    make_warmup_pod,
)

pytest_plugins = ["tests.fakes.fixtures"]  # the ``kube_api`` fixture: a fresh fake API server


ALARM_PREFIX = "ray-llm-multinode-ray-llm-"


def stub_alarms(h: Harness, alarms: list[dict[str, Any]] | None = None) -> None:
    """CloudWatch's answer to the one DescribeAlarms a status run ends with."""
    h.session.stub("cloudwatch").add_response(
        "describe_alarms",
        {"MetricAlarms": alarms or [], "CompositeAlarms": []},
        {
            "AlarmNamePrefix": ALARM_PREFIX,
            "StateValue": "ALARM",
            "AlarmTypes": ["MetricAlarm", "CompositeAlarm"],
        },
    )


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    harness = cli_harness(kube_api, tmp_path)
    stub_alarms(harness)
    return harness


def row(out: str, first_cell: str) -> list[str]:
    """The cells of the table row that starts with ``first_cell``."""
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{out}")


def watch_to_the_end(cli: Harness) -> tuple[Run, list[str]]:
    """``status --watch --interval 30``, which must end 0, and its progress lines ("[   30s]
    ...")."""
    result = cli.run("status", "--watch", "--interval", "30")
    assert result.code == 0, result.err
    return result, [line for line in result.out.splitlines() if line.startswith("[")]


def test_running_shows_tables_and_exits_0(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    result = cli.run("status")
    assert result.code == 0, result.err
    assert "  app qwen: RUNNING" in result.out
    assert row(result.out, "Ready")[:3] == ["Ready", "True", "NonZeroServeEndpoints"]
    assert " NonZeroServeEndpoints  Number of serve endpoints is greater than 0" in result.out
    assert row(result.out, WORKER_POD_A) == [
        WORKER_POD_A,
        "worker",
        "Running",
        GPU_NODE_A,
        "1",
        "prefill",
    ]
    assert row(result.out, WORKER_POD_B) == [
        WORKER_POD_B,
        "worker",
        "Running",
        GPU_NODE_B,
        "1",
        "decode",
    ]
    assert row(result.out, GPU_NODE_A) == [
        GPU_NODE_A,
        "Ready",
        "g6.8xlarge",
        "us-west-2a",
        "1/1",
        "1/1",
    ]
    assert "GPU nodes (role=gpu-worker): 2/2 usable" in result.out
    assert f"Placement: prefill on {GPU_NODE_A}, decode on {GPU_NODE_B}" in result.out
    assert f"  aws eks update-kubeconfig --name ray-llm-multinode --region {REGION}" in result.out
    assert "  kubectl get rayservice ray-llm -n inference -o yaml" in result.out
    assert "  kubectl get pods -n inference -o wide -l ray.io/cluster" in result.out
    assert result.out.rstrip().splitlines()[-1].startswith("Verdict: RUNNING: app qwen RUNNING")
    # Talked to the API with an EKS token, asked only for warning events.
    assert all(r.authorization.startswith("Bearer k8s-aws-v1.") for r in kube_api.requests)
    assert kube_api.requests_to("/events")[0].query == {"fieldSelector": "type=Warning"}
    cli.session.assert_no_pending_responses()


def test_aligned_columns(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    lines = cli.run("status").out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("POD "))
    pod_line = next(line for line in lines if WORKER_POD_A in line)
    assert header.index("NODE") == pod_line.index(GPU_NODE_A)
    assert header.index("SERVES") == pod_line.index("prefill")


def test_deploying_without_watch_exits_1_and_says_what_it_waits_for(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("deploying")
    result = cli.run("status")
    assert result.code == 1
    assert "  app qwen: DEPLOYING" in result.out
    assert "Verdict: WAITING: Ready=False/Initializing; app qwen=DEPLOYING" in result.out
    assert "replica placement unread: the Serve app is not RUNNING yet" in result.out
    # The dashboard is not asked before the app runs (that would only cost 503 retries).
    assert kube_api.requests_to("/proxy/") == []


def test_unready_nodes_and_warning_events_are_shown(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("nodes-not-ready")
    result = cli.run("status")
    assert result.code == 1
    assert row(result.out, GPU_NODE_B) == [
        GPU_NODE_B,
        "NotReady",
        "g6.8xlarge",
        "us-west-2a",
        "0/0",
        "0/0",
    ]
    assert "GPU nodes (role=gpu-worker): 0/2 usable" in result.out
    assert "nvidia.com/gpu allocatable 0 (NVIDIA device plugin not running?)" in result.out
    assert row(result.out, WORKER_POD_A)[2] == "Unschedulable"
    assert "Warning events (latest 2)" in result.out
    event = row(result.out, "30s")
    assert event[1:3] == [f"Pod/{WORKER_POD_A}", "FailedScheduling"]
    assert "2 Insufficient nvidia.com/gpu." in " ".join(event)


def test_events_flag_limits_the_list(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("nodes-not-ready")
    result = cli.run("status", "--events", "1")
    assert "Warning events (latest 1)" in result.out
    assert result.out.count("FailedScheduling  0/3") == 1


def test_watch_ends_on_running(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    cli.clock.on_sleep = [lambda: kube_api.set_stage("running")]
    result, progress = watch_to_the_end(cli)
    assert progress == [
        "[    0s] app DEPLOYING | Ready=False | GPU nodes 2/2 | Ray pods 3/3 Running",
        "[   30s] app RUNNING | Ready=True | GPU nodes 2/2 | Ray pods 3/3 Running",
    ]
    assert [s for s in cli.clock.sleeps if s >= 5] == [30.0]
    assert "Verdict: RUNNING after 30s: app qwen RUNNING" in result.out


def test_watch_waits_for_a_rayservice_not_created_yet(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = None
    cli.clock.on_sleep = [lambda: kube_api.set_stage("running")]
    result = cli.run("status", "--watch", "--interval", "20")
    assert result.code == 0
    assert "[    0s] RayService not created yet (the workload stack creates it)" in result.out


def test_watch_ends_on_deploy_failed(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")

    def fail() -> None:
        kube_api.rayservice = make_rayservice(
            ready=False, app_status="DEPLOY_FAILED", app_message="ValueError: bad engine_kwargs"
        )

    cli.clock.on_sleep = [fail]
    result = cli.run("status", "--watch", "--interval", "30")
    assert result.code == 1
    assert "[   30s] app DEPLOY_FAILED | Ready=False" in result.out
    assert (
        "Verdict: FAILED after 30s: Serve app qwen is DEPLOY_FAILED: ValueError: bad engine_kwargs"
        in result.out
    )


def test_watch_fails_fast_on_image_pull_backoff_past_the_grace(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("deploying")
    back_off = 'Back-off pulling image "example.com/ray:x"'
    kube_api.pods[1] = make_pod(
        WORKER_POD_A,
        node=GPU_NODE_A,
        phase="Pending",
        waiting_reason="ImagePullBackOff",
        waiting_message=back_off,
    )
    # Kubelet's aggregated pull events: failing for longer than the readiness grace.
    kube_api.events = [make_event(WORKER_POD_A, "BackOff", back_off, ago=5, count=12)]
    result = cli.run("status", "--watch")
    assert result.code == 1
    assert cli.clock.sleeps == []  # no waiting at all
    verdict = result.out.rstrip().splitlines()[-1]
    assert verdict.startswith("Verdict: FAILED after 0s: Ray pod cannot pull its image for 66")
    assert f"pod {WORKER_POD_A}" in verdict
    assert "ImagePullBackOff" in verdict and "check the image URI" in verdict
    assert row(result.out, WORKER_POD_A)[2] == "ImagePullBackOff"


def test_watch_fails_when_gpu_is_taken_on_ready_nodes(kube_api: FakeKubeApi, cli: Harness) -> None:
    """The 'config change needs double GPUs' case: nodes are fine, the scheduler says no."""
    kube_api.set_stage("deploying")
    message = "0/3 nodes are available: 2 Insufficient nvidia.com/gpu."
    kube_api.pods[2] = make_pod(WORKER_POD_B, unschedulable_message=message, unschedulable_ago=400)
    kube_api.events = [make_event(WORKER_POD_B, "FailedScheduling", message, ago=10)]
    result = cli.run("status", "--watch")
    assert result.code == 1
    assert (
        f"Ray pod cannot be scheduled: pod {WORKER_POD_B}: Unschedulable: {message}" in result.out
    )


def test_watch_times_out_with_the_last_status(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    result = cli.run("status", "--watch", "--interval", "30", "--timeout", "90")
    assert result.code == 1
    assert [s for s in cli.clock.sleeps if s >= 5] == [30.0, 30.0, 30.0]
    assert "Verdict: TIMEOUT after 1m30s: still waiting for: Ready=False/Initializing" in result.out
    # Off a terminal the unchanged progress line is printed once, not once per poll.
    assert result.out.count("app DEPLOYING | Ready=False") == 1


def test_bad_interval_is_a_usage_error(cli: Harness) -> None:
    result = cli.run("status", "--watch", "--interval", "0")
    assert result.code == 2
    assert result.err == "error: --interval and --timeout must be positive numbers of seconds\n"


def test_rayservice_missing_is_exit_3(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = None
    result = cli.run("status")
    assert result.code == 3
    assert result.out == ""
    assert result.err == (
        "error: RayService 'ray-llm' not found in namespace 'inference' of cluster "
        "'ray-llm-multinode': deploy the workload stack "
        "(`npx cdk deploy 'RayPdEks/*' --concurrency 4`) or set the right ones: "
        "`ray-pd-eks settings --set rayServiceName=... --set namespace=...`\n"
    )


def test_access_denied_names_the_access_entry_fix(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.inject_fault(401, times=5)
    result = cli.run("status")
    assert result.code == 3
    (line,) = result.err.splitlines()
    assert line.startswith(f"error: the cluster rejected {USER_ARN} (401: Unauthorized)")
    assert (
        "add it with `ray-pd-eks settings --add-admin-me`"
        " and `npx cdk deploy 'RayPdEks/*' --concurrency 4`" in line
    )
    assert (
        f"aws eks create-access-entry --cluster-name ray-llm-multinode --principal-arn {USER_ARN} "
        f"--region {REGION}" in line
    )
    assert "AmazonEKSClusterAdminPolicy" in line


def test_forbidden_names_the_assumed_roles_role(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    """The role, with the path IAM gives it (an IAM Identity Center role's), not the session."""
    sso = "aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_Ops_0123abcd"
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_cluster(
        harness.session,
        kube_api.url,
        kube_api.ca_data,
        arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Ops_0123abcd/alice",
    )
    harness.session.stub("iam").add_response(
        "get_role",
        {
            "Role": {
                "Path": "/aws-reserved/sso.amazonaws.com/eu-west-1/",
                "RoleName": "AWSReservedSSO_Ops_0123abcd",
                "RoleId": "AROAEXAMPLEEXAMPLE01",
                "Arn": f"arn:aws:iam::{ACCOUNT}:role/{sso}",
                "CreateDate": "2026-01-01T00:00:00Z",
            }
        },
        {"RoleName": "AWSReservedSSO_Ops_0123abcd"},
    )
    kube_api.set_stage("serving")
    kube_api.user = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Ops_0123abcd/alice"
    kube_api.inject_fault(403, times=5)
    result = harness.run("status")
    assert result.code == 3
    assert (
        f'denied arn:aws:iam::{ACCOUNT}:role/{sso} (403: rayservices.ray.io "ray-llm" is '
        f'forbidden: User "{kube_api.user}" cannot get resource "rayservices"' in result.err
    )
    assert f"--principal-arn arn:aws:iam::{ACCOUNT}:role/{sso} " in result.err


def test_cluster_not_found_is_exit_3(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    harness.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": USER_ARN}
    )
    harness.session.stub("eks").add_client_error(
        "describe_cluster", "ResourceNotFoundException", "No cluster found for name: x.", 404
    )
    result = harness.run("status", "-c", "clusterName=other")
    assert result.code == 3
    assert result.err == (
        f"error: EKS cluster 'other' not found in {REGION}: deploy it first (`npx cdk deploy "
        "'RayPdEks/*' --concurrency 4`), or point the tool at it: "
        "`ray-pd-eks settings --set clusterName=...`, or --region\n"
    )


def test_private_endpoint_unreachable_explains_why(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    with FakeKubeApi() as api:
        ca, url = api.ca_data, api.url
    # The server is closed now: connections to its port are refused.
    stub_cluster(harness.session, url, ca, public=False)
    result = harness.run("status")
    assert result.code == 3
    assert re.match(
        rf"error: cannot reach the Kubernetes API at {re.escape(url)} "
        r"\(ConnectionRefusedError: .*\): "
        r"the API endpoint is private: run the tool from inside the VPC, or open it to your "
        r"address with `ray-pd-eks settings --set "
        r"endpointPublicCidrs=<your-ip>/32` and `npx cdk deploy 'RayPdEks/\*' --concurrency 4`\n$",
        result.err,
    ), result.err
    assert len(harness.clock.sleeps) == 2  # the client's retries, through the fake clock


# --- node warm-up ----------------------------------------------------------------------------

PREPULL_SYS, PREPULL_A, PREPULL_B = (
    "image-prepull-s7d2k",
    "image-prepull-a4f9x",
    "image-prepull-b8n3q",
)
PREFETCH_A, PREFETCH_B = "model-prefetch-a2m6p", "model-prefetch-b5t8r"
GATED = "GatedRepoError: 403 Client Error. Cannot access gated repo for url https://hf.co/x."


def warmup_section(out: str) -> list[str]:
    """The lines of the "Node warm-up" section, up to the blank line before "Placement"."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Node warm-up"))
    end = next(i for i, line in enumerate(lines) if line.startswith("Placement:"))
    return lines[start : end - 1]


def state_of(out: str, pod: str) -> str:
    """The STATE cell (the last column, may contain spaces) of a warm-up pod's row."""
    cells = row(out, pod)
    return " ".join(cells[3:])


def set_warmup(kube_api: FakeKubeApi, *, prefetch_b: dict[str, object] | None = None) -> None:
    """Pre-pull: done on the system node and GPU node A, pulling on B. Prefetch: done on A,
    ``prefetch_b`` (default: ``prefetch-model`` downloading) on B."""
    kube_api.warmup_daemonsets = [
        make_daemonset("image-prepull", desired=3, ready=2),
        make_daemonset("model-prefetch", desired=2, ready=1),
    ]
    done_init = [
        make_container_status("hf-token", "terminated"),
        make_container_status("prefetch-model", "terminated"),
    ]
    kube_api.warmup_pods = [
        make_warmup_pod(PREPULL_SYS, daemonset="image-prepull", node=SYSTEM_NODE, ready=True),
        make_warmup_pod(PREPULL_A, daemonset="image-prepull", node=GPU_NODE_A, ready=True),
        make_warmup_pod(PREPULL_B, daemonset="image-prepull", node=GPU_NODE_B),
        make_warmup_pod(
            PREFETCH_A, daemonset="model-prefetch", node=GPU_NODE_A, init=done_init, ready=True
        ),
        prefetch_b
        or make_warmup_pod(
            PREFETCH_B,
            daemonset="model-prefetch",
            node=GPU_NODE_B,
            init=[
                make_container_status("hf-token", "terminated"),
                make_container_status("prefetch-model"),
            ],
        ),
    ]


def test_warmup_names_match_the_manifests() -> None:
    assert status.WARMUP_NAMESPACE == warmup.WARMUP_NAMESPACE == WARMUP_NAMESPACE
    prepull = warmup.render_image_prepull(image="example.com/ray-llm:1")
    assert prepull["metadata"] == {
        "name": "image-prepull",
        "namespace": WARMUP_NAMESPACE,
        "labels": {
            "app.kubernetes.io/name": "image-prepull",
            "app.kubernetes.io/part-of": "ray-pd-eks",
        },
    }
    manifest = Path(__file__).resolve().parent.parent / "assets/manifests/model-prefetch.yaml"
    prefetch = yaml.safe_load(manifest.read_text().replace("${", "{"))
    assert prefetch["metadata"]["name"] == "model-prefetch"
    assert prefetch["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == (
        "model-prefetch"
    )
    assert status.WARMUP_DAEMONSETS == ("image-prepull", "model-prefetch")


def test_warmup_shows_daemonsets_and_what_each_pod_does(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    set_warmup(kube_api)
    result = cli.run("status")
    assert result.code == 0, result.err  # the warm-up is still running: the app serves anyway
    section = warmup_section(result.out)
    assert section[0] == (
        f"Node warm-up (namespace {WARMUP_NAMESPACE}): 3/5 pods ready "
        "(informational: workers never wait on it)"
    )
    assert row(result.out, "image-prepull") == ["image-prepull", "3", "2"]
    assert row(result.out, "model-prefetch") == ["model-prefetch", "2", "1"]
    assert row(result.out, PREPULL_SYS)[1:3] == ["image-prepull", SYSTEM_NODE]
    assert state_of(result.out, PREPULL_SYS) == "done"
    assert state_of(result.out, PREPULL_A) == "done"
    assert state_of(result.out, PREPULL_B) == "pulling image"
    assert row(result.out, PREFETCH_B)[1:3] == ["model-prefetch", GPU_NODE_B]
    assert state_of(result.out, PREFETCH_A) == "done"
    assert state_of(result.out, PREFETCH_B) == "fetching model (prefetch-model)"
    assert not any("failed" in line for line in section)
    assert f"  kubectl get ds,pods -n {WARMUP_NAMESPACE} -o wide" in result.out
    assert result.out.rstrip().splitlines()[-1].startswith("Verdict: RUNNING: app qwen RUNNING")
    daemonsets = kube_api.requests_to(f"/apis/apps/v1/namespaces/{WARMUP_NAMESPACE}/daemonsets")
    assert len(daemonsets) == 1


def test_warmup_crash_loop_quotes_the_last_termination_message(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    crashing = make_warmup_pod(
        PREFETCH_B,
        daemonset="model-prefetch",
        node=GPU_NODE_B,
        init=[
            make_container_status("hf-token", "terminated"),
            make_container_status(
                "prefetch-model",
                "waiting",
                reason="CrashLoopBackOff",
                message="back-off 5m0s restarting failed container",
                last_exit_code=1,
                last_message=f"Traceback (most recent call last):\n  ...\n{GATED}\n",
                restart_count=6,
            ),
        ],
    )
    set_warmup(kube_api, prefetch_b=crashing)
    result = cli.run("status")
    assert result.code == 0, result.err  # a failed warm-up never fails status
    assert state_of(result.out, PREFETCH_B) == (
        f"failed: prefetch-model CrashLoopBackOff, exit 1 (Error): {GATED}"
    )
    assert (
        f"  why {PREFETCH_B} failed: kubectl logs -n {WARMUP_NAMESPACE} {PREFETCH_B} "
        "-c prefetch-model --previous"
    ) in warmup_section(result.out)
    assert state_of(result.out, PREFETCH_A) == "done"
    assert result.out.rstrip().splitlines()[-1].startswith("Verdict: RUNNING: app qwen RUNNING")


@pytest.mark.parametrize(
    ("init", "containers", "expected"),
    [
        pytest.param(
            [
                make_container_status("hf-token"),
                make_container_status("prefetch-model", "waiting", reason="PodInitializing"),
            ],
            None,
            "fetching model (hf-token)",
            id="token-fetch-running",
        ),
        pytest.param(
            [make_container_status("stage-model", "waiting", reason="PodInitializing")],
            None,
            "pulling image",
            id="init-image-pulling",
        ),
        pytest.param(
            [make_container_status("stage-model", "terminated")],
            None,
            "starting",
            id="fetched-main-not-running",
        ),
        pytest.param(
            [
                make_container_status(
                    "stage-model", "terminated", exit_code=2, message="fatal error: Access Denied"
                )
            ],
            None,
            "failed: stage-model exit 2 (Error): fatal error: Access Denied",
            id="init-exit-nonzero",
        ),
        pytest.param(
            [
                make_container_status(
                    "prefetch-model",
                    "waiting",
                    reason="CrashLoopBackOff",
                    message="back-off 10s",
                    last_exit_code=137,
                )
            ],
            None,
            "failed: prefetch-model CrashLoopBackOff, exit 137 (Error)",
            id="crash-loop-without-message",
        ),
        pytest.param(
            None,
            [
                make_container_status(
                    "hold-image",
                    "waiting",
                    reason="ImagePullBackOff",
                    message='Back-off pulling image "example.com/ray-llm:1"',
                )
            ],
            'failed: hold-image ImagePullBackOff: Back-off pulling image "example.com/ray-llm:1"',
            id="image-pull-backoff",
        ),
    ],
)
def test_warmup_pod_states(
    init: list[dict[str, object]] | None, containers: list[dict[str, object]] | None, expected: str
) -> None:
    pod = make_warmup_pod(
        "p", daemonset="model-prefetch", node=GPU_NODE_A, init=init, containers=containers
    )
    assert status.warmup_pod_state(pod)[0] == expected


@pytest.mark.parametrize("answer", ["empty", "404"])
def test_warmup_not_deployed_changes_nothing(
    kube_api: FakeKubeApi, cli: Harness, answer: str
) -> None:
    """An older deployment: no warm-up namespace. The real API server lists it as empty; a
    404 (an API server without the list, a proxy in front) means the same."""
    kube_api.set_stage("serving")
    assert kube_api.warmup_daemonsets == [] and kube_api.warmup_pods == []
    if answer == "404":
        kube_api.inject_fault(404, path_contains=f"/namespaces/{WARMUP_NAMESPACE}/daemonsets")
    result = cli.run("status")
    assert result.code == 0, result.err
    assert warmup_section(result.out) == [
        f"Node warm-up (namespace {WARMUP_NAMESPACE}): not deployed "
        "(no image-prepull or model-prefetch DaemonSet)"
    ]
    assert result.err == ""
    assert kube_api.requests_to(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods") == []


def test_warmup_empty_namespace_is_not_deployed(kube_api: FakeKubeApi, cli: Harness) -> None:
    """A real API server lists an absent namespace as empty (200), not 404."""
    kube_api.set_stage("deploying")
    kube_api.warmup_daemonsets = []
    result = cli.run("status")
    assert result.code == 1  # deploying, as without the warm-up
    assert warmup_section(result.out)[0].endswith(
        ": not deployed (no image-prepull or model-prefetch DaemonSet)"
    )
    assert "Verdict: WAITING: Ready=False/Initializing; app qwen=DEPLOYING" in result.out
    assert kube_api.requests_to(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods") == []


def test_warmup_one_daemonset_missing(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    set_warmup(kube_api)
    del kube_api.warmup_daemonsets[1]
    result = cli.run("status")
    assert row(result.out, "image-prepull") == ["image-prepull", "3", "2"]
    assert "  model-prefetch: not deployed" in warmup_section(result.out)


def test_warmup_access_denied_is_one_line(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    set_warmup(kube_api)
    kube_api.inject_fault(403, times=5, path_contains=f"/namespaces/{WARMUP_NAMESPACE}/")
    result = cli.run("status")
    assert result.code == 0, result.err
    assert result.err == ""
    (line,) = warmup_section(result.out)
    assert line.startswith(
        f"Node warm-up (namespace {WARMUP_NAMESPACE}): access denied (403: daemonsets.apps is "
        "forbidden"
    )
    assert result.out.rstrip().splitlines()[-1].startswith("Verdict: RUNNING: app qwen RUNNING")


def test_watch_shows_warmup_progress_and_does_not_wait_for_it(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("deploying")
    set_warmup(kube_api)

    def running_with_a_failed_prefetch() -> None:
        kube_api.set_stage("running")
        kube_api.warmup_daemonsets[0] = make_daemonset("image-prepull", desired=3, ready=3)
        kube_api.warmup_pods[4] = make_warmup_pod(
            PREFETCH_B,
            daemonset="model-prefetch",
            node=GPU_NODE_B,
            init=[make_container_status("prefetch-model", "terminated", exit_code=1)],
        )

    cli.clock.on_sleep = [running_with_a_failed_prefetch]
    result, progress = watch_to_the_end(cli)
    assert progress == [
        "[    0s] app DEPLOYING | Ready=False | GPU nodes 2/2 | Ray pods 3/3 Running | warm-up 3/5",
        "[   30s] app RUNNING | Ready=True | GPU nodes 2/2 | Ray pods 3/3 Running | warm-up 4/5",
    ]
    assert state_of(result.out, PREFETCH_B) == "failed: prefetch-model exit 1 (Error)"
    assert "Verdict: RUNNING after 30s: app qwen RUNNING" in result.out


def test_aggregated_app_shows_engines_doing_both_phases(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    kube_api.set_aggregated()  # the live app is build_openai_app; cdk.json still says pd
    result = cli.run("status")
    assert result.code == 0, result.err
    assert row(result.out, WORKER_POD_A)[-1] == "prefill+decode"
    assert row(result.out, WORKER_POD_B)[-1] == "prefill+decode"
    assert row(result.out, "LLMServer:qwen3_5-9b")[:3] == [
        "LLMServer:qwen3_5-9b",
        "engine",
        "HEALTHY",
    ]
    assert (
        f"Placement: aggregated: 2 engine(s), each on its own node: {GPU_NODE_A}, {GPU_NODE_B}"
        in result.out
    )


def test_watch_fails_fast_when_the_api_server_refuses_the_worker_pods(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    """No worker pod exists to show a problem: the verdict comes from the RayCluster's event."""
    kube_api.set_stage("deploying")
    kube_api.pods = kube_api.pods[:1]
    refused = (
        f"Failed to create worker Pod for the cluster inference/{RAY_CLUSTER}, exceeded quota: "
        "gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2"
    )
    kube_api.events = [
        make_object_event("RayCluster", RAY_CLUSTER, "FailedToCreateWorkerPod", refused, count=3)
    ]
    result = cli.run("status", "--watch")
    assert result.code == 1
    verdict = result.out.rstrip().splitlines()[-1]
    assert verdict.startswith("Verdict: FAILED after 0s: KubeRay could not create the Ray cluster")
    assert refused in verdict


def test_prefill_and_decode_on_one_node_is_failed_and_exits_1(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    # Both engines report the node of worker A: Serve placed them together.
    kube_api.serve_applications = make_pd_serve_applications(decode=(RAY_NODE_A, WORKER_IP_A))
    result = cli.run("status")
    assert result.code == 1
    verdict = result.out.rstrip().splitlines()[-1]
    assert verdict.startswith(
        f"Verdict: FAILED: prefill and decode replicas share node(s) {GPU_NODE_A}"
    )
    # The same state with the engines apart is RUNNING, exit 0: the node is the difference.
    kube_api.serve_applications = make_pd_serve_applications()
    cli.session = StubbedSession()
    stub_cluster(cli.session, kube_api.url, kube_api.ca_data)
    stub_alarms(cli)
    again = cli.run("status")
    assert again.code == 0, again.out
    assert again.out.rstrip().splitlines()[-1].startswith("Verdict: RUNNING")


# -- observability: the dashboard and the alarms in ALARM ---------------------------------------


DASHBOARD = (
    f"https://{REGION}.console.aws.amazon.com/cloudwatch/home?region={REGION}"
    "#dashboards/dashboard/ray-llm-multinode-ray-llm"
)


def _alarm(name: str, reason: str, minutes_ago: int) -> dict[str, Any]:
    return {
        "AlarmName": f"{ALARM_PREFIX}{name}",
        "StateValue": "ALARM",
        "StateReason": reason,
        "StateUpdatedTimestamp": datetime.now(UTC) - timedelta(minutes=minutes_ago),
    }


def test_status_prints_the_dashboard_and_no_alarm(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    result = cli.run("status")
    assert result.code == 0
    assert f"Dashboard: {DASHBOARD}" in result.out
    assert f"Alarms ({ALARM_PREFIX}*): none in ALARM" in result.out
    cli.session.assert_no_pending_responses()


def test_status_lists_alarms_in_alarm_without_changing_the_exit_code(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    kube_api.set_stage("serving")
    h = cli_harness(kube_api, tmp_path)
    stub_alarms(
        h,
        [
            _alarm("WorkersDown", "1 contributor breaching", 12),
            _alarm("KvCacheFull", "Decode:qwen3_5-9b above 0.9\nfor 10 minutes", 3),
        ],
    )
    result = h.run("status")
    assert result.code == 0  # the endpoint is RUNNING; alarms are reported, not judged
    lines = result.out.splitlines()
    start = lines.index(f"Alarms in ALARM (2, names start with {ALARM_PREFIX})")
    assert lines[start + 1].split() == ["ALARM", "SINCE", "REASON"]
    # SINCE is measured against the real clock: a few seconds may pass during the run.
    assert lines[start + 2].split()[0] == "KvCacheFull"
    assert re.fullmatch(r"3m0\ds", lines[start + 2].split()[1])
    assert lines[start + 2].endswith("Decode:qwen3_5-9b above 0.9 for 10 minutes")
    assert lines[start + 3].split()[0] == "WorkersDown"
    assert re.fullmatch(r"12m0\ds", lines[start + 3].split()[1])


def test_status_alarms_denied_is_one_line(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    kube_api.set_stage("serving")
    h = cli_harness(kube_api, tmp_path)
    h.session.stub("cloudwatch").add_client_error(
        "describe_alarms", "AccessDenied", "not authorized", http_status_code=403
    )
    result = h.run("status")
    assert result.code == 0
    (line,) = [x for x in result.out.splitlines() if x.startswith("Alarms")]
    assert line.startswith("Alarms: cannot tell (access denied for cloudwatch:DescribeAlarms")


def test_status_pages_through_alarms(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    kube_api.set_stage("serving")
    h = cli_harness(kube_api, tmp_path)
    cw = h.session.stub("cloudwatch")
    expected = {
        "AlarmNamePrefix": ALARM_PREFIX,
        "StateValue": "ALARM",
        "AlarmTypes": ["MetricAlarm", "CompositeAlarm"],
    }
    cw.add_response(
        "describe_alarms",
        {"MetricAlarms": [_alarm("HeadDown", "no target", 1)], "NextToken": "page-2"},
        expected,
    )
    cw.add_response(
        "describe_alarms",
        {"MetricAlarms": [_alarm("TtftP95", "Prefill above 2", 2)]},
        {**expected, "NextToken": "page-2"},
    )
    result = h.run("status")
    assert "Alarms in ALARM (2," in result.out
    h.session.assert_no_pending_responses()


def test_status_with_observability_none_asks_cloudwatch_nothing(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    kube_api.set_stage("serving")
    h = cli_harness(kube_api, tmp_path)
    result = h.run("status", "-c", "observability=none")
    assert result.code == 0
    assert "Dashboard:" not in result.out and "Alarms" not in result.out


def test_watch_times_out_waiting_for_a_rayservice_never_created(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("deploying")
    kube_api.rayservice = None
    result = cli.run("status", "--watch", "--interval", "30", "--timeout", "60")
    assert result.code == 1
    assert (
        "Verdict: TIMEOUT after 1m00s: still waiting for: RayService not created yet" in result.out
    )


def test_waiting_names_the_first_pod_problem(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    kube_api.pods[1] = make_pod(
        WORKER_POD_A, node=GPU_NODE_A, waiting_reason="ErrImagePull", waiting_message="timeout"
    )
    stub_alarms(cli)
    result = cli.run("status")
    assert result.code == 1
    assert result.out.rstrip().splitlines()[-1] == (
        f"Verdict: WAITING: pod {WORKER_POD_A} container ray-worker: ErrImagePull: timeout"
    )


SPARE_NODE = "ip-10-0-1-12.us-west-2.compute.internal"


def spare_placeholder(name: str, node: str | None, *, app: str = status.WARM_SPARE_APP) -> dict:
    """A warm spare's placeholder pod (the Deployment's pause container), running on ``node``
    (None: pending, waiting for the Cluster Autoscaler's node)."""
    pod = make_warmup_pod(name, daemonset=app, node=node, ready=node is not None)
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": app}
    return pod


def with_spare_node(kube_api: FakeKubeApi, stage: str, *placeholders: dict) -> None:
    """The stage with the warm-up, a third GPU node (``SPARE_NODE``) and ``placeholders``."""
    kube_api.set_stage(stage)
    set_warmup(kube_api)
    kube_api.nodes.append(make_node(SPARE_NODE))
    kube_api.warmup_pods += list(placeholders)


def test_a_warm_spare_node_is_marked_and_counted_apart(kube_api: FakeKubeApi, cli: Harness) -> None:
    with_spare_node(
        kube_api,
        "serving",
        spare_placeholder("gpu-warm-spare-7d9f-a", SPARE_NODE),
        spare_placeholder("gpu-warm-spare-7d9f-b", None),  # pending: holds no node yet
        # Another app's running pod on a serving node marks nothing.
        spare_placeholder("other-1", GPU_NODE_A, app="image-prepull-extra"),
    )
    result = cli.run("status")
    assert result.code == 0, result.err
    assert (
        "GPU nodes (role=gpu-worker): 3/2 usable, 1 of them a warm spare (a placeholder holds "
        "the GPU until a decode replica needs it)"
    ) in result.out
    assert row(result.out, SPARE_NODE)[1:4] == ["Ready,", "warm", "spare"]
    assert row(result.out, GPU_NODE_A)[1:3] == ["Ready", "g6.8xlarge"]


def test_the_spare_rule_is_the_placeholders_running_on_a_node() -> None:
    pods = {
        "items": [
            spare_placeholder("a", SPARE_NODE),
            spare_placeholder("b", GPU_NODE_B),
            spare_placeholder("pending", None),
            spare_placeholder("other", GPU_NODE_A, app="image-prepull"),
        ]
    }
    pods["items"][1]["status"]["phase"] = "Succeeded"  # ended: holds nothing any more
    assert status.spare_nodes(pods) == {SPARE_NODE}
    assert status.spare_nodes({}) == frozenset()


def test_watch_counts_spares_in_its_progress_line(kube_api: FakeKubeApi, cli: Harness) -> None:
    with_spare_node(
        kube_api,
        "running",
        spare_placeholder("gpu-warm-spare-7d9f-a", SPARE_NODE),
        spare_placeholder("gpu-warm-spare-7d9f-b", GPU_NODE_B),
    )
    result, (progress,) = watch_to_the_end(cli)
    assert "| GPU nodes 3/2 (2 spare) |" in progress
    assert "3/2 usable, 2 of them warm spares (" in result.out
