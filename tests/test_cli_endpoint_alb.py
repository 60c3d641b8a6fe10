"""The CLI and the application endpoint: ``endpoint`` prints the URL and the token flow from
the stack's outputs, ``smoke`` fetches a token from the stack's Cognito client and calls the
load balancer, ``preflight`` checks the certificate and the CIDRs. AWS answers come from
botocore Stubbers; the token endpoint and the ALB are a real TLS server on loopback."""

from __future__ import annotations

import base64
import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli_fixtures import ACCOUNT, REGION, USER_ARN, Harness, write_cdk_json
from tests.fakes.endpoint_api import CLIENT_ID, CLIENT_SECRET, SCOPE, FakeEndpoint
from tests.test_cli_preflight import lines_of, stub_all

pytest_plugins = ["tests.fakes.fixtures"]  # alb

CERT_ARN = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/0123abcd-0123-4567-89ab-0123456789ab"
POOL_ID = f"{REGION}_AbCdEf123"
STACK = "RayPdEks-Workload"
INTERNAL = {
    "region": REGION,
    "endpointExposure": "internal",
    "endpointCertificateArn": CERT_ARN,
    "endpointAllowedCidrs": ["10.0.0.0/8"],
    "endpointDomainName": "llm.example.com",
}
IDP = {
    **INTERNAL,
    "endpointJwtIssuer": "https://login.example.com/realms/apps",
    "endpointJwksUri": "https://login.example.com/realms/apps/certs",
    "endpointJwtAudience": "ray-llm",
}


def harness(tmp_path: Path, **context: Any) -> Harness:
    h = Harness(write_cdk_json(tmp_path, **context))
    h.ssl_context = FakeEndpoint.client_context
    return h


def cognito_outputs(url: str) -> dict[str, str]:
    """The workload stack's outputs as CloudFormation returns them for the Cognito variant."""
    return {
        "EndpointUrl": url,
        "EndpointAuth": "jwt",
        "EndpointJwtIssuer": f"https://cognito-idp.{REGION}.amazonaws.com/{POOL_ID}",
        "EndpointScope": SCOPE,
        "EndpointUserPoolId": POOL_ID,
        "EndpointClientId": CLIENT_ID,
        "EndpointTokenUrl": f"{url}/oauth2/token",
    }


def stub_stack(h: Harness, outputs: dict[str, str] | None, *, identity: bool = True) -> None:
    if identity:
        h.session.stub("sts").add_response(
            "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": USER_ARN}
        )
    cfn = h.session.stub("cloudformation")
    if outputs is None:
        cfn.add_client_error(
            "describe_stacks",
            "ValidationError",
            f"Stack with id {STACK} does not exist",
            http_status_code=400,
            expected_params={"StackName": STACK},
        )
        return
    cfn.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": STACK,
                    "CreationTime": datetime(2026, 11, 30, tzinfo=UTC),
                    "StackStatus": "CREATE_COMPLETE",
                    "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
                }
            ]
        },
        {"StackName": STACK},
    )


def stub_secret(h: Harness, secret: str = CLIENT_SECRET) -> None:
    h.session.stub("cognito-idp").add_response(
        "describe_user_pool_client",
        {
            "UserPoolClient": {
                "UserPoolId": POOL_ID,
                "ClientName": "Client",
                "ClientId": CLIENT_ID,
                "ClientSecret": secret,
            }
        },
        {"UserPoolId": POOL_ID, "ClientId": CLIENT_ID},
    )


# -- smoke through the load balancer ---------------------------------------------------------


def token_of(alb: Any) -> str:
    (token,) = alb.issued
    return str(token)


def test_smoke_gets_a_cognito_token_and_calls_the_alb(alb: FakeEndpoint, tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    stub_stack(h, cognito_outputs(alb.url))
    stub_secret(h)
    h.clock.tick = 0.05
    result = h.run("smoke", "--max-tokens", "16", "--prompt", "hi")
    assert result.code == 0, result.err
    assert f"via the application endpoint {alb.url} (internal load balancer, auth jwt)" in (
        result.out
    )
    assert "  models      qwen3.5-9b" in result.out
    assert "  answer      'Prefill and decode split.'" in result.out
    assert re.search(r"^  first token \d+\.\d\d s  \(measured on the stream\)$", result.out, re.M)
    assert "(3 tokens from usage.completion_tokens" in result.out
    assert result.out.rstrip().endswith("OK: the endpoint answers")
    # The token flow: basic auth with the client's credentials, client-credentials grant.
    token_call, models, chat, probe = alb.requests
    # Then the KV integrity probe, through the same endpoint with the same token.
    assert probe.headers["authorization"] == f"Bearer {token_of(alb)}"
    assert "access code exactly: " in json.loads(probe.body)["messages"][0]["content"]
    assert re.search(r"^  integrity   code [A-Z0-9]{8} returned ", result.out, re.M)
    assert (token_call.method, token_call.path) == ("POST", "/oauth2/token")
    basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    assert token_call.headers["authorization"] == f"Basic {basic}"
    assert token_call.body == b"grant_type=client_credentials&scope=ray-llm%2Finvoke"
    (token,) = alb.issued
    assert models.headers["authorization"] == f"Bearer {token}"
    assert chat.headers["authorization"] == f"Bearer {token}"
    assert json.loads(chat.body)["stream"] is True
    # Neither the secret nor the token is ever shown.
    for text in (result.out, result.err):
        assert CLIENT_SECRET not in text and token not in text
    h.session.assert_no_pending_responses()


def test_smoke_reports_a_rejected_token(alb: FakeEndpoint, tmp_path: Path) -> None:
    h = harness(tmp_path, **IDP)
    stub_stack(h, {"EndpointUrl": alb.url, "EndpointAuth": "jwt", "EndpointJwtIssuer": "x"})
    h.env["TOKEN"] = "eyJ.not-accepted.sig"
    err = h.fails("smoke")
    assert err.startswith("error: /v1/models: 401 from the load balancer: the token was")


def test_smoke_uses_token_from_the_environment_for_an_existing_idp(
    alb: FakeEndpoint, tmp_path: Path
) -> None:
    alb.accepted_tokens.add("eyJ.from-my-idp.sig")
    h = harness(tmp_path, **IDP)
    stub_stack(h, {"EndpointUrl": alb.url, "EndpointAuth": "jwt", "EndpointJwtIssuer": "x"})
    h.env["TOKEN"] = "eyJ.from-my-idp.sig"
    out = h.succeeds("smoke")
    assert "  token       from $TOKEN (issuer x)" in out
    assert "eyJ.from-my-idp.sig" not in out
    assert h.session.stubbers.get("cognito-idp") is None  # no Cognito call at all


def test_smoke_without_a_token_for_an_existing_idp_is_a_usage_error(
    alb: FakeEndpoint, tmp_path: Path
) -> None:
    h = harness(tmp_path, **IDP)
    stub_stack(
        h, {"EndpointUrl": alb.url, "EndpointAuth": "jwt", "EndpointJwtIssuer": "https://idp"}
    )
    err = h.fails("smoke", code=2)
    assert "get one from it and `export TOKEN=...`, or use --via-api-server" in err
    assert alb.requests == []


def test_smoke_without_auth_sends_no_authorization(alb: FakeEndpoint, tmp_path: Path) -> None:
    alb.auth = "none"
    h = harness(tmp_path, **{**INTERNAL, "endpointAuth": "none"})
    stub_stack(h, {"EndpointUrl": alb.url, "EndpointAuth": "none"})
    h.succeeds("smoke")
    assert all("authorization" not in r.headers for r in alb.requests)


def test_smoke_with_no_healthy_target_points_at_the_binding(
    alb: FakeEndpoint, tmp_path: Path
) -> None:
    alb.status_override = 503
    h = harness(tmp_path, **INTERNAL)
    stub_stack(h, cognito_outputs(alb.url))
    stub_secret(h)
    err = h.fails("smoke")
    assert "503: the load balancer has no healthy target" in err
    assert "kubectl get targetgroupbinding -A" in err


def test_token_endpoint_rejecting_the_client_is_exit_3(alb: FakeEndpoint, tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    stub_stack(h, cognito_outputs(alb.url))
    stub_secret(h, secret="rotated-elsewhere-0123456789abcdef")
    err = h.fails("smoke", code=3)
    assert f"the token endpoint {alb.url}/oauth2/token answered 401 invalid_client" in err
    assert "rotated-elsewhere-0123456789abcdef" not in err
    assert [r.path for r in alb.requests] == ["/oauth2/token"]


def test_a_missing_app_client_is_exit_3_with_the_fix(alb: FakeEndpoint, tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    stub_stack(h, cognito_outputs(alb.url))
    h.session.stub("cognito-idp").add_client_error(
        "describe_user_pool_client", "ResourceNotFoundException", "no client", 400
    )
    result = h.run("smoke")
    assert result.code == 3
    assert result.err == (
        f"error: app client {CLIENT_ID} of user pool {POOL_ID} not found: the stack {STACK} "
        "may be out of date; redeploy it\n"
    )
    assert alb.requests == []


def test_undeployed_stack_is_exit_3_with_the_fix(tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    stub_stack(h, None)
    err = h.fails("smoke", code=3)
    assert err == (
        f"error: stack {STACK} not found in {REGION}: deploy it (`npx cdk deploy "
        "'RayPdEks/*' --concurrency 4`) or name yours with --stack\n"
    )


def test_certificate_not_covering_the_host_is_explained(tmp_path: Path) -> None:
    # The ALB's URL without endpointDomainName is its DNS name, which the certificate (here:
    # for llm.example.com only) does not cover.
    fake = FakeEndpoint(auth="none", cert_names=("llm.example.com",)).start()
    try:
        h = harness(tmp_path, **{**INTERNAL, "endpointAuth": "none"})
        stub_stack(h, {"EndpointUrl": fake.url, "EndpointAuth": "none"})
        result = h.run("smoke")
    finally:
        fake.close()
    assert result.code == 3
    assert result.err.startswith("error: TLS to 127.0.0.1 failed: ")
    assert (
        "set `ray-pd-eks settings --set endpointDomainName=<a name the certificate covers>`"
        in result.err
    )
    assert fake.requests == []


def test_smoke_via_api_server_flag_skips_the_load_balancer(tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    h.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": USER_ARN}
    )
    h.session.stub("eks").add_client_error(
        "describe_cluster", "ResourceNotFoundException", "no", http_status_code=404
    )
    err = h.fails("smoke", "--via-api-server", code=3)
    assert "EKS cluster 'ray-llm-multinode' not found" in err
    assert "cloudformation" not in h.session.stubbers


# -- endpoint --------------------------------------------------------------------------------


def test_endpoint_prints_url_token_and_calls_with_the_deployed_ids(tmp_path: Path) -> None:
    h = harness(tmp_path, **INTERNAL)
    url = "https://llm.example.com"
    stub_stack(h, {**cognito_outputs(url), "EndpointTokenUrl": "https://t.example/oauth2/token"})
    out = h.succeeds("endpoint")
    lines = out.splitlines()
    assert lines[0] == f"Application endpoint of RayService ray-llm: {url}"
    token_line = next(line.strip() for line in lines if line.strip().startswith("export TOKEN="))
    assert token_line == (
        f'export TOKEN=$(curl -s -u "{CLIENT_ID}:$(aws cognito-idp describe-user-pool-client '
        f"--user-pool-id {POOL_ID} --client-id {CLIENT_ID} --region {REGION} --query "
        'UserPoolClient.ClientSecret --output text)" -d grant_type=client_credentials -d '
        "scope=ray-llm/invoke https://t.example/oauth2/token | python3 -c 'import json,sys; "
        'print(json.load(sys.stdin)["access_token"])\')'
    )
    assert f'   curl -s {url}/v1/models -H "Authorization: Bearer $TOKEN"' in lines
    chat = next(line for line in lines if "/v1/chat/completions" in line)
    argv = shlex.split(chat)
    assert argv[:5] == [
        "curl",
        "-s",
        f"{url}/v1/chat/completions",
        "-H",
        "Authorization: Bearer $TOKEN",
    ]
    assert json.loads(argv[-1])["model"] == "qwen3.5-9b"
    assert f"base_url='{url}/v1', api_key=os.environ['TOKEN']" in out
    assert CLIENT_SECRET not in out
    assert h.processes == []


def test_endpoint_for_an_existing_idp_says_where_tokens_come_from(tmp_path: Path) -> None:
    h = harness(tmp_path, **{**IDP, "endpointJwtScope": "llm.invoke"})
    stub_stack(
        h,
        {
            "EndpointUrl": "https://llm.example.com",
            "EndpointAuth": "jwt",
            "EndpointJwtIssuer": "https://login.example.com/realms/apps",
            "EndpointScope": "llm.invoke",
        },
    )
    out = h.succeeds("endpoint")
    assert (
        "1. Get an access token from https://login.example.com/realms/apps (audience ray-llm, "
        "scope llm.invoke) and:" in out
    )
    assert "   export TOKEN=<the access token>" in out
    assert "cognito" not in out


def test_endpoint_without_exposure_points_to_the_docs_and_makes_no_call(tmp_path: Path) -> None:
    h = harness(tmp_path, region=REGION)
    out = h.succeeds("endpoint")
    assert "kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000" in out
    assert (
        "(`ray-pd-eks settings --set endpointExposure=internal|internet-facing`): docs/endpoint.md"
        in out
    )
    assert h.profiles == []


# -- preflight ---------------------------------------------------------------------------------


def certificate(
    *,
    status: str = "ISSUED",
    names: tuple[str, ...] = ("llm.example.com",),
    days_left: float = 200,
    kind: str = "AMAZON_ISSUED",
) -> dict[str, Any]:
    return {
        "Certificate": {
            "CertificateArn": CERT_ARN,
            "DomainName": names[0],
            "SubjectAlternativeNames": list(names),
            "Status": status,
            "Type": kind,
            "NotAfter": NOW + timedelta(days=days_left),
        }
    }


NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def preflight(tmp_path: Path, answer: dict[str, Any] | str | None, **context: Any) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    # Someone administers: an empty adminPrincipalArns would be a FAIL of its own.
    admins = {"adminPrincipalArns": [f"arn:aws:iam::{ACCOUNT}:role/Admin"]}
    h = Harness(write_cdk_json(tmp_path, **{**INTERNAL, **admins, **context}))
    stub_all(h, running=[])
    if isinstance(answer, str):
        h.session.stub("acm").add_client_error(
            "describe_certificate", answer, "x", http_status_code=400
        )
    elif answer is not None:
        h.session.stub("acm").add_response(
            "describe_certificate",
            answer,
            {"CertificateArn": context.get("endpointCertificateArn", CERT_ARN)},
        )
    original = h.runtime

    def runtime() -> Any:  # the clock that the certificate's expiry is measured against
        rt, out, err = original()
        rt.now = lambda: NOW
        return rt, out, err

    h.runtime = runtime  # type: ignore[method-assign]
    result = h.run("preflight")
    h.session.assert_no_pending_responses()
    return result


def test_issued_certificate_covering_the_domain_passes(tmp_path: Path) -> None:
    result = preflight(tmp_path, certificate())
    (line,) = lines_of(result.out, "endpoint certificate")
    assert line.startswith("OK")
    assert f"llm.example.com: ISSUED in {REGION}, covers llm.example.com" in line
    (cidrs,) = lines_of(result.out, "endpoint CIDRs")
    assert (
        cidrs
        == "OK    endpoint CIDRs  internal ALB, HTTPS from 10.0.0.0/8 (including the VPC itself)"
    )


def test_wildcard_certificate_covers_one_label(tmp_path: Path) -> None:
    result = preflight(tmp_path, certificate(names=("*.example.com",)))
    assert lines_of(result.out, "endpoint certificate")[0].startswith("OK")
    deeper = preflight(
        tmp_path / "b",
        certificate(names=("*.example.com",)),
        endpointDomainName="a.llm.example.com",
    )
    (line,) = lines_of(deeper.out, "endpoint certificate")
    assert line.startswith("FAIL") and "not endpointDomainName a.llm.example.com" in line
    assert deeper.code == 1


def test_pending_certificate_fails_with_the_validation_hint(tmp_path: Path) -> None:
    result = preflight(tmp_path, certificate(status="PENDING_VALIDATION"))
    (line,) = lines_of(result.out, "endpoint certificate")
    assert line.startswith("FAIL") and "PENDING_VALIDATION, not ISSUED" in line
    assert "DNS validation record" in line
    assert result.code == 1


def test_missing_certificate_fails(tmp_path: Path) -> None:
    result = preflight(tmp_path, "ResourceNotFoundException")
    (line,) = lines_of(result.out, "endpoint certificate")
    assert line.startswith("FAIL") and "not found in this account" in line


def test_certificate_in_another_region_fails_without_a_call(tmp_path: Path) -> None:
    other = CERT_ARN.replace(REGION, "eu-west-1")
    # region empty in the context, so synth would accept it; preflight knows the region.
    result = preflight(tmp_path, None, region="", endpointCertificateArn=other)
    (line,) = lines_of(result.out, "endpoint certificate")
    assert line.startswith("FAIL") and f"in eu-west-1, the deployment in {REGION}" in line


@pytest.mark.parametrize(("days", "level"), [(30, "OK"), (29, "WARN")])
def test_certificate_expiry_edge(tmp_path: Path, days: float, level: str) -> None:
    result = preflight(tmp_path, certificate(days_left=days + 0.5, kind="IMPORTED"))
    (line,) = lines_of(result.out, "endpoint certificate")
    assert line.startswith(level), line
    if level == "WARN":
        assert "expires in 29 days: imported certificates are not renewed" in line


def test_public_cidr_for_an_internal_alb_warns(tmp_path: Path) -> None:
    result = preflight(tmp_path, certificate(), endpointAllowedCidrs=["52.10.0.0/16"])
    (line,) = lines_of(result.out, "endpoint CIDRs")
    assert line.startswith("WARN") and "52.10.0.0/16 are public addresses" in line
    assert result.code == 0  # a warning does not fail the run


def test_open_internet_facing_endpoint_warns(tmp_path: Path) -> None:
    result = preflight(
        tmp_path,
        certificate(),
        endpointExposure="internet-facing",
        endpointAllowedCidrs=["0.0.0.0/0"],
    )
    (line,) = lines_of(result.out, "endpoint CIDRs")
    assert line.startswith("WARN") and "open to the internet" in line


def test_no_endpoint_checks_without_exposure(tmp_path: Path) -> None:
    h = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_all(h, running=[])
    result = h.run("preflight")
    assert "endpoint certificate" not in result.out and "endpoint CIDRs" not in result.out
    assert "acm" not in h.session.stubbers
