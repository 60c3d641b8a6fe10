"""Settings of the application endpoint: each rule at its limit (accepted) and one past it
(rejected), and every bad combination the endpoint must refuse, each naming its setting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.config.limits import (
    MAX_ENDPOINT_CIDRS,
    MAX_IDLE_TIMEOUT_SECONDS,
    MIN_IDLE_TIMEOUT_SECONDS,
)
from tests.conftest import CERTIFICATE, IDP_ISSUER, IDP_JWKS

INTERNAL = {
    "region": "us-west-2",
    "endpointExposure": "internal",
    "endpointCertificateArn": CERTIFICATE,
    "endpointAllowedCidrs": ["10.0.0.0/8"],
}
PUBLIC = {**INTERNAL, "endpointExposure": "internet-facing"}
IDP = {"endpointJwtIssuer": IDP_ISSUER, "endpointJwksUri": IDP_JWKS}


def config(**context: Any) -> AppConfig:
    return AppConfig.from_context(context)


def rejected(context: dict[str, Any], key: str, why: str) -> str:
    """The error line for ``key``: it must name the setting and say ``why``."""
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    lines = [line for line in str(err.value).splitlines() if f"context key '{key}'" in line]
    assert lines, str(err.value)
    assert any(why in line for line in lines), lines
    if key in context:  # the line shows the value as given
        value = context[key]
        assert any(f"context key '{key}' = {json.dumps(value)}:" in line for line in lines) or (
            isinstance(value, list)  # a list's line may name one of its entries
            and any(
                f"context key '{key}' = {json.dumps(v)}:" in line for v in value for line in lines
            )
        ), lines
    return lines[0]


def test_defaults_expose_nothing() -> None:
    assert DEFAULTS.endpoint_exposure == "none"
    assert not DEFAULTS.endpoint_exposed
    assert not DEFAULTS.endpoint_uses_cognito
    assert DEFAULTS.endpoint_auth == "jwt"
    assert DEFAULTS.endpoint_idle_timeout_seconds == 600


def test_internal_with_certificate_and_cidr_uses_the_stacks_cognito_pool() -> None:
    c = config(**INTERNAL)
    assert c.endpoint_exposed and c.endpoint_uses_cognito
    assert c.endpoint_scope == "ray-llm/invoke"
    assert c.endpoint_allowed_cidrs == ("10.0.0.0/8",)


def test_cidrs_parse_from_a_comma_separated_string() -> None:
    c = config(**{**INTERNAL, "endpointAllowedCidrs": "10.0.0.0/8, 192.168.0.0/16"})
    assert c.endpoint_allowed_cidrs == ("10.0.0.0/8", "192.168.0.0/16")


@pytest.mark.parametrize("value", ["public", "", "Internal"])
def test_exposure_must_be_one_of_three(value: str) -> None:
    rejected({**INTERNAL, "endpointExposure": value}, "endpointExposure", "must be none")


def test_auth_must_be_jwt_or_none() -> None:
    rejected({**INTERNAL, "endpointAuth": "basic"}, "endpointAuth", "must be jwt")


def test_exposed_without_certificate_fails() -> None:
    context = {**INTERNAL, "endpointCertificateArn": ""}
    line = rejected(context, "endpointCertificateArn", "serves HTTPS only")
    assert "endpointExposure=internal" in line


def test_exposed_without_cidrs_fails() -> None:
    context = {**INTERNAL, "endpointAllowedCidrs": []}
    rejected(context, "endpointAllowedCidrs", "needs the CIDRs allowed to reach")


def test_internet_facing_without_auth_fails() -> None:
    context = {**PUBLIC, "endpointAuth": "none"}
    rejected(context, "endpointAuth", "an internet-facing endpoint without authentication")


def test_internal_without_auth_is_allowed() -> None:
    assert config(**{**INTERNAL, "endpointAuth": "none"}).endpoint_scope == ""


def test_the_internet_with_internal_and_no_auth_fails() -> None:
    context = {**INTERNAL, "endpointAuth": "none", "endpointAllowedCidrs": ["0.0.0.0/0"]}
    line = rejected(context, "endpointAllowedCidrs", "the internet in effect")
    assert '= "0.0.0.0/0":' in line


def test_the_internet_needs_internet_facing_and_jwt() -> None:
    assert config(**{**PUBLIC, "endpointAllowedCidrs": ["0.0.0.0/0"]}).endpoint_exposed
    rejected(
        {**INTERNAL, "endpointAllowedCidrs": ["0.0.0.0/0"]},
        "endpointAllowedCidrs",
        "only with endpointExposure=internet-facing and endpointAuth=jwt",
    )


def test_a_slash_8_is_a_network_and_a_slash_7_the_internet() -> None:
    at_limit = {**INTERNAL, "endpointAuth": "none", "endpointAllowedCidrs": ["10.0.0.0/8"]}
    assert config(**at_limit).endpoint_allowed_cidrs == ("10.0.0.0/8",)
    past = {**at_limit, "endpointAllowedCidrs": ["10.0.0.0/8", "10.0.0.0/7"]}
    line = rejected(past, "endpointAllowedCidrs", "the internet in effect")
    assert '= "10.0.0.0/7":' in line  # names only the offending entry


def test_cidr_count_limit() -> None:
    blocks = [f"10.{i}.0.0/16" for i in range(MAX_ENDPOINT_CIDRS + 1)]
    assert len(config(**{**INTERNAL, "endpointAllowedCidrs": blocks[:-1]}).endpoint_allowed_cidrs)
    rejected(
        {**INTERNAL, "endpointAllowedCidrs": blocks},
        "endpointAllowedCidrs",
        f"{MAX_ENDPOINT_CIDRS + 1} entries; at most {MAX_ENDPOINT_CIDRS}",
    )


@pytest.mark.parametrize(
    ("cidr", "why"),
    [
        ("10.0.0.1", "IPv4 CIDR"),
        ("10.0.0.1/8", "host bits are set: the network of this CIDR is 10.0.0.0/8"),
        ("fd00::/8", "IPv4 CIDR"),
        ("banana", "IPv4 CIDR"),
    ],
)
def test_each_cidr_must_be_an_ipv4_network(cidr: str, why: str) -> None:
    rejected({**INTERNAL, "endpointAllowedCidrs": [cidr]}, "endpointAllowedCidrs", why)


def test_certificate_in_another_region_fails() -> None:
    other = CERTIFICATE.replace("us-west-2", "eu-west-1")
    line = rejected(
        {**INTERNAL, "endpointCertificateArn": other},
        "endpointCertificateArn",
        "the certificate is in eu-west-1, the load balancer in us-west-2",
    )
    assert "request or import one in us-west-2" in line


def test_certificate_region_is_left_to_deploy_time_without_a_region() -> None:
    other = CERTIFICATE.replace("us-west-2", "eu-west-1")
    context = {**INTERNAL, "region": "", "endpointCertificateArn": other}
    assert config(**context).endpoint_certificate_arn == other


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:server-certificate/x",
        "arn:aws:acm:us-west-2:123456789012:certificate/short",
        "0123abcd-0123-4567-89ab-0123456789ab",
    ],
)
def test_certificate_must_be_an_acm_arn(arn: str) -> None:
    rejected({**INTERNAL, "endpointCertificateArn": arn}, "endpointCertificateArn", "ACM")


# Per setting judged alone: the context it is judged in, its attribute, and what its rejection
# says.
_ALONE = {
    "endpointDomainName": (INTERNAL, "endpoint_domain_name", "lowercase DNS name"),
    "endpointIdleTimeoutSeconds": (
        {},
        "endpoint_idle_timeout_seconds",
        "must be 300..4000 seconds",
    ),
}


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("endpointDomainName", "llm.example.com", True),
        ("endpointDomainName", "a.io", True),
        ("endpointDomainName", "https://llm.example.com", False),
        ("endpointDomainName", "llm.example.com:443", False),
        ("endpointDomainName", "LLM.example.com", False),
        ("endpointDomainName", "localhost", False),
        ("endpointDomainName", ("a" * 63 + ".") * 3 + "a" * 59 + ".io", False),  # 254: past 253
        ("endpointDomainName", ("a" * 63 + ".") * 3 + "a" * 58 + ".io", True),  # 253: the limit
        ("endpointIdleTimeoutSeconds", MIN_IDLE_TIMEOUT_SECONDS, True),
        ("endpointIdleTimeoutSeconds", MIN_IDLE_TIMEOUT_SECONDS - 1, False),
        ("endpointIdleTimeoutSeconds", MAX_IDLE_TIMEOUT_SECONDS, True),
        ("endpointIdleTimeoutSeconds", MAX_IDLE_TIMEOUT_SECONDS + 1, False),
    ],
)
def test_a_setting_within_its_rule_is_taken_and_one_outside_rejected(
    key: str, value: Any, ok: bool
) -> None:
    base, attribute, why = _ALONE[key]
    context = {**base, key: value}
    if ok:
        assert getattr(config(**context), attribute) == value
    else:
        rejected(context, key, why)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("endpointAllowedCidrs", ["10.0.0.0/8"]),
        ("endpointCertificateArn", CERTIFICATE),
        ("endpointDomainName", "llm.example.com"),
        ("endpointJwtIssuer", IDP_ISSUER),
    ],
)
def test_endpoint_settings_without_exposure_fail(key: str, value: Any) -> None:
    rejected({key: value}, key, "has no effect while endpointExposure is none")


def test_existing_identity_provider() -> None:
    c = config(**PUBLIC, **IDP, endpointJwtAudience="ray-llm", endpointJwtScope="llm.invoke")
    assert not c.endpoint_uses_cognito
    assert c.endpoint_scope == "llm.invoke"


def test_issuer_needs_its_jwks_url() -> None:
    context = {**PUBLIC, "endpointJwtIssuer": IDP_ISSUER, "endpointJwtAudience": "ray-llm"}
    rejected(context, "endpointJwksUri", "needs its JWKS URL")
    rejected({**context, "endpointJwksUri": ""}, "endpointJwksUri", "needs its JWKS URL")


def test_every_cidr_problem_is_reported_at_once() -> None:
    """A CIDR that is not a network and one that opens the internal endpoint to the internet:
    both lines, not only the last."""
    context = {**INTERNAL, "endpointAllowedCidrs": ["300.0.0.0/8", "0.0.0.0/0"]}
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    lines = [line for line in str(err.value).splitlines() if "'endpointAllowedCidrs'" in line]
    assert [line.split(":", 1)[0] for line in lines] == [
        "context key 'endpointAllowedCidrs' = \"300.0.0.0/8\"",
        "context key 'endpointAllowedCidrs' = \"0.0.0.0/0\"",
    ]


def test_issuer_alone_would_accept_any_token_of_that_issuer() -> None:
    rejected({**PUBLIC, **IDP}, "endpointJwtIssuer", "set endpointJwtAudience and/or")
    assert config(**PUBLIC, **IDP, endpointJwtScope="llm.invoke").endpoint_jwt_scope


@pytest.mark.parametrize("key", ["endpointJwksUri", "endpointJwtAudience", "endpointJwtScope"])
def test_idp_settings_without_an_issuer_fail(key: str) -> None:
    value = IDP_JWKS if key == "endpointJwksUri" else "x"
    rejected({**PUBLIC, key: value}, key, "set endpointJwtIssuer too")


@pytest.mark.parametrize("key", ["endpointJwtIssuer", "endpointJwksUri"])
@pytest.mark.parametrize("url", ["http://login.example.com", "login.example.com", "https://x/?a"])
def test_idp_urls_must_be_https(key: str, url: str) -> None:
    context = {**PUBLIC, **IDP, "endpointJwtAudience": "a", key: url}
    rejected(context, key, "must be an https:// URL")


@pytest.mark.parametrize("key", ["endpointJwtAudience", "endpointJwtScope"])
def test_claim_values_are_at_most_256_characters(key: str) -> None:
    at_limit = {**PUBLIC, **IDP, key: "a" * 256}
    assert config(**at_limit)
    rejected({**at_limit, key: "a" * 257}, key, "is 257 characters")


def test_scope_is_one_value() -> None:
    context = {**PUBLIC, **IDP, "endpointJwtScope": "llm.invoke llm.admin"}
    rejected(context, "endpointJwtScope", "one value without spaces")


def test_jwt_settings_with_auth_none_fail() -> None:
    context = {**INTERNAL, **IDP, "endpointAuth": "none"}
    rejected(context, "endpointJwtIssuer", "only used with endpointAuth=jwt")
    rejected(context, "endpointJwksUri", "only used with endpointAuth=jwt")
