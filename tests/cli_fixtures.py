"""Shared helpers for the CLI tests: a cdk.json, a stubbed AWS session, a fake clock.

Everything the tool does outside the process goes through ``Runtime``; these helpers build one
that records output, never sleeps and answers AWS calls from botocore ``Stubber`` queues (an
unexpected AWS call fails the test with ``UnStubbedResponseError``).
"""

from __future__ import annotations

import functools
import io
import json
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from botocore.stub import Stubber

from ray_pd_eks.cli.app import Runtime
from ray_pd_eks.cli.main import main
from tests.fakes.kube_api import FakeKubeApi

REGION = "us-west-2"
ACCOUNT = "111122223333"
USER_ARN = f"arn:aws:iam::{ACCOUNT}:user/alice"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/Admin"


SSO_ROLE = "AWSReservedSSO_AdministratorAccess_0123456789abcdef"
SSO_PATH = "/aws-reserved/sso.amazonaws.com/eu-west-1/"
# An IAM Identity Center role as IAM names it (user guide, "Referencing permission sets"):
# the path, with the Identity Center region, is not in the session ARN STS returns.
SSO_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role{SSO_PATH}{SSO_ROLE}"
SSO_SESSION_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/{SSO_ROLE}/alice@example.com"


def stub_get_role(session: Any, name: str, path: str = "/") -> None:
    """IAM's answer to GetRole for ``name`` with ``path``."""
    session.stub("iam").add_response(
        "get_role",
        {
            "Role": {
                "Path": path,
                "RoleName": name,
                "RoleId": "AROAEXAMPLEEXAMPLE01",
                "Arn": f"arn:aws:iam::{ACCOUNT}:role{path}{name}",
                "CreateDate": "2026-01-01T00:00:00Z",
            }
        },
        {"RoleName": name},
    )


def write_cdk_json(directory: Path, **context: Any) -> Path:
    """A cdk.json whose context holds only ``context`` (the config's defaults fill the rest)."""
    path = directory / "cdk.json"
    path.write_text(json.dumps({"app": "python app.py", "context": context}), encoding="utf-8")
    return path


@functools.cache
def _shared_botocore() -> Any:
    """One botocore session for all tests: its loader caches the service models, which
    otherwise take most of each test's time to load. Credentials are set per boto3 session."""
    return botocore.session.get_session()


# Clients by (service, region), handed from one test to the next: creating a botocore client
# costs about 5 ms of CPU (its event handlers are copied, its endpoint resolver and config
# built), and the CLI tests need over a thousand. A client keeps nothing of a test but its
# Stubber (the Stubber answers before any request is made), so a session in a later test
# deactivates the last one and activates its own. The owner is pytest's current test: two
# sessions of one test never share a client, and outside pytest nothing is shared.
_POOL: dict[tuple[str, str], tuple[str, Any, Stubber]] = {}


def _current_test() -> str:
    """The running test's node id (PYTEST_CURRENT_TEST less its " (setup)" or " (call)")."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]


class StubbedSession:
    """Stands in for ``boto3.Session``: real clients (so presigning works) with Stubbers."""

    def __init__(self, region: str | None = REGION, *, credentials: bool = True) -> None:
        self._session = boto3.Session(
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret/for/tests/only",
            region_name=region or REGION,
            botocore_session=_shared_botocore(),
        )
        self.region_name = region
        self._has_credentials = credentials
        self.clients: dict[str, Any] = {}
        self.stubbers: dict[str, Stubber] = {}

    def stub(self, service: str) -> Stubber:
        if service not in self.stubbers:
            key = (service, self.region_name or REGION)
            owner = _current_test()
            pooled = _POOL.get(key)
            if owner and pooled is not None and pooled[0] != owner:
                client = pooled[1]
                pooled[2].deactivate()
            else:
                client = self._session.client(service, region_name=key[1])
            stubber = Stubber(client)
            stubber.activate()
            if owner and (pooled is None or pooled[0] != owner):
                _POOL[key] = (owner, client, stubber)
            self.clients[service] = client
            self.stubbers[service] = stubber
        return self.stubbers[service]

    def client(self, service: str, region_name: str | None = None) -> Any:
        self.stub(service)
        return self.clients[service]

    def get_credentials(self) -> Any:
        return self._session.get_credentials() if self._has_credentials else None

    def assert_no_pending_responses(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()


class FakeClock:
    """``clock`` and ``sleep`` for Runtime: sleeping advances time instantly.

    ``on_sleep`` holds callables run one per sleep, in order: how a test changes the cluster
    between two polls of ``status --watch``.
    """

    def __init__(self) -> None:
        self.now = 1000.0
        self.tick = 0.0  # seconds each reading advances the clock: time that work takes
        self.sleeps: list[float] = []
        self.on_sleep: list[Callable[[], None]] = []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        # Only a poll interval triggers a change; the Kubernetes client's retry backoff
        # (1-2 s) sleeps through the same clock and must not consume one.
        if self.on_sleep and seconds >= 5:
            self.on_sleep.pop(0)()


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class Harness:
    """Runs ``main`` with a stubbed session, a fake clock and captured output."""

    cdk_json: Path
    session: StubbedSession = field(default_factory=StubbedSession)
    clock: FakeClock = field(default_factory=FakeClock)
    processes: list[tuple[list[str], dict[str, str] | None]] = field(default_factory=list)
    kubectl: str | None = "/usr/local/bin/kubectl"
    process_exit: int = 0
    profiles: list[str | None] = field(default_factory=list)
    # HTTPS to loopback test servers, and the environment the tool sees (empty: never the
    # developer's own variables).
    ssl_context: Callable[[], ssl.SSLContext] = ssl.create_default_context
    env: dict[str, str] = field(default_factory=dict)

    def runtime(self) -> tuple[Runtime, io.StringIO, io.StringIO]:
        out, err = io.StringIO(), io.StringIO()

        def session_factory(profile: str | None) -> Any:
            self.profiles.append(profile)
            return self.session

        def run_process(argv: Sequence[str], env: Mapping[str, str] | None) -> int:
            self.processes.append((list(argv), dict(env) if env is not None else None))
            return self.process_exit

        runtime = Runtime(
            stdout=out,
            stderr=err,
            session_factory=session_factory,
            clock=self.clock,
            sleep=self.clock.sleep,
            which=lambda name: self.kubectl if name == "kubectl" else None,
            run_process=run_process,
            ssl_context=self.ssl_context,
            getenv=self.env.get,
        )
        return runtime, out, err

    def run(self, *argv: str) -> Run:
        runtime, out, err = self.runtime()
        code = main(["--cdk-json", str(self.cdk_json), *argv], runtime)
        return Run(code, out.getvalue(), err.getvalue())

    def succeeds(self, *argv: str) -> str:
        """Runs the command, which must exit 0: what it wrote to stdout."""
        result = self.run(*argv)
        assert result.code == 0, result.out + result.err
        return result.out

    def fails(self, *argv: str, code: int = 1) -> str:
        """Runs the command, which must exit ``code``: what it wrote to stderr."""
        result = self.run(*argv)
        assert result.code == code, result.out + result.err
        return result.err


def stub_cluster(
    session: StubbedSession,
    endpoint: str,
    ca_data: str,
    *,
    arn: str = USER_ARN,
    cluster_name: str = "ray-llm-multinode",
    public: bool = True,
) -> None:
    """Queue the two AWS calls every Kubernetes command makes first."""
    session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": arn}
    )
    session.stub("eks").add_response(
        "describe_cluster",
        {
            "cluster": {
                "name": cluster_name,
                "status": "ACTIVE",
                "endpoint": endpoint,
                "certificateAuthority": {"data": ca_data},
                "resourcesVpcConfig": {
                    "endpointPublicAccess": public,
                    "endpointPrivateAccess": True,
                    "publicAccessCidrs": ["203.0.113.7/32"] if public else [],
                },
            }
        },
        {"name": cluster_name},
    )


def cli_harness(kube_api: FakeKubeApi, tmp_path: Path) -> Harness:
    """A Harness whose cluster is the fake API server, described by EKS as ACTIVE."""
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_cluster(harness.session, kube_api.url, kube_api.ca_data)
    return harness
