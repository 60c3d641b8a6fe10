"""endpointJwtAudienceFormat: how an existing identity provider's tokens carry ``aud`` (one
string, or an array as RFC 7519 allows), rendered into the listener's ``jwt-validation``
claim, checked against CloudFormation's own listener schema (cfn-lint's copy)."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pd_constructs.endpoint.endpoint import jwt_claims
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError
from ray_pd_eks.config.limits import JWT_AUDIENCE_FORMATS
from tests.conftest import CERTIFICATE, IDP_ISSUER, IDP_JWKS

INTERNAL = {
    "region": "us-west-2",
    "endpointExposure": "internal",
    "endpointCertificateArn": CERTIFICATE,
    "endpointAllowedCidrs": ["10.0.0.0/8"],
}
IDP = {**INTERNAL, "endpointJwtIssuer": IDP_ISSUER, "endpointJwksUri": IDP_JWKS}
KEY = "endpointJwtAudienceFormat"


@functools.cache
def claim_schema() -> dict[str, Any]:
    """``JwtValidationActionAdditionalClaim`` of AWS::ElasticLoadBalancingV2::Listener, as the
    CloudFormation registry schema cfn-lint ships defines it."""
    # Where cfn-lint keeps its schemas, without importing it (0.8 s; its worker process lints).
    spec = importlib.util.find_spec("cfnlint")
    assert spec is not None and spec.origin is not None, "cfn-lint is a pinned dev dependency"
    schemas = Path(spec.origin).parent / "data" / "schemas"
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    name = index["AWS::ElasticLoadBalancingV2::Listener"]
    listener = json.loads((schemas / "resources" / f"{name}.json").read_text())
    return dict(listener["definitions"]["JwtValidationActionAdditionalClaim"])


def rejected(context: dict[str, Any], key: str = KEY) -> str:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    (line,) = [line for line in str(err.value).splitlines() if f"context key '{key}'" in line]
    assert f"settings --set {key}=..." in line  # names the fix
    if key in context:
        assert f"context key '{key}' = {json.dumps(context[key])}:" in line  # and the value
    return line


def test_the_default_is_one_string_as_before() -> None:
    assert DEFAULTS.endpoint_jwt_audience_format == "single-string"
    config = DEFAULTS.with_overrides({**IDP, "endpointJwtAudience": "api://llm"})
    assert jwt_claims(config) == [
        {"Format": "single-string", "Name": "aud", "Values": ["api://llm"]}
    ]


def test_an_array_audience_is_checked_as_a_string_array() -> None:
    """Keycloak and Entra ID v1 put aud in an array: with single-string every request would
    be refused while the deploy passed (the endpoint probe is skipped for an existing IdP)."""
    config = DEFAULTS.with_overrides(
        {**IDP, "endpointJwtAudience": "api://llm", KEY: "string-array"}
    )
    (claim,) = [c for c in jwt_claims(config) if c["Name"] == "aud"]
    assert claim == {"Format": "string-array", "Name": "aud", "Values": ["api://llm"]}


@pytest.mark.parametrize("audience_format", JWT_AUDIENCE_FORMATS)
def test_every_accepted_format_is_one_cloudformation_accepts(audience_format: str) -> None:
    config = DEFAULTS.with_overrides(
        {**IDP, "endpointJwtAudience": "api://llm", "endpointJwtScope": "llm", KEY: audience_format}
    )
    for claim in jwt_claims(config):
        jsonschema.validate(claim, claim_schema())
    assert audience_format in claim_schema()["properties"]["Format"]["enum"]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("space-separated-values", "aud is never space-separated (RFC 7519 section 4.1.3)"),
        ("array", "must be single-string (the token's aud is one string"),
        ("", "or string-array (aud is a JSON array"),
    ],
)
def test_other_formats_are_refused_naming_the_setting_and_value(value: str, why: str) -> None:
    line = rejected({**IDP, "endpointJwtAudience": "api://llm", KEY: value})
    assert line.startswith(f"context key '{KEY}' = {json.dumps(value)}: ")
    assert why in line


def test_an_array_format_without_an_audience_is_refused() -> None:
    line = rejected({**IDP, "endpointJwtScope": "llm", KEY: "string-array"})
    assert "set endpointJwtAudience too" in line
    # The default says nothing, so it is never "set without an audience".
    assert AppConfig.from_context({**IDP, "endpointJwtScope": "llm", KEY: "single-string"})


@pytest.mark.parametrize(
    ("context", "why"),
    [
        ({}, "has no effect while endpointExposure is none"),
        ({**INTERNAL, "endpointAuth": "none"}, "only used with endpointAuth=jwt"),
        (INTERNAL, "belongs to an existing identity provider"),  # the stack's Cognito pool
    ],
)
def test_an_array_format_where_no_audience_is_checked_is_refused(
    context: dict[str, Any], why: str
) -> None:
    assert why in rejected({**context, KEY: "string-array"})
