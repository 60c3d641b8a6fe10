"""Rules of the application endpoint: the load balancer's exposure and allowed CIDRs, its
certificate and domain, the token check (the stack's Cognito pool or an existing identity
provider), and the limits on its connections and request rate. Together they refuse every
combination that would expose the model without authentication, or that cannot deploy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ray_pd_eks.config.limits import (
    ENDPOINT_AUTHS,
    ENDPOINT_EXPOSURES,
    JWT_AUDIENCE_FORMATS,
    JWT_CLAIM_MAX,
    MAX_ENDPOINT_CIDRS,
    MAX_IDLE_TIMEOUT_SECONDS,
    MIN_IDLE_TIMEOUT_SECONDS,
    OPEN_PREFIX_BELOW,
    WAF_RATE_LIMIT_MAX,
    WAF_RATE_LIMIT_MIN,
)
from ray_pd_eks.config.parsing import read_cidr
from ray_pd_eks.config.problems import SETTINGS_SET, Bounds, Form, problem

if TYPE_CHECKING:
    from ray_pd_eks.config.settings import AppConfig

_CERTIFICATE_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):acm:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"certificate/[0-9a-f-]{36}$"
)
# What _CERTIFICATE_ARN accepts, as error lines show it (`aws acm list-certificates` lists them).
CERTIFICATE_ARN_FORM = (
    "arn:aws:acm:<region>:<account>:certificate/<id: 36 lowercase hex digits and dashes, "
    "e.g. 0123abcd-0123-4567-89ab-0123456789ab>"
)
_DOMAIN = re.compile(r"^(?=.{4,253}$)([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(:\d+)?(/[^\s?#]*)?$")

_DOMAIN_NAME = Form(
    "endpointDomainName",
    _DOMAIN,
    "must be a lowercase DNS name such as llm.example.com (no scheme, no port)",
)
# The endpoint's limits, checked whatever its exposure.
ENDPOINT_LIMITS = (
    Bounds(
        "endpointIdleTimeoutSeconds",
        MIN_IDLE_TIMEOUT_SECONDS,
        MAX_IDLE_TIMEOUT_SECONDS,
        f"must be {MIN_IDLE_TIMEOUT_SECONDS}..{MAX_IDLE_TIMEOUT_SECONDS} seconds: streamed "
        "completions keep the connection open, and the ALB allows at most 4000",
    ),
    Bounds(
        "endpointRateLimitPer5Min",
        WAF_RATE_LIMIT_MIN,
        WAF_RATE_LIMIT_MAX,
        f"must be 0 (no AWS WAF web ACL) or {WAF_RATE_LIMIT_MIN}..{WAF_RATE_LIMIT_MAX} requests "
        "per client IP per 5 minutes (AWS WAF's range for a rate-based rule)",
        zero_ok=True,
    ),
)


def _set_ones(settings: Iterable[tuple[str, Any]], why: str) -> list[str]:
    """A line saying ``why`` for each (key, value) of ``settings`` that is set."""
    return [problem(key, value, why) for key, value in settings if value]


def _cidr_problems(key: str, cidrs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(problems, the CIDRs that are open to the internet in effect)."""
    out: list[str] = []
    opened: list[str] = []
    for cidr in cidrs:
        net, why = read_cidr(cidr, "10.20.0.0/16")
        if net is None:
            out.append(problem(key, cidr, why))
            continue
        if net.prefixlen < OPEN_PREFIX_BELOW:
            opened.append(cidr)
    return out, opened


def endpoint(c: AppConfig) -> list[str]:
    """The application endpoint's settings, and the combinations that would expose the model
    without authentication or that cannot deploy."""
    out: list[str] = []
    exposure, auth = c.endpoint_exposure, c.endpoint_auth
    if exposure not in ENDPOINT_EXPOSURES:
        why = (
            "must be none (no load balancer: reach the model with kubectl port-forward), "
            "internal (an ALB in private subnets of its own) or internet-facing (public subnets)"
        )
        return [problem("endpointExposure", exposure, why)]
    if auth not in ENDPOINT_AUTHS:
        why = "must be jwt (the load balancer validates a bearer token) or none"
        return [problem("endpointAuth", auth, why)]
    jwt_keys = (
        ("endpointJwtIssuer", c.endpoint_jwt_issuer),
        ("endpointJwksUri", c.endpoint_jwks_uri),
        ("endpointJwtAudience", c.endpoint_jwt_audience),
        ("endpointJwtScope", c.endpoint_jwt_scope),
    )
    audience_format = c.endpoint_jwt_audience_format
    if audience_format not in JWT_AUDIENCE_FORMATS:
        why = (
            "must be single-string (the token's aud is one string, as Cognito issues it) or "
            "string-array (aud is a JSON array, as Keycloak or Entra ID v1 issue it); aud is "
            "never space-separated (RFC 7519 section 4.1.3)"
        )
        out.append(problem("endpointJwtAudienceFormat", audience_format, why))
    # Valid and away from its default, it belongs with endpointJwtAudience: refused where
    # that is (no exposure, no authentication, the stack's Cognito pool).
    moved = audience_format in JWT_AUDIENCE_FORMATS[1:]
    format_key = ("endpointJwtAudienceFormat", audience_format if moved else "")
    if exposure == "none":
        unused = (
            ("endpointAllowedCidrs", list(c.endpoint_allowed_cidrs)),
            ("endpointCertificateArn", c.endpoint_certificate_arn),
            ("endpointDomainName", c.endpoint_domain_name),
            *jwt_keys,
            format_key,
        )
        why = (
            "has no effect while endpointExposure is none: set "
            "endpointExposure=internal (or internet-facing) too, or remove it"
        )
        return out + _set_ones(unused, why)

    cidr_problems, opened = _cidr_problems("endpointAllowedCidrs", c.endpoint_allowed_cidrs)
    out += cidr_problems
    count = len(c.endpoint_allowed_cidrs)
    if not count:
        example = (
            "203.0.113.0/24 (your clients' public addresses: an internet-facing load balancer "
            "sees no private ones)"
            if exposure == "internet-facing"
            else "10.0.0.0/8 (your VPC and peered networks)"
        )
        why = (
            f"endpointExposure={exposure} needs the CIDRs allowed to reach the load balancer, "
            f"e.g. {SETTINGS_SET} endpointAllowedCidrs={example}"
        )
        out.append(problem("endpointAllowedCidrs", [], why))
    elif count > MAX_ENDPOINT_CIDRS:
        why = (
            f"{count} entries; at most {MAX_ENDPOINT_CIDRS} (one security-group rule each): "
            "summarise them into wider blocks"
        )
        out.append(problem("endpointAllowedCidrs", list(c.endpoint_allowed_cidrs), why))
    if opened and (exposure != "internet-facing" or auth != "jwt"):
        why = (
            f"a range wider than /{OPEN_PREFIX_BELOW} is the internet in effect: only with "
            "endpointExposure=internet-facing and endpointAuth=jwt; otherwise list your networks"
        )
        out += [problem("endpointAllowedCidrs", cidr, why) for cidr in opened]

    arn = c.endpoint_certificate_arn
    m = _CERTIFICATE_ARN.match(arn)
    if not arn:
        why = (
            f"endpointExposure={exposure} serves HTTPS only and needs an ACM certificate ARN "
            f"({CERTIFICATE_ARN_FORM}) for endpointDomainName"
        )
        out.append(problem("endpointCertificateArn", arn, why))
    elif not m:
        why = f"must be an ACM certificate ARN, {CERTIFICATE_ARN_FORM}"
        out.append(problem("endpointCertificateArn", arn, why))
    elif c.region and m["region"] != c.region:
        why = (
            f"the certificate is in {m['region']}, the load balancer in {c.region}: an ALB "
            f"uses certificates of its own region; request or import one in {c.region}"
        )
        out.append(problem("endpointCertificateArn", arn, why))

    out += _DOMAIN_NAME(c)

    if auth == "none":
        if exposure == "internet-facing":
            why = (
                "an internet-facing endpoint without authentication lets anyone spend your GPUs: "
                "use endpointAuth=jwt, or endpointExposure=internal"
            )
            out.append(problem("endpointAuth", auth, why))
        why = "is only used with endpointAuth=jwt: remove it, or set endpointAuth=jwt"
        return out + _set_ones((*jwt_keys, format_key), why)

    issuer, jwks = c.endpoint_jwt_issuer, c.endpoint_jwks_uri
    for key, value in (("endpointJwtIssuer", issuer), ("endpointJwksUri", jwks)):
        if value and not _HTTPS_URL.match(value):
            why = "must be an https:// URL (no query or fragment)"
            out.append(problem(key, value, why))
    if not issuer:
        why = (
            "belongs to an existing identity provider: set endpointJwtIssuer too, or "
            "remove it to use the Cognito user pool the stack creates"
        )
        return out + _set_ones((*jwt_keys[1:], format_key), why)
    if not jwks:
        why = (
            "an existing identity provider needs its JWKS URL too (the jwks_uri of its "
            "/.well-known/openid-configuration): settings --set endpointJwksUri=https://..."
        )
        out.append(problem("endpointJwksUri", jwks, why))
    if not c.endpoint_jwt_audience and not c.endpoint_jwt_scope:
        why = (
            "with only the issuer checked, every token that issuer signs (for any application) "
            "would be accepted: set endpointJwtAudience and/or endpointJwtScope"
        )
        out.append(problem("endpointJwtIssuer", issuer, why))
    if moved and not c.endpoint_jwt_audience:
        why = "only says how aud is carried: set endpointJwtAudience too, or remove it"
        out.append(problem("endpointJwtAudienceFormat", audience_format, why))
    for key, value in jwt_keys[2:]:
        if len(value) > JWT_CLAIM_MAX:
            why = f"is {len(value)} characters; the load balancer checks at most {JWT_CLAIM_MAX}"
            out.append(problem(key, value, why))
        elif value and re.search(r"\s", value):
            why = "must be one value without spaces (the token must carry exactly this value)"
            out.append(problem(key, value, why))
    return out
