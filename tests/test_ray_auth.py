"""Ray token authentication end to end against the loopback API server: the token writer fills
the Secret once, the readiness check and the CLI read it (RBAC `get` on one Secret) and send it
to the dashboard, and a missing or wrong token is reported as such, never as "not running".

The fake dashboard (tests/fakes/kube_api.py) answers like Ray 2.58's token middleware behind
the API server's proxy: 401 "Missing authentication token" without ``X-Ray-Authorization``,
403 "Invalid authentication token" with a wrong one.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.cli_fixtures import Harness, cli_harness
from tests.fakes import kube_api as fake
from tests.fakes.kube_api import RAY_TOKEN, RAY_TOKEN_SECRET, FakeKubeApi, make_secret
from tests.lambda_handlers import load

pytest_plugins = ["tests.fakes.fixtures"]  # kube_api (a started fake server), fake_aws_env

HEAD_PROXY = f"/services/{fake.RAYSERVICE}-head-svc:8265/proxy/"
SERVE_PROXY = f"/services/{fake.RAYSERVICE}-serve-svc:8000/proxy/"


handler = load("readiness", "readiness_handler")
kube = lambda_code.kube()
properties = lambda_code.properties()
ray_token = lambda_code.ray_token()


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch, eks_token: str) -> None:
    """Both handlers talk to the fake with a real EKS-style token and no real sleeps."""

    def readiness_client(props: Any) -> Any:
        return kube.KubeClient(
            props.endpoint, props.ca_data, lambda: eks_token, sleep=lambda s: None
        )

    def writer_client(properties: Any) -> Any:
        return kube.KubeClient(
            properties["ClusterEndpoint"],
            properties["ClusterCertificateAuthorityData"],
            lambda: eks_token,
            sleep=lambda s: None,
        )

    monkeypatch.setattr(handler, "client_factory", readiness_client)
    monkeypatch.setattr(ray_token, "client_factory", writer_client)


def _poll(server: FakeKubeApi, **props: Any) -> dict[str, Any]:
    event = {
        "RequestType": "Create",
        "ResourceProperties": server.props(**props),
        "StackId": "arn:aws:cloudformation:us-west-2:111111111111:stack/Readiness/1",
    }
    merged = {**event, **handler.on_event(event, None)}
    return dict(handler.is_complete(merged, None))


def _fail(server: FakeKubeApi, **props: Any) -> str:
    with pytest.raises(properties.ReadinessError) as info:
        _poll(server, **props)
    return str(info.value)


def _header(request: Any, name: str) -> str:
    return next((v for k, v in request.headers.items() if k.lower() == name.lower()), "")


def _logs(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


# -- the readiness check ----------------------------------------------------------------------


def test_readiness_sends_the_token_to_the_dashboard_only_and_never_logs_it(
    kube_api: FakeKubeApi, clients: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kube_api.set_stage("serving")
    result = _poll(kube_api)
    assert result["IsComplete"] is True
    dashboard = kube_api.requests_to(HEAD_PROXY)
    # Every dashboard request carries the token but the one that proves it is required: the
    # same read without it, which the dashboard must refuse (issue 23).
    without = [r for r in dashboard if not _header(r, "X-Ray-Authorization")]
    assert [r.path.rsplit("/proxy/", 1)[1] for r in without] == ["api/serve/applications/"]
    assert len(dashboard) > 1 and all(
        _header(r, "X-Ray-Authorization") == f"Bearer {RAY_TOKEN}"
        for r in dashboard
        if r not in without
    )
    # Read once per poll, with `get` on exactly that Secret.
    (secret_read,) = kube_api.requests_to("/secrets/")
    assert secret_read.method == "GET"
    assert secret_read.path == f"/api/v1/namespaces/inference/secrets/{RAY_TOKEN_SECRET}"
    # Serve takes no token in Ray 2.58, and the app never sees ours.
    serve = kube_api.requests_to(SERVE_PROXY)
    assert serve and not any(_header(r, "X-Ray-Authorization") for r in serve)
    assert RAY_TOKEN not in _logs(caplog) and RAY_TOKEN not in json.dumps(result)


def test_a_wrong_token_fails_the_check_as_a_token_problem(
    kube_api: FakeKubeApi, clients: None
) -> None:
    kube_api.set_stage("running")
    kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET, {"auth_token": "stale"})
    message = _fail(kube_api)
    assert "refused the Ray token from Secret inference/ray-llm-ray-token" in message
    assert "403: Forbidden: Invalid authentication token" in message
    assert "stale" not in message and RAY_TOKEN not in message
    assert "not RUNNING" not in message and "grant the caller" not in message


def test_a_missing_secret_fails_the_check_naming_the_secret(
    kube_api: FakeKubeApi, clients: None
) -> None:
    kube_api.set_stage("running")
    kube_api.secrets.clear()
    message = _fail(kube_api)
    assert "the Ray token Secret inference/ray-llm-ray-token does not exist" in message
    assert not kube_api.requests_to(HEAD_PROXY)  # no tokenless call was even tried


def test_a_secret_without_token_fails_the_check(kube_api: FakeKubeApi, clients: None) -> None:
    kube_api.set_stage("running")
    kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET)
    assert "has no usable 'auth_token' key" in _fail(kube_api)


def test_rbac_denial_on_the_secret_is_an_rbac_message(kube_api: FakeKubeApi, clients: None) -> None:
    kube_api.set_stage("running")
    kube_api.inject_fault(403, path_contains="/secrets/")
    message = _fail(kube_api)
    assert "403 Forbidden" in message and "RBAC" in message


def test_no_configured_token_against_an_authenticated_dashboard_says_so(
    kube_api: FakeKubeApi, clients: None
) -> None:
    kube_api.set_stage("running")
    message = _fail(kube_api, RayAuthSecret="")
    assert "requires a Ray token (401: Unauthorized: Missing authentication token)" in message
    assert not kube_api.requests_to("/secrets/")


def test_a_dashboard_without_authentication_still_works_without_a_token(
    kube_api: FakeKubeApi, clients: None
) -> None:
    """A rollback to a template from before token authentication sends no RayAuthSecret."""
    kube_api.set_stage("serving")
    kube_api.ray_token = None
    assert _poll(kube_api, RayAuthSecret="")["IsComplete"] is True
    assert not any(_header(r, "X-Ray-Authorization") for r in kube_api.requests_to(HEAD_PROXY))


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def cli(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    return cli_harness(kube_api, tmp_path)


def _stub_alarms(h: Harness) -> None:
    """CloudWatch's answer to the one DescribeAlarms a status run ends with."""
    h.session.stub("cloudwatch").add_response(
        "describe_alarms",
        {"MetricAlarms": [], "CompositeAlarms": []},
        {
            "AlarmNamePrefix": "ray-llm-multinode-ray-llm-",
            "StateValue": "ALARM",
            "AlarmTypes": ["MetricAlarm", "CompositeAlarm"],
        },
    )


def test_cli_status_sends_the_token(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    _stub_alarms(cli)
    result = cli.run("status")
    assert result.code == 0, result.out + result.err
    dashboard = kube_api.requests_to(HEAD_PROXY)
    assert dashboard and all(
        _header(r, "X-Ray-Authorization") == f"Bearer {RAY_TOKEN}" for r in dashboard
    )
    assert RAY_TOKEN not in result.out + result.err


def test_cli_status_reports_a_refused_token_not_a_missing_app(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    kube_api.ray_token = "the-pods-token"
    _stub_alarms(cli)
    result = cli.run("status")
    text = result.out + result.err
    assert "Ray token: the Ray dashboard (inference/ray-llm-head-svc:8265) refused" in text
    assert "the-pods-token" not in text and RAY_TOKEN not in text


def test_cli_efa_check_fails_with_access_exit_on_a_refused_token(
    kube_api: FakeKubeApi, cli: Harness
) -> None:
    kube_api.set_stage("serving")
    kube_api.ray_token = "the-pods-token"
    result = cli.run("efa-check")
    assert result.code == 3, result.out + result.err
    assert "Ray token:" in result.err and "403" in result.err


def test_cli_efa_check_reports_a_missing_secret(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    kube_api.secrets.clear()
    result = cli.run("efa-check")
    assert result.code == 3
    assert "the Ray token Secret inference/ray-llm-ray-token does not exist" in result.err


def test_cli_smoke_sends_no_ray_token_to_serve(kube_api: FakeKubeApi, cli: Harness) -> None:
    kube_api.set_stage("serving")
    result = cli.run("smoke")
    assert result.code == 0, result.out + result.err
    serve = kube_api.requests_to(SERVE_PROXY)
    assert serve and not any(_header(r, "X-Ray-Authorization") for r in serve)
    assert not kube_api.requests_to("/secrets/")


# -- the token writer ------------------------------------------------------------------------


def _writer_event(server: FakeKubeApi, request_type: str = "Create") -> dict[str, Any]:
    props = server.props()
    event: dict[str, Any] = {
        "RequestType": request_type,
        "ResourceProperties": {
            "ServiceToken": props["ServiceToken"],
            "ClusterName": props["ClusterName"],
            "ClusterEndpoint": props["ClusterEndpoint"],
            "ClusterCertificateAuthorityData": props["ClusterCertificateAuthorityData"],
            "Namespace": fake.NAMESPACE,
            "SecretName": RAY_TOKEN_SECRET,
        },
    }
    if request_type != "Create":
        event["PhysicalResourceId"] = f"{fake.CLUSTER_NAME}/inference/{RAY_TOKEN_SECRET}"
    return event


def _stored_token(server: FakeKubeApi) -> str:
    data = server.secrets[RAY_TOKEN_SECRET].get("data") or {}
    return base64.b64decode(data.get("auth_token", "")).decode() if data else ""


def test_writer_fills_an_empty_secret_once_and_never_logs_the_token(
    kube_api: FakeKubeApi, clients: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET)
    response = ray_token.on_event(_writer_event(kube_api), None)
    token = _stored_token(kube_api)
    assert len(base64.b64decode(token)) == 32  # base64 of 32 random bytes, like KubeRay's
    assert response == {
        "PhysicalResourceId": f"{fake.CLUSTER_NAME}/inference/{RAY_TOKEN_SECRET}",
        "Data": {"Token": "written"},
    }
    (patch,) = kube_api.requests_to("/secrets/", "PATCH")
    assert _header(patch, "Content-Type") == "application/merge-patch+json"
    assert json.loads(patch.body)["metadata"] == {"resourceVersion": "1001"}
    assert token not in _logs(caplog)
    # An Update (a redeploy, or CloudFormation rolling back) keeps it.
    again = ray_token.on_event(_writer_event(kube_api, "Update"), None)
    assert again["Data"] == {"Token": "kept"} and _stored_token(kube_api) == token
    assert len(kube_api.requests_to("/secrets/", "PATCH")) == 1


def test_writer_generates_a_new_token_each_time_it_writes(
    kube_api: FakeKubeApi, clients: None
) -> None:
    tokens = set()
    for _ in range(2):
        kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET)
        ray_token.on_event(_writer_event(kube_api), None)
        tokens.add(_stored_token(kube_api))
    assert len(tokens) == 2


def test_writer_keeps_a_token_written_meanwhile(
    kube_api: FakeKubeApi, clients: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conflicting write between our read and our patch: re-read, and keep theirs."""
    kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET)

    def racing_token() -> str:
        kube_api.secrets[RAY_TOKEN_SECRET] = {
            **make_secret(RAY_TOKEN_SECRET, {"auth_token": "theirs"}),
        }
        kube_api.secrets[RAY_TOKEN_SECRET]["metadata"]["resourceVersion"] = "1002"
        return "ours"

    monkeypatch.setattr(ray_token, "token_factory", racing_token)
    response = ray_token.on_event(_writer_event(kube_api), None)
    assert response["Data"] == {"Token": "kept"}
    assert _stored_token(kube_api) == "theirs"
    assert [r.method for r in kube_api.requests_to("/secrets/")] == ["GET", "PATCH", "GET"]


def test_writer_fails_when_the_secret_is_missing(kube_api: FakeKubeApi, clients: None) -> None:
    kube_api.secrets.clear()
    with pytest.raises(ray_token.RayTokenError) as failed:
        ray_token.on_event(_writer_event(kube_api), None)
    assert str(failed.value) == (
        "Ray token for ray-llm-multinode/inference/ray-llm-ray-token: "
        'Secret inference/ray-llm-ray-token does not exist (secrets "ray-llm-ray-token" not '
        "found); the workload stack creates it (without data) before this resource: check that "
        "this resource depends on it"
    )


def test_writer_reports_rbac_denial(kube_api: FakeKubeApi, clients: None) -> None:
    kube_api.secrets[RAY_TOKEN_SECRET] = make_secret(RAY_TOKEN_SECRET)
    kube_api.inject_fault(403, path_contains="/secrets/")
    with pytest.raises(ray_token.RayTokenError, match="403 Forbidden"):
        ray_token.on_event(_writer_event(kube_api), None)


def test_writer_delete_makes_no_call(kube_api: FakeKubeApi, clients: None) -> None:
    event = _writer_event(kube_api, "Delete")
    assert ray_token.on_event(event, None) == {"PhysicalResourceId": event["PhysicalResourceId"]}
    assert kube_api.requests == []


def test_writer_names_missing_properties(kube_api: FakeKubeApi, clients: None) -> None:
    event = _writer_event(kube_api)
    del event["ResourceProperties"]["SecretName"]
    with pytest.raises(ray_token.RayTokenError, match="missing SecretName"):
        ray_token.on_event(event, None)
