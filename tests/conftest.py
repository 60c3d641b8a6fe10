"""Session fixtures: the app is synthesized once per test session (with cdk-nag)."""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.client
import pytest

from ray_pd_eks import lambda_code
from tests import cfn_lint_pool
from tests.synth import ROOT, Synthesized, synth

# Every handler imports the shared layer (pd_lambda) as it does in the Lambda: the tests that
# load a handler by its path find it on sys.path like the Lambda finds /opt/python.
lambda_code.use_shared_layer()

S3_URI = "s3://example-models/qwen/Qwen3.5-9B/"
RESERVATION = "cr-0123456789abcdef0"
TOKEN_SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-token"
CERTIFICATE = "arn:aws:acm:us-west-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
IDP_ISSUER = "https://login.example.com/realms/apps"
IDP_JWKS = f"{IDP_ISSUER}/protocol/openid-connect/certs"
ALARM_EMAIL = "oncall@example.com"

# jsii runs Node.js; use the supported one that `npm ci` installs next to the CDK CLI.
_NODE_BIN = ROOT / "node_modules" / ".bin"
if _NODE_BIN.is_dir() and str(_NODE_BIN) not in os.environ.get("PATH", ""):
    os.environ["PATH"] = f"{_NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


# The cyclic garbage collector, tuned for a suite that keeps large object graphs alive: every
# full collection walks all live objects (over half a million once the session apps exist), and
# with Python's default thresholds (700, 10, 10) the suite ran about 25 of them, 7 s of CPU. A
# first generation of 10,000 lets the short-lived objects of a test die young instead of being
# promoted, and the session apps are frozen once built (`_linted`): full collections then skip
# them. Nothing here is freed later than the end of the session.
gc.set_threshold(10_000, 10, 10)

_make_client_class = botocore.client.ClientCreator._create_client_class
_client_classes: dict[tuple[int, str, str], tuple[object, type]] = {}


def _shared_client_class(creator: Any, service_name: str, service_model: Any) -> type:
    """botocore generates a client class (a method per operation) for every client it creates:
    60 ms for EC2, most of a stubbed-client test's time. The class depends only on the model and
    on the session's ``creating-client-class`` handlers, so the clients of one session (one
    event emitter, kept alive here so its id is not reused) share it in the tests."""
    emitter = creator._event_emitter
    key = (id(emitter), service_name, service_model.api_version)
    cached = _client_classes.get(key)
    if cached is None or cached[0] is not emitter:
        made = _make_client_class(creator, service_name, service_model)
        cached = _client_classes[key] = (emitter, made)
    return cached[1]


botocore.client.ClientCreator._create_client_class = _shared_client_class


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cfn_lint: collects a background cfn-lint result; runs after the other tests"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The cfn-lint tests go last, so the worker lints while the other tests run; the session
    fixtures start it only on the (app, stack) pairs these tests ask for."""
    linted = [item for item in items if item.get_closest_marker("cfn_lint")]
    for item in linted:
        params = getattr(item, "callspec", None)
        if params is not None and "app_name" in params.params:
            cfn_lint_pool.want([(params.params["app_name"], params.params["stack"])])
    items[:] = [item for item in items if not item.get_closest_marker("cfn_lint")] + linted


def pytest_sessionfinish() -> None:
    cfn_lint_pool.shutdown()


def _linted(app_name: str, app: Synthesized) -> Synthesized:
    cfn_lint_pool.submit(app_name, app.templates)
    gc.freeze()  # the app lives until the session ends: no full collection walks it again
    return app


@pytest.fixture(scope="session")
def default_app() -> Synthesized:
    """The app with cdk.json's defaults, as `cdk synth` builds it."""
    return _linted("default_app", synth())


@pytest.fixture(scope="session")
def variant_app() -> Synthesized:
    """Every non-default branch at once: explicit env, public endpoint, admins, UCX, 3 nodes
    scaling to 4 with decode autoscaling (the Cluster Autoscaler and KubeRay's autoscaler) and
    one warm spare GPU node,
    images and caches on the root volume, weights staged from S3, a capacity reservation in an
    existing placement group, an internal HTTPS endpoint whose tokens come from the stack's
    own Cognito pool, and no observability (the account brings its own)."""
    app = synth(
        {
            "account": "123456789012",
            "region": "us-west-2",
            "gpuAz": "us-west-2b",
            "endpointPublicCidrs": ["203.0.113.7/32"],
            "adminPrincipalArns": ["arn:aws:iam::123456789012:role/Admin"],
            "kvBackend": "UCX",
            "gpuNodeCount": 3,
            "decodeReplicas": 2,
            # Decode follows the load (2..3 replicas) on a GPU node group of 3..4 nodes.
            "decodeMaxReplicas": 3,
            "gpuNodeMaxCount": 4,
            # One warm spare GPU node (2 decode + 1 prefill + 1 spare = gpuNodeMaxCount).
            "gpuWarmSpareNodes": 1,
            "kubernetesVersion": "1.35",
            "retainLogs": True,
            "logRetentionDays": 365,
            "gpuLocalStorage": "none",
            "gpuRootVolumeIops": 12000,
            "gpuRootVolumeThroughput": 750,
            "modelS3Uri": S3_URI,
            "gpuCapacityReservationId": RESERVATION,
            "gpuPlacementGroupName": "pd-cluster-pg",
            "gpuCapacityWaitMinutes": 5,
            "endpointExposure": "internal",
            "endpointCertificateArn": CERTIFICATE,
            "endpointAllowedCidrs": ["10.0.0.0/8", "192.168.10.0/24"],
            "observability": "none",
        }
    )
    return _linted("variant_app", app)


@pytest.fixture(scope="session")
def token_app() -> Synthesized:
    """A gated model: the Hugging Face token from Secrets Manager (a partial ARN), the GPU AZ
    pinned elsewhere than the default's choice with a capacity reservation without a placement
    group, served aggregated (the benchmark's baseline: no
    prefill/decode split, no KV transfer), an internet-facing endpoint open to everyone
    that validates tokens of an existing identity provider (environment-agnostic, so the
    certificate's region is checked by a CloudFormation rule), alarms mailed to an
    address with thresholds of their own, read from the GPU workers too (gpuNodeTelemetry),
    and no admins, deliberately (allowNoAdmins)."""
    app = synth(
        {
            "allowNoAdmins": True,
            "hfTokenSecretArn": TOKEN_SECRET,
            "gpuCapacityReservationId": RESERVATION,
            "gpuAz": "us-west-2c",
            "servingMode": "aggregated",
            "endpointExposure": "internet-facing",
            "endpointCertificateArn": CERTIFICATE,
            "endpointAllowedCidrs": ["0.0.0.0/0"],
            "endpointDomainName": "llm.example.com",
            "endpointJwtIssuer": IDP_ISSUER,
            "endpointJwksUri": IDP_JWKS,
            "endpointJwtAudience": "ray-llm",
            "endpointJwtScope": "llm.invoke",
            "endpointIdleTimeoutSeconds": 4000,
            "alarmEmail": ALARM_EMAIL,
            # The CloudWatch agent on the GPU nodes too: every alarm, the GPU workers' included.
            "gpuNodeTelemetry": True,
            "alarmTtftP95Seconds": 1.5,
            "alarmKvCachePercent": 95,
        }
    )
    return _linted("token_app", app)


@pytest.fixture(scope="session")
def public_cognito_app() -> Synthesized:
    """An internet-facing endpoint whose tokens come from the stack's own Cognito pool, with
    cdk.json's defaults otherwise: the one configuration in which the deploy's endpoint probe
    reaches the ALB through the NAT gateway (the ALB admits its Elastic IP), so the connections
    table's two-way tests (tests/test_flows.py) cover that row too. Deployed under a
    deploymentName, beside the default deployment in the same account."""
    app = synth(
        {
            "deploymentName": "team-a",
            "endpointExposure": "internet-facing",
            "endpointCertificateArn": CERTIFICATE,
            "endpointAllowedCidrs": ["203.0.113.0/24"],
        }
    )
    return _linted("public_cognito_app", app)


_CDK_JSON = (ROOT / "cdk.json").read_bytes()


@pytest.fixture
def app(request: pytest.FixtureRequest) -> Synthesized:
    """The session app a test over several names, one at a time:
    ``@pytest.mark.parametrize("app", ("default_app", "token_app"), indirect=True)``."""
    named: Synthesized = request.getfixturevalue(request.param)
    return named


@pytest.fixture(scope="session")
def _bare_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("project")
    (project / "cdk.json").write_bytes(_CDK_JSON)
    return project


@pytest.fixture(autouse=True)
def _no_user_settings(monkeypatch: pytest.MonkeyPatch, _bare_project: Path) -> Iterator[None]:
    """app.py reads the user's settings.local.json and ~/.cdk.json; tests must not. The project
    directory it reads becomes a copy holding only cdk.json, one for the session (a folder per
    test was 3,000 folders to make and remove); tests that need the files write their own
    project. A test that writes into this one fails, so the next test cannot read its file."""
    import app as app_module

    monkeypatch.setattr(app_module, "PROJECT_DIR", _bare_project)
    monkeypatch.setattr(app_module, "USER_HOME", None)
    yield
    left = sorted(p.name for p in _bare_project.iterdir())
    if left != ["cdk.json"] or (_bare_project / "cdk.json").read_bytes() != _CDK_JSON:
        shutil.rmtree(_bare_project)
        _bare_project.mkdir()
        (_bare_project / "cdk.json").write_bytes(_CDK_JSON)
        pytest.fail(f"the test changed the shared bare project folder (it held {left})")


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """Upstream schemas and chart values the tests validate against, kept in the repository
    (tests/schemas/README.md names source, version and licence). Missing is a failure."""
    path = ROOT / "tests" / "schemas"
    for needed in (
        "kuberay-v1.7.0/ray.io_rayservices.yaml",
        "kuberay-v1.7.0/kuberay-operator-values.yaml",
        "charts/aws-efa-k8s-device-plugin-values.v0.5.30.yaml",
        "charts/nvidia-device-plugin-values.v0.20.0.yaml",
    ):
        assert (path / needed).is_file(), f"{path / needed} is missing from the repository"
    return path
