"""``status`` (and ``--watch``) against the fake Kubernetes API over TLS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_fixtures import (
    ACCOUNT,
    REGION,
    USER_ARN,
    Harness,
    cli_harness,
    stub_cluster,
    write_cdk_json,
)
from tests.fakes.kube_api import (
    GPU_NODE_A,
    GPU_NODE_B,
    WORKER_POD_A,
    WORKER_POD_B,
    FakeKubeApi,
    make_event,
    make_pod,
    make_rayservice,
)

pytest_plugins = ["tests.fakes.fixtures"]  # the ``kube_api`` fixture: a fresh fake API server


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    return cli_harness(kube_api, tmp_path)


def row(out: str, first_cell: str) -> list[str]:
    """The cells of the table row that starts with ``first_cell``."""
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{out}")


def test_running_shows_tables_and_exits_0(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    result = cli.run("status")
    assert result.code == 0, result.err
    assert "  app qwen: RUNNING" in result.out
    assert row(result.out, "Ready") == ["Ready", "True", "NonZeroServeEndpoints"]
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
    result = cli.run("status", "--watch", "--interval", "30")
    assert result.code == 0, result.err
    progress = [line for line in result.out.splitlines() if line.startswith("[")]
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


def test_watch_fails_fast_on_image_pull_backoff(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("deploying")
    kube_api.pods[1] = make_pod(
        WORKER_POD_A,
        node=GPU_NODE_A,
        phase="Pending",
        waiting_reason="ImagePullBackOff",
        waiting_message='Back-off pulling image "example.com/ray:x"',
    )
    result = cli.run("status", "--watch")
    assert result.code == 1
    assert cli.clock.sleeps == []  # no waiting at all
    verdict = result.out.rstrip().splitlines()[-1]
    assert verdict.startswith(f"Verdict: FAILED after 0s: Ray pod stuck: pod {WORKER_POD_A}")
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
        "'ray-llm-multinode': deploy the workload stack (`npx cdk deploy 'RayPdEks/*'`) or pass "
        "the right -c rayServiceName=... / -c namespace=...\n"
    )


def test_access_denied_names_the_access_entry_fix(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.inject_fault(401, times=5)
    result = cli.run("status")
    assert result.code == 3
    (line,) = result.err.splitlines()
    assert line.startswith(f"error: the cluster rejected {USER_ARN} (401: Unauthorized)")
    assert f"-c adminPrincipalArns={USER_ARN}" in line
    assert (
        f"aws eks create-access-entry --cluster-name ray-llm-multinode --principal-arn {USER_ARN} "
        f"--region {REGION}" in line
    )
    assert "AmazonEKSClusterAdminPolicy" in line


def test_forbidden_names_the_assumed_roles_role(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_cluster(
        harness.session,
        kube_api.url,
        kube_api.ca_data,
        arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Ops/alice",
    )
    kube_api.set_stage("serving")
    kube_api.inject_fault(403, times=5)
    result = harness.run("status")
    assert result.code == 3
    assert f"denied arn:aws:iam::{ACCOUNT}:role/Ops (403: nodes is forbidden" in result.err


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
        "'RayPdEks/*'`), or point the tool at it with -c clusterName=... / --region\n"
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
        r"address with -c endpointPublicCidrs=<your-ip>/32 and redeploy\n$",
        result.err,
    ), result.err
    assert len(harness.clock.sleeps) == 2  # the client's retries, through the fake clock
