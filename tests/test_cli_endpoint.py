"""``endpoint``: the printed lines need no AWS; ``--run`` starts kubectl port-forward."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.cli_fixtures import REGION, Harness, write_cdk_json


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(write_cdk_json(tmp_path, region=REGION))


def test_prints_port_forward_and_curl_lines_without_aws(harness: Harness) -> None:
    result = harness.run("endpoint")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0] == (
        "Endpoint of RayService ray-llm (namespace inference, cluster ray-llm-multinode)"
    )
    assert f"   aws eks update-kubeconfig --name ray-llm-multinode --region {REGION}" in lines
    assert "   kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000" in lines
    assert "   curl -s http://localhost:8000/v1/models" in lines
    chat = next(line for line in lines if "/v1/chat/completions" in line)
    argv = shlex.split(chat)
    assert argv[:5] == [
        "curl",
        "-s",
        "http://localhost:8000/v1/chat/completions",
        "-H",
        "Content-Type: application/json",
    ]
    body = json.loads(argv[6])
    assert body["model"] == "qwen3.5-9b"
    assert body["messages"][0]["role"] == "user"
    assert harness.profiles == []  # no session, so it works without credentials
    assert harness.processes == []


def test_follows_context_overrides(harness: Harness) -> None:
    result = harness.run(
        "endpoint",
        "-c",
        "rayServiceName=llm",
        "-c",
        "namespace=serving",
        "-c",
        "modelId=my-model",
        "--local-port",
        "18000",
    )
    assert "kubectl port-forward -n serving svc/llm-serve-svc 18000:8000" in result.out
    assert "curl -s http://localhost:18000/v1/models" in result.out
    assert '"model": "my-model"' in result.out


def test_run_starts_kubectl_with_the_profile(harness: Harness) -> None:
    result = harness.run("endpoint", "--run", "--profile", "ops")
    assert result.code == 0
    ((argv, env),) = harness.processes
    assert argv == [
        "/usr/local/bin/kubectl",
        "port-forward",
        "-n",
        "inference",
        "svc/ray-llm-serve-svc",
        "8000:8000",
    ]
    assert env is not None and env["AWS_PROFILE"] == "ops"
    assert "--profile ops" in result.out  # in the update-kubeconfig line


def test_run_without_kubectl_is_a_usage_error(harness: Harness) -> None:
    harness.kubectl = None
    result = harness.run("endpoint", "--run")
    assert result.code == 2
    assert result.err == (
        "error: kubectl not found on PATH: install it (https://kubernetes.io/docs/tasks/tools/) "
        "or run the printed command where it is installed\n"
    )
    assert harness.processes == []


def test_failed_port_forward_is_exit_3(harness: Harness) -> None:
    harness.process_exit = 1
    result = harness.run("endpoint", "--run")
    assert result.code == 3
    assert result.err.startswith("error: kubectl port-forward exited with 1: check `kubectl get")


def test_bad_port_is_a_usage_error(harness: Harness) -> None:
    result = harness.run("endpoint", "--local-port", "70000")
    assert result.code == 2
    assert result.err == "error: --local-port 70000: must be 1..65535\n"


def test_the_kubeconfig_line_always_names_a_region(tmp_path: Path) -> None:
    """Without a region setting: the environment's, else one the shell must supply (a bare
    `aws eks update-kubeconfig` would use the profile's region, perhaps not the deploy's)."""
    harness = Harness(write_cdk_json(tmp_path))
    line = next(x for x in harness.run("endpoint").out.splitlines() if "update-kubeconfig" in x)
    assert line.endswith('--region "${AWS_REGION:?set AWS_REGION to your deploy region}"')
    harness.env["AWS_DEFAULT_REGION"] = "eu-west-1"
    line = next(x for x in harness.run("endpoint").out.splitlines() if "update-kubeconfig" in x)
    assert line.endswith("--region eu-west-1")
