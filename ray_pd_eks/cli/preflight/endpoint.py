"""Preflight's endpoint checks: the load balancer's certificate (found here, ISSUED, in the
deploy region, covering the domain, not about to expire) and what the allowed CIDRs mean for
its scheme."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from botocore import exceptions as bce

from ray_pd_eks.cli.aws import error_code
from ray_pd_eks.cli.errors import AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks

CERTIFICATE_EXPIRY_WARN_DAYS = 30  # ACM renews managed certificates 60 days ahead; imported
# ones must be replaced by hand, so fewer than 30 days left is worth a warning.


class EndpointChecks(Checks):
    def endpoint_certificate(self) -> Iterator[Finding]:
        """The ALB's certificate: found here, ISSUED, this region, covering the domain."""
        c = self.config
        if not c.endpoint_exposed:
            return
        arn = c.endpoint_certificate_arn
        cert_region = arn.split(":")[3]
        check = "endpoint certificate"
        if cert_region != self.aws.region:
            yield Finding(
                FAIL,
                check,
                f"the certificate is in {cert_region}, the deployment in {self.aws.region}: an "
                f"ALB uses certificates of its own region; request or import one in "
                f"{self.aws.region} (ray-pd-eks settings --set endpointCertificateArn=...)",
            )
            return
        try:
            with self.aws.errors("acm:DescribeCertificate"):
                try:
                    cert = self.aws.client("acm").describe_certificate(CertificateArn=arn)[
                        "Certificate"
                    ]
                except bce.ClientError as err:
                    if error_code(err) not in ("ResourceNotFoundException", "InvalidArnException"):
                        raise
                    cert = None
        except AccessError as err:
            yield Finding(WARN, check, f"cannot check {arn} ({err.message})")
            return
        if cert is None:
            yield Finding(
                FAIL,
                check,
                f"{arn} not found in this account and {self.aws.region}: request one (`aws acm "
                f"request-certificate --domain-name {c.endpoint_domain_name or '<name>'} "
                "--validation-method DNS`) or fix ray-pd-eks settings --set "
                "endpointCertificateArn=...",
            )
            return
        status = str(cert.get("Status", "?"))
        domain = str(cert.get("DomainName", ""))
        names = [str(n) for n in cert.get("SubjectAlternativeNames") or [domain]]
        if status != "ISSUED":
            fix = (
                "create the DNS validation record ACM lists (`aws acm describe-certificate`)"
                if status == "PENDING_VALIDATION"
                else "request a new certificate"
            )
            yield Finding(FAIL, check, f"{domain} is {status}, not ISSUED: {fix}")
            return
        if c.endpoint_domain_name and not certificate_covers(c.endpoint_domain_name, names):
            yield Finding(
                FAIL,
                check,
                f"the certificate covers {', '.join(names)}, not endpointDomainName "
                f"{c.endpoint_domain_name}: clients would reject TLS; use a certificate for it",
            )
            return
        not_after = cert.get("NotAfter")
        days = None
        if not_after is not None and hasattr(not_after, "timestamp"):
            days = int((not_after.timestamp() - self.now().timestamp()) // 86400)
        if days is not None and days < CERTIFICATE_EXPIRY_WARN_DAYS:
            renewal = (
                "ACM renews it if its DNS validation record is still there"
                if cert.get("Type") == "AMAZON_ISSUED"
                else "imported certificates are not renewed: import a new one"
            )
            yield Finding(WARN, check, f"{domain} expires in {days} days: {renewal}")
            return
        covers = (
            f"covers {c.endpoint_domain_name}"
            if c.endpoint_domain_name
            else "no endpointDomainName set: clients will reach the ALB by a name the "
            "certificate does not cover unless you add one"
        )
        level = OK if c.endpoint_domain_name else WARN
        yield Finding(level, check, f"{domain}: ISSUED in {self.aws.region}, {covers}")

    def endpoint_cidrs(self) -> Iterator[Finding]:
        """What the allowed CIDRs mean for this load balancer scheme."""
        c = self.config
        if not c.endpoint_exposed:
            return
        check = "endpoint CIDRs"
        nets = [ipaddress.IPv4Network(x) for x in c.endpoint_allowed_cidrs]
        listed = ", ".join(c.endpoint_allowed_cidrs)
        if c.endpoint_exposure == "internal":
            public = [str(n) for n in nets if n.is_global]
            if public:
                yield Finding(
                    WARN,
                    check,
                    f"{', '.join(public)} are public addresses, but an internal load balancer "
                    "is reached only from the VPC and networks connected to it (peering, VPN, "
                    "Direct Connect), which use private addresses: list those instead",
                )
                return
            vpc = ipaddress.IPv4Network(c.vpc_cidr)
            inside = any(n.overlaps(vpc) for n in nets)
            where = "including the VPC itself" if inside else "none of them the VPC itself"
            yield Finding(OK, check, f"internal ALB, HTTPS from {listed} ({where})")
            return
        opened = [str(n) for n in nets if n.prefixlen < 8]
        private = [str(n) for n in nets if n.is_private]
        if opened:
            yield Finding(
                WARN,
                check,
                f"{', '.join(opened)}: the endpoint is open to the internet; every request "
                "still needs a valid token (endpointAuth=jwt), and the ALB bills for what "
                "reaches it",
            )
        elif private:
            yield Finding(
                WARN,
                check,
                f"{', '.join(private)} are private ranges: an internet-facing load balancer "
                "sees clients' public addresses, so these match only traffic from inside AWS",
            )
        else:
            yield Finding(OK, check, f"internet-facing ALB, HTTPS from {listed} only")


def certificate_covers(domain: str, names: list[str]) -> bool:
    """Whether a certificate for ``names`` (its domain and SANs) is valid for ``domain``: an
    exact match, or a wildcard ``*.example.com`` for exactly one more label."""
    domain = domain.lower().rstrip(".")
    for name in names:
        name = name.lower().rstrip(".")
        if name == domain:
            return True
        if name.startswith("*.") and domain.split(".", 1)[-1] == name[2:] and "." in domain:
            return True
    return False
