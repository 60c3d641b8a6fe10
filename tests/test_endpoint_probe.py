"""The endpoint probe's handler against the fake token endpoint and ALB (a real TLS server on
loopback): the happy path with a Cognito token, 401, 5xx until the wait runs out, a 500 at
once, no token with endpointAuth=none, a rollback and a Delete answered at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pd_constructs.readiness.endpoint_probe import (
    SKIPPED_EXTERNAL_IDP,
    SKIPPED_NO_ENDPOINT,
    probe_skip_reason,
)
from ray_pd_eks.config import DEFAULTS
from tests.conftest import CERTIFICATE, IDP_ISSUER, IDP_JWKS
from tests.fakes.endpoint_api import CLIENT_ID, CLIENT_SECRET, SCOPE, FakeEndpoint
from tests.lambda_handlers import load, stack_status_client
from tests.synth import Synthesized

pytest_plugins = ["tests.fakes.fixtures"]  # alb

POOL_ID = "us-west-2_AbCdEf123"


probe_handler = load("endpoint_probe", "endpoint_probe_handler")


class FakeCognito:
    def __init__(self, secret: str = CLIENT_SECRET) -> None:
        self.secret = secret
        self.calls: list[dict[str, str]] = []

    def describe_user_pool_client(self, **kwargs: str) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"UserPoolClient": {"ClientId": kwargs["ClientId"], "ClientSecret": self.secret}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def props(alb: FakeEndpoint, **overrides: Any) -> Any:
    port = alb.url.rsplit(":", 1)[1]
    values = {
        "LoadBalancerDns": "127.0.0.1",
        "Host": "localhost",
        "Port": port,
        "ModelId": "qwen3.5-9b",
        "TokenUrl": f"{alb.url}/oauth2/token",
        "UserPoolId": POOL_ID,
        "ClientId": CLIENT_ID,
        "Scope": SCOPE,
        "WaitSeconds": "60",
        **overrides,
    }
    return probe_handler.Props.from_properties(values)


def run(alb: FakeEndpoint, clock: Clock | None = None, **overrides: Any) -> str:
    clock = clock or Clock()
    result: str = probe_handler.probe(
        props(alb, **overrides),
        cognito=FakeCognito(),
        context=FakeEndpoint.client_context(),
        sleep=clock.sleep,
        clock=clock,
    )
    return result


def test_one_chat_completion_with_a_cognito_token(alb: FakeEndpoint) -> None:
    cognito = FakeCognito()
    summary = probe_handler.probe(
        props(alb), cognito=cognito, context=FakeEndpoint.client_context(), sleep=Clock().sleep
    )
    assert cognito.calls == [{"UserPoolId": POOL_ID, "ClientId": CLIENT_ID}]
    token, chat = alb.requests
    assert token.path == "/oauth2/token" and b"grant_type=client_credentials" in token.body
    assert chat.method == "POST" and chat.path == "/v1/chat/completions"
    assert chat.headers["authorization"] == f"Bearer {alb.issued[0]}"
    assert chat.headers["host"] == "localhost"
    assert '"model": "qwen3.5-9b"' in chat.body.decode()
    assert summary.startswith("chat completion through https://localhost/v1/chat/completions")
    assert f"Cognito access token (client credentials, scope {SCOPE})" in summary
    assert CLIENT_SECRET not in summary


def test_without_a_domain_name_only_the_chain_is_checked(alb: FakeEndpoint) -> None:
    # The fake's certificate names 127.0.0.1/localhost; the ALB's DNS name would not match.
    alb_with_other_name = FakeEndpoint(auth="none", cert_names=("llm.example.com",)).start()
    no_token: dict[str, Any] = {"UserPoolId": "", "ClientId": "", "TokenUrl": "", "Scope": ""}
    try:
        summary = run(alb_with_other_name, Host="", **no_token)
        assert ": 200 in" in summary
        with pytest.raises(probe_handler.ProbeFailed, match="CERTIFICATE_VERIFY_FAILED"):
            run(alb_with_other_name, Host="localhost", WaitSeconds="5", **no_token)
    finally:
        alb_with_other_name.close()


def test_a_refused_token_fails_at_once_naming_jwks_and_claims(alb: FakeEndpoint) -> None:
    alb.auth = "jwt"
    alb.issued.append("ignored")
    clock = Clock()
    # A token the ALB does not accept: the fake issues one, then forgets it.
    original = alb.token

    def forget(headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        status, answer = original(headers, body)
        alb.issued.clear()
        return status, answer

    alb.token = forget  # type: ignore[method-assign]
    with pytest.raises(probe_handler.ProbeFailed) as failed:
        run(alb, clock)
    message = str(failed.value)
    assert message.startswith("401 from https://127.0.0.1")
    assert "JWKS" in message and "scope/audience" in message and SCOPE in message
    assert clock.sleeps == []


def test_a_wrong_client_secret_names_the_token_endpoint(alb: FakeEndpoint) -> None:
    with pytest.raises(probe_handler.ProbeFailed, match=r"token endpoint .* answered 401"):
        probe_handler.probe(
            props(alb),
            cognito=FakeCognito("wrong"),
            context=FakeEndpoint.client_context(),
            sleep=Clock().sleep,
        )


def test_no_healthy_target_is_retried_then_fails_naming_target_health(
    alb: FakeEndpoint,
) -> None:
    alb.status_override = 503
    clock = Clock()
    with pytest.raises(probe_handler.ProbeFailed) as failed:
        run(alb, clock, WaitSeconds="60")
    message = str(failed.value)
    assert "still answered 503" in message and "describe-target-health" in message
    # Tried at 0, 10, ..., 60 s: every 10 s while the next try still falls within the 60 s.
    assert clock.sleeps == [10.0] * 6


def test_a_target_that_becomes_healthy_passes(alb: FakeEndpoint) -> None:
    alb.status_override = 502
    clock = Clock()

    def heal(seconds: float) -> None:
        Clock.sleep(clock, seconds)
        alb.status_override = None

    summary = probe_handler.probe(
        props(alb),
        cognito=FakeCognito(),
        context=FakeEndpoint.client_context(),
        sleep=heal,
        clock=clock,
    )
    assert "after 2 attempts" in summary


def test_a_server_error_fails_at_once(alb: FakeEndpoint) -> None:
    alb.status_override = 500
    clock = Clock()
    with pytest.raises(probe_handler.ProbeFailed, match="answered 500"):
        run(alb, clock)
    assert clock.sleeps == []


def test_without_auth_no_token_is_asked_for_or_sent(alb: FakeEndpoint) -> None:
    alb.auth = "none"
    summary = run(alb, UserPoolId="", ClientId="", TokenUrl="", Scope="")
    (chat,) = alb.requests
    assert "authorization" not in chat.headers
    assert "without a token (endpointAuth=none)" in summary


def test_delete_and_rollback_answer_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: Any, **__: Any) -> str:
        raise AssertionError("probed")

    monkeypatch.setattr(probe_handler, "probe", never)
    assert probe_handler.on_event(
        {"RequestType": "Delete", "PhysicalResourceId": "endpoint-probe"}, None
    ) == {"PhysicalResourceId": "endpoint-probe"}
    stack_status_client(monkeypatch, probe_handler.rollback, "UPDATE_ROLLBACK_IN_PROGRESS")
    answer = probe_handler.on_event(
        {"RequestType": "Update", "PhysicalResourceId": "endpoint-probe", "StackId": "arn:s"},
        None,
    )
    assert answer["Data"]["EndpointProbe"].startswith("not probed")


# -- what the stacks hold ---------------------------------------------------------------------


def _probe(app: Synthesized) -> dict[str, Any]:
    return app.only("Readiness", "Custom::EndpointProbe")


def test_probe_runs_after_the_readiness_check_with_no_secret_in_the_template(
    variant_app: Synthesized,
) -> None:
    probe = _probe(variant_app)
    (check_id,) = variant_app.resources("Readiness", "Custom::RayServiceReadiness")
    assert check_id in probe["DependsOn"]
    props = probe["Properties"]
    assert set(props) >= {"LoadBalancerDns", "TokenUrl", "UserPoolId", "ClientId", "Scope"}
    assert props["Scope"] == variant_app.config.endpoint_scope
    assert props["WaitSeconds"] == "300"
    # The secret is read at run time (the workload stack's token command names the field).
    assert "ClientSecret" not in json.dumps(variant_app.templates["Readiness"])


def _statements(app: Synthesized, stack: str, prefix: str) -> list[dict[str, Any]]:
    policies = app.resources(stack, "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if k.startswith(prefix)]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_probe_may_read_only_its_pools_client(variant_app: Synthesized) -> None:
    (cognito,) = _statements(variant_app, "Workload", "ApplicationEndpointEndpointProbe")
    assert cognito["Action"] == "cognito-idp:DescribeUserPoolClient"
    (pool,) = variant_app.resources("Workload", "AWS::Cognito::UserPool")
    assert cognito["Resource"] == {"Fn::GetAtt": [pool, "Arn"]}
    (own,) = _statements(variant_app, "Cluster", "ProvidersEndpointProbeFunction")
    assert own["Action"] == "cloudformation:DescribeStacks"
    assert "RayPdEks-Readiness/*" in json.dumps(own["Resource"])


def test_internal_alb_admits_the_probes_security_group_on_443(variant_app: Synthesized) -> None:
    groups = variant_app.resources("Cluster", "AWS::EC2::SecurityGroup")
    (group_id,) = [k for k in groups if k.startswith("ProvidersEndpointProbeSecurityGroup")]
    assert variant_app.egress_rules("Cluster", group_id) == [
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "Cognito token endpoint and API (no prefix list), the ALB",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    rules = variant_app.resources("Workload", "AWS::EC2::SecurityGroupIngress")
    (p,) = [r["Properties"] for k, r in rules.items() if "EndpointProbe" in k]
    assert "Fn::ImportValue" in p["SourceSecurityGroupId"]  # the cluster stack's probe group
    (alb_group,) = [
        k for k in variant_app.resources("Workload", "AWS::EC2::SecurityGroup") if "Endpoint" in k
    ]
    assert p["GroupId"] == {"Fn::GetAtt": [alb_group, "GroupId"]}
    assert (p["FromPort"], p["ToPort"]) == (443, 443)


def test_an_external_identity_provider_skips_the_probe_and_says_why(
    token_app: Synthesized, default_app: Synthesized
) -> None:
    assert not token_app.resources("Readiness", "Custom::EndpointProbe")
    outputs = token_app.templates["Readiness"]["Outputs"]
    assert outputs["ReadinessEndpointProbe"]["Value"] == SKIPPED_EXTERNAL_IDP
    assert "endpointJwtIssuer" in SKIPPED_EXTERNAL_IDP
    default_outputs = default_app.templates["Readiness"]["Outputs"]
    assert default_outputs["ReadinessEndpointProbe"]["Value"] == SKIPPED_NO_ENDPOINT


def test_skip_reasons_per_configuration() -> None:
    base = {
        "endpointExposure": "internal",
        "endpointCertificateArn": CERTIFICATE,
        "endpointAllowedCidrs": ["10.0.0.0/8"],
    }
    assert probe_skip_reason(DEFAULTS.with_overrides(base)) == ""
    none = {**base, "endpointAuth": "none"}
    assert probe_skip_reason(DEFAULTS.with_overrides(none)) == ""
    idp = {
        **base,
        "endpointJwtIssuer": IDP_ISSUER,
        "endpointJwksUri": IDP_JWKS,
        "endpointJwtAudience": "a",
    }
    assert probe_skip_reason(DEFAULTS.with_overrides(idp)) == SKIPPED_EXTERNAL_IDP
    assert probe_skip_reason(DEFAULTS) == SKIPPED_NO_ENDPOINT


def test_internet_facing_alb_admits_only_the_nat_gateways_address(
    public_cognito_app: Synthesized,
) -> None:
    """The probe leaves through the NAT gateway, so an internet-facing ALB admits its Elastic
    IP as a /32, on 443, on the ALB's own group: the one address rule besides the ALB's own
    endpointAllowedCidrs (inline on its group)."""
    workload = public_cognito_app.templates["Workload"]["Resources"]
    ingress = [
        r["Properties"]
        for r in workload.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and "CidrIp" in r["Properties"]
    ]
    (eip_id,) = public_cognito_app.resources("Cluster", "AWS::EC2::EIP")
    (rule,) = ingress
    (address, suffix) = rule["CidrIp"]["Fn::Join"][1]
    assert suffix == "/32"
    exports = {
        o["Export"]["Name"]: o["Value"]
        for o in public_cognito_app.templates["Cluster"]["Outputs"].values()
        if "Export" in o
    }
    assert exports[address["Fn::ImportValue"]] == {"Ref": eip_id}
    assert rule["Description"] == "HTTPS from the NAT gateway (the deploy's endpoint probe)"
    assert (rule["IpProtocol"], rule["ToPort"]) == ("tcp", 443)
    assert "SourceSecurityGroupId" not in rule
    group_id, attribute = rule["GroupId"]["Fn::GetAtt"]
    assert attribute == "GroupId"
    assert workload[group_id]["Properties"]["GroupDescription"].startswith(
        "internet-facing ALB of the model endpoint"
    )


def test_the_nat_gateways_address_is_its_elastic_ip(variant_app: Synthesized) -> None:
    egress = variant_app.stage.cluster.egress
    (eip_id,) = variant_app.resources("Cluster", "AWS::EC2::EIP")
    assert variant_app.stage.cluster.resolve(egress.public_ip) == {"Ref": eip_id}
