"""The caller's AWS session, and botocore errors turned into one line a user can act on.

All AWS calls of the tool go through :class:`Aws`: one session (``--profile``), one region
(``--region``, else the context's ``region``, else the profile's), one client per service.
Tests replace the session factory and put botocore ``Stubber``s on the clients it hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore import exceptions as bce

from ray_pd_eks.cli.errors import DEPLOY_COMMAND, AccessError, CliError, UsageError
from ray_pd_eks.config import AppConfig, set_hint

SessionFactory = Callable[[str | None], Any]

_ACCESS_DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden"}
)
_BAD_CREDENTIALS = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "RequestExpired",
        "AuthFailure",
    }
)


def default_session(profile: str | None) -> Any:
    """A boto3 session; imported here so ``--help`` and ``endpoint`` start fast."""
    import boto3

    return boto3.Session(profile_name=profile)


def no_credentials_message(profile: str | None) -> str:
    where = f"profile '{profile}'" if profile else "the environment, ~/.aws or an SSO login"
    return (
        f"no AWS credentials found in {where}: run `aws configure` or `aws sso login`, "
        "or pass --profile NAME"
    )


def error_code(err: bce.ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _error_text(err: bce.ClientError) -> str:
    return str(err.response.get("Error", {}).get("Message", "")) or error_code(err)


T = TypeVar("T")


@contextmanager
def aws_errors(action: str, profile: str | None = None) -> Iterator[None]:
    """Translate botocore failures of ``action`` (e.g. ``eks:DescribeCluster``) into CliErrors.

    Only credential, access and connectivity failures are translated; other ClientErrors
    propagate so the caller can treat expected codes (``ResourceNotFoundException``) itself.
    """
    try:
        yield
    except CliError:
        raise
    except (bce.NoCredentialsError, bce.PartialCredentialsError):
        raise AccessError(no_credentials_message(profile)) from None
    except (bce.TokenRetrievalError, bce.SSOTokenLoadError, bce.UnauthorizedSSOTokenError):
        login = f"aws sso login --profile {profile}" if profile else "aws sso login"
        raise AccessError(f"the AWS SSO session has expired: run `{login}`") from None
    except bce.CredentialRetrievalError as err:
        raise AccessError(f"cannot load AWS credentials: {err}") from None
    except (bce.EndpointConnectionError, bce.ConnectTimeoutError) as err:
        raise AccessError(f"cannot reach AWS for {action}: {err}") from None
    except bce.ClientError as err:
        code = error_code(err)
        if code in _ACCESS_DENIED:
            raise AccessError(
                f"access denied for {action}: {_error_text(err)} — grant it to your IAM "
                "principal or use another --profile"
            ) from None
        if code in _BAD_CREDENTIALS:
            raise AccessError(
                f"AWS rejected the credentials ({code}) for {action}: refresh them "
                "(`aws sso login`, new keys) or pass another --profile"
            ) from None
        raise


class Aws:
    """Lazily created clients of one session and region, plus the few lookups shared by commands."""

    def __init__(
        self,
        config: AppConfig,
        *,
        profile: str | None,
        region: str | None,
        session_factory: SessionFactory,
        getenv: Callable[[str], str | None],
    ) -> None:
        self.config = config
        self.profile = profile
        try:
            self.session = session_factory(profile)
        except bce.ProfileNotFound:
            raise UsageError(
                f"AWS profile '{profile}' not found: check `aws configure list-profiles`"
            ) from None
        if region:
            self.region, self.region_source = region, "--region"
        elif config.region:
            self.region, self.region_source = config.region, "context key 'region'"
        elif aws_region := getenv("AWS_REGION"):
            # The CDK CLI's first choice (botocore reads only AWS_DEFAULT_REGION).
            self.region, self.region_source = aws_region, "AWS_REGION"
        elif getattr(self.session, "region_name", None):
            # botocore: AWS_DEFAULT_REGION, then the profile's region.
            self.region, self.region_source = (
                str(self.session.region_name),
                "AWS_DEFAULT_REGION" if getenv("AWS_DEFAULT_REGION") else "AWS profile",
            )
        else:
            raise UsageError(
                "no AWS region: pass --region, set ray-pd-eks settings --set region=..., or "
                "export AWS_REGION"
            )
        self._clients: dict[str, Any] = {}
        self._identity: dict[str, Any] | None = None
        self._principal: Principal | None = None

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.region)
        return self._clients[service]

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        with aws_errors(action, self.profile):
            yield

    def unless_missing(self, action: str, call: Callable[[], T]) -> T | None:
        """``call()`` (``action``), with :meth:`errors`' translation; None when AWS answers
        ``ResourceNotFoundException``: the thing does not exist."""
        with self.errors(action):
            try:
                return call()
            except bce.ClientError as err:
                if error_code(err) != "ResourceNotFoundException":
                    raise
        return None

    def identity(self) -> dict[str, Any]:
        """``sts:GetCallerIdentity``; the one call that proves credentials work."""
        if self._identity is None:
            with self.errors("sts:GetCallerIdentity"):
                # Resolving credentials can itself fail (expired SSO): same translation.
                if self.session.get_credentials() is None:
                    raise AccessError(no_credentials_message(self.profile))
                self._identity = dict(self.client("sts").get_caller_identity())
        return self._identity

    def principal_arn(self) -> str:
        """The caller's IAM ARN as an EKS access entry names it (see :meth:`principal`)."""
        return self.principal().arn

    def principal(self) -> Principal:
        """The caller as an IAM principal, with the role's path.

        An assumed-role session ARN (``arn:aws:sts::1:assumed-role/R/session``) hides the
        role's path, and EKS refuses an access entry without it (the principal does not
        exist). IAM Identity Center roles always have one (``/aws-reserved/sso.amazonaws.com/``,
        plus the Identity Center region unless it is us-east-1), so ``iam:GetRole`` reads the
        role's real ARN. When that is denied, the ARN is the pathless one, marked as unsure.
        """
        if self._principal is None:
            arn = str(self.identity().get("Arn", ""))
            pathless = iam_principal(arn)
            role = assumed_role_name(arn)
            if role is None:
                self._principal = Principal(pathless, path_known=True)
            else:
                self._principal = self._role_principal(role, pathless)
        return self._principal

    def _role_principal(self, role: str, pathless: str) -> Principal:
        try:
            with self.errors("iam:GetRole"):
                found = self.client("iam").get_role(RoleName=role)["Role"]["Arn"]
            return Principal(str(found), path_known=True)
        except AccessError as err:
            why = err.message
        except bce.ClientError as err:  # e.g. NoSuchEntity: the role went away meanwhile
            why = f"iam:GetRole failed: {_error_text(err)}"
        return Principal(pathless, path_known=False, unknown_path_reason=why)

    def describe_cluster(self, name: str) -> dict[str, Any]:
        self.identity()
        cluster = self.unless_missing(
            "eks:DescribeCluster",
            lambda: dict(self.client("eks").describe_cluster(name=name)["cluster"]),
        )
        if cluster is not None:
            return cluster
        raise AccessError(
            f"EKS cluster '{name}' not found in {self.region}: deploy it first "
            f"(`{DEPLOY_COMMAND}`), or point the tool at it: {set_hint('clusterName')}, or --region"
        )


def assumed_role_name(arn: str) -> str | None:
    """``R`` for an assumed-role session ARN ``arn:aws:sts::1:assumed-role/R/session``."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        return parts[5].split("/")[1]
    return None


def iam_principal(arn: str) -> str:
    """``arn:aws:sts::1:assumed-role/R/session`` -> ``arn:aws:iam::1:role/R``; others unchanged.

    EKS access entries take the role, not the session. The session ARN does not show the
    role's path: :meth:`Aws.principal` reads it with ``iam:GetRole``.
    """
    role = assumed_role_name(arn)
    if role is None:
        return arn
    parts = arn.split(":", 5)
    return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"


@dataclass(frozen=True)
class Principal:
    """The caller's IAM ARN; ``path_known`` False when its role's path could not be read."""

    arn: str
    path_known: bool
    unknown_path_reason: str = ""


def _iam_parts(arn: str) -> tuple[str, str, str, str] | None:
    """(account, ``role``|``user``, path, name) of an IAM role or user ARN; path ``/`` or
    ``/a/b/``. None for anything else."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or "/" not in parts[5]:
        return None
    kind, _, rest = parts[5].partition("/")
    if kind not in ("role", "user") or not rest:
        return None
    path, _, name = rest.rpartition("/")
    return parts[4], kind, f"/{path}/" if path else "/", name


def same_principal(a: str, b: str) -> bool:
    """Whether two IAM ARNs name the same role or user, path included (EKS compares the
    whole ARN: ``role/R`` and ``role/aws-reserved/sso.amazonaws.com/R`` are different)."""
    pa, pb = _iam_parts(a), _iam_parts(b)
    return pa is not None and pa == pb


def same_name_other_path(a: str, b: str) -> bool:
    """Same account, kind and name, but another path: one of them is not a real principal."""
    pa, pb = _iam_parts(a), _iam_parts(b)
    return pa is not None and pb is not None and pa != pb and (pa[:2], pa[3]) == (pb[:2], pb[3])
