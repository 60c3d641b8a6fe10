"""The readiness handler, the recreate handler, the Ray token writer and the CLI's `status`,
run against the real API server under their own RBAC identities (tokens.csv), with the real
operator's objects and the real garbage collector."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.cli_fixtures import cli_harness
from tests_cluster import handlers, variants
from tests_cluster.conftest import Applied, Deployer, pods
from tests_cluster.kube import Cluster, tokens, wait_until

pytest_plugins = ["tests.fakes.fixtures"]


@pytest.fixture(scope="module")
def applied(deployer: Deployer) -> Applied:
    return deployer.ensure("default")


@pytest.fixture(scope="module")
def cluster_(applied: Applied, deployer: Deployer) -> Cluster:
    return deployer.cluster


def _app() -> Any:
    return variants.app("default")


def test_token_writer_filled_the_secret_then_keeps_it(applied: Applied, cluster_: Cluster) -> None:
    assert applied.handlers["Custom::RayAuthToken"] == "written"
    config = _app().config
    secret = cluster_.get("secret", config.ray_auth_secret_name, "-n", config.namespace)
    token = base64.b64decode(secret["data"]["auth_token"]).decode()
    assert len(token) >= 32, "the token written is too short"
    properties = variants.handler_properties(_app(), "Custom::RayAuthToken")
    assert handlers.write_token(cluster_, properties) == "kept"


def test_recreate_on_a_first_deploy_finds_nothing_to_delete(applied: Applied) -> None:
    assert applied.handlers["Custom::RayServiceRecreate"] == "absent"


def test_readiness_reports_the_real_pending_state(cluster_: Cluster) -> None:
    """Serve cannot be reached here (no Ray runs in KWOK's pods): the readiness check must
    say pending, on the RayService stage, without an exception and without success."""
    steps = lambda_code.steps()
    properties = handlers.local_properties(
        cluster_, variants.handler_properties(_app(), "Custom::RayServiceReadiness")
    )
    props = lambda_code.properties().Props.from_properties(properties)
    api = handlers.client(cluster_, "readiness")
    wait_until(
        "the operator to create the RayCluster",
        lambda: cluster_.items("rayclusters.ray.io", "-n", props.namespace),
    )
    outcome = steps.check(props, api, now=time.time(), started=time.time())
    assert not outcome.complete, outcome
    assert outcome.pending_check == "rayservice", outcome
    assert "Ready" in outcome.status or "status" in outcome.status.lower(), outcome.status


def test_status_prints_the_real_objects(
    cluster_: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_aws_env: None
) -> None:
    """`status` as a person in adminPrincipalArns runs it (AmazonEKSClusterAdminPolicy, bound
    to cluster-admin here), against the real objects: the real node names, the RayService and
    the pods the operator made."""
    cluster_.kubectl(
        "create",
        "clusterrolebinding",
        "eks-cluster-admin-policy",
        "--clusterrole",
        "cluster-admin",
        "--user",
        tokens()["admin-cli"].user,
        check=False,
    )
    kube = lambda_code.kube()
    monkeypatch.setattr(kube, "eks_token", lambda *a, **k: tokens()["admin-cli"].token)

    class Server:
        url = cluster_.url
        ca_data = base64.b64encode(cluster_.ca_pem).decode()

    harness = cli_harness(Server(), tmp_path)  # type: ignore[arg-type]
    harness.session.stub("cloudwatch").add_response(
        "describe_alarms", {"MetricAlarms": [], "CompositeAlarms": []}
    )
    result = harness.run("status")
    assert result.code in (0, 1), (result.out, result.err)
    config = _app().config
    for node in cluster_.items("nodes", "-l", "role=gpu-worker"):
        assert node["metadata"]["name"] in result.out, result.out
    assert config.ray_service_name in result.out, result.out
    head = pods(cluster_, config.namespace, "ray.io/node-type=head")
    assert head and head[0]["metadata"]["name"] in result.out, result.out


def test_recreate_deletes_through_the_real_garbage_collector(
    cluster_: Cluster, deployer: Deployer
) -> None:
    """A changed Ray cluster spec: the recreate deletes the RayService (Foreground), the real
    garbage collector removes its RayCluster and pods, and the recreate then says "absent";
    the manifest re-creates the RayService and the recreate says "unchanged"."""
    config = _app().config
    wait_until(
        "the Ray pods",
        lambda: pods(cluster_, config.namespace, "ray.io/node-type"),
    )
    properties = variants.handler_properties(_app(), "Custom::RayServiceRecreate")
    changed = {**properties, "ClusterSpecHash": "0000000000000000"}
    assert handlers.recreate_until_done(cluster_, changed, timeout_s=120) == "absent"
    assert not cluster_.items("rayclusters.ray.io", "-n", config.namespace)
    assert not pods(cluster_, config.namespace, "ray.io/node-type")
    (step,) = [
        s for s in variants.steps(_app()) if any(o["kind"] == "RayService" for o in s.objects)
    ]
    cluster_.apply(step.objects, manager="cdk-kubectl-provider")
    assert handlers.recreate_until_done(cluster_, properties) == "unchanged"
