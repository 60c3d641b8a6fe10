"""pytest fixtures for the fakes (the Kubernetes API, the application endpoint). Load them as
a plugin in the test module:

    pytest_plugins = ["tests.fakes.fixtures"]

(rather than ``from ... import kube_api``, which ruff flags as redefined by every test parameter
of that name, and which imports this module before pytest can register it). Kept out of
``conftest.py`` so several engineers' fixtures cannot collide there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest

from ray_pd_eks import lambda_code
from tests.fakes.endpoint_api import FakeEndpoint
from tests.fakes.kube_api import CLUSTER_NAME, FAKE_ACCESS_KEY_ID, FAKE_REGION, FakeKubeApi

__all__ = [
    "FAKE_ACCESS_KEY_ID",
    "FAKE_REGION",
    "alb",
    "eks_token",
    "fake_aws_env",
    "kube_api",
    "probe_env",
]


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    """A started fake API server with empty state; call ``set_stage`` or set attributes."""
    server = FakeKubeApi().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def alb() -> Iterator[FakeEndpoint]:
    """A started fake of the model's load balancer and its token endpoint (TLS on loopback)."""
    server = FakeEndpoint().start()
    yield server  # pytest runs the rest at teardown, whatever the test did
    server.close()


@pytest.fixture(scope="module")
def eks_token() -> str:
    """A real EKS token for the fake's cluster, signed offline with the fake's access key (as
    the fake API server demands): signing is not free, so one per test module."""
    session = botocore.session.Session()
    session.set_credentials(FAKE_ACCESS_KEY_ID, "secret/for/tests/only")
    return str(lambda_code.kube().eks_token(CLUSTER_NAME, session=session, region=FAKE_REGION))


@pytest.fixture
def probe_env(kube_api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The scheduled KV probe's environment (the readiness handler's ``scheduled_probe``)
    pointing at ``kube_api``, without sleeps; returns the metric lines it prints, parsed."""
    handler, kube = lambda_code.handler(), lambda_code.kube()
    monkeypatch.setenv("PROBE_PROPERTIES", json.dumps(kube_api.props()))
    monkeypatch.setattr(lambda_code.kv_probe(), "counter_sleep", lambda _: None)
    monkeypatch.setattr(
        handler,
        "client_factory",
        lambda props: kube.KubeClient(
            props.endpoint, props.ca_data, lambda: "k8s-aws-v1.t", sleep=lambda _: None
        ),
    )
    lines: list[dict[str, Any]] = []
    emit = handler.emit_metrics
    monkeypatch.setattr(
        handler,
        "emit_metrics",
        lambda props, outcome: emit(props, outcome, out=lambda t: lines.append(json.loads(t))),
    )
    return lines


@pytest.fixture
def fake_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fake static AWS credentials and a region, isolated from the developer's own config, so
    botocore can presign the EKS token offline and deterministically."""
    empty = tmp_path_factory.mktemp("aws") / "none"
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_DEFAULT_REGION", FAKE_REGION)
    monkeypatch.setenv("AWS_REGION", FAKE_REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
