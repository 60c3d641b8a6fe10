"""The application endpoint as deployed: its stack outputs, and an access token for it.

The workload stack's outputs (``EndpointUrl``, ``EndpointUserPoolId``, ``EndpointClientId``,
``EndpointTokenUrl``, ``EndpointScope``) say where the endpoint is and who issues its tokens.
With the stack's own Cognito pool, a token is fetched the way an application would: the app
client's secret from ``cognito-idp:DescribeUserPoolClient``, then the OAuth 2.0
client-credentials grant at the pool's ``/oauth2/token``. Neither the secret nor the token is
ever printed. With an existing identity provider the token comes from the environment.
"""

from __future__ import annotations

import argparse
import base64
import json
import urllib.parse
from dataclasses import dataclass

from botocore import exceptions as bce

from ray_pd_eks.cli import https
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.aws import error_code
from ray_pd_eks.cli.errors import DEPLOY_COMMAND, AccessError, CheckFailed, UsageError

# The app is one Stage "RayPdEks" (app.py); a pipeline stage's stacks are RayPdEks-<env>-*.
DEFAULT_STACK = "RayPdEks-Workload"
TOKEN_ENV = "TOKEN"  # the variable the printed commands and the outputs use


@dataclass(frozen=True)
class Endpoint:
    """What the workload stack's outputs say about the application endpoint."""

    stack: str
    url: str
    auth: str
    issuer: str = ""
    scope: str = ""
    user_pool_id: str = ""
    client_id: str = ""
    token_url: str = ""

    @property
    def uses_cognito(self) -> bool:
        return bool(self.user_pool_id and self.client_id and self.token_url)


def add_stack_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack",
        default=None,
        metavar="NAME",
        help=f"the workload stack whose outputs describe the endpoint (default: {DEFAULT_STACK}, "
        "or <deploymentName>-RayPdEks-Workload; a pipeline stage's is RayPdEks-<env>-Workload)",
    )


def describe(app: App, stack: str | None) -> Endpoint:
    """The endpoint from the stack's outputs (``stack``, or the settings' workload stack);
    exit 3 with the fix when it is not deployed."""
    stack = stack or f"{app.stage_id}-Workload"
    aws = app.aws
    aws.identity()
    with aws.errors("cloudformation:DescribeStacks"):
        try:
            stacks = aws.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
        except bce.ClientError as err:
            if error_code(err) != "ValidationError":
                raise
            stacks = []
    if not stacks:
        raise AccessError(
            f"stack {stack} not found in {aws.region}: deploy it (`{DEPLOY_COMMAND}`) or name "
            "yours with --stack"
        )
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    if "EndpointUrl" not in outputs:
        raise AccessError(
            f"stack {stack} has no application endpoint (no EndpointUrl output): deploy it with "
            "endpointExposure set, or wait for the deploy in progress to finish"
        )
    return Endpoint(
        stack=stack,
        url=outputs["EndpointUrl"],
        auth=outputs.get("EndpointAuth", "jwt"),
        issuer=outputs.get("EndpointJwtIssuer", ""),
        scope=outputs.get("EndpointScope", ""),
        user_pool_id=outputs.get("EndpointUserPoolId", ""),
        client_id=outputs.get("EndpointClientId", ""),
        token_url=outputs.get("EndpointTokenUrl", ""),
    )


def _client_secret(app: App, endpoint: Endpoint) -> str:
    aws = app.aws
    client = aws.unless_missing(
        "cognito-idp:DescribeUserPoolClient",
        lambda: aws.client("cognito-idp").describe_user_pool_client(
            UserPoolId=endpoint.user_pool_id, ClientId=endpoint.client_id
        )["UserPoolClient"],
    )
    if client is None:
        raise AccessError(
            f"app client {endpoint.client_id} of user pool {endpoint.user_pool_id} not "
            f"found: the stack {endpoint.stack} may be out of date; redeploy it"
        )
    secret = client.get("ClientSecret")
    if not secret:
        raise AccessError(f"app client {endpoint.client_id} has no secret: redeploy the stack")
    return str(secret)


def cognito_token(app: App, endpoint: Endpoint) -> str:
    """An access token of the stack's Cognito app client (client-credentials grant)."""
    secret = _client_secret(app, endpoint)
    basic = base64.b64encode(f"{endpoint.client_id}:{secret}".encode()).decode("ascii")
    form = {"grant_type": "client_credentials"}
    if endpoint.scope:
        form["scope"] = endpoint.scope
    response = https.request(
        "POST",
        endpoint.token_url,
        context=app.runtime.ssl_context(),
        clock=app.runtime.clock,
        headers={
            "Authorization": f"Basic {basic}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
        body=urllib.parse.urlencode(form).encode(),
    )
    try:
        answer = json.loads(response.body)
    except json.JSONDecodeError:
        answer = {}
    if response.status != 200 or not isinstance(answer, dict) or "access_token" not in answer:
        reason = answer.get("error", "") if isinstance(answer, dict) else ""
        raise AccessError(
            f"the token endpoint {endpoint.token_url} answered {response.status} "
            f"{reason or '(no access_token)'}: check that the app client allows the "
            f"client-credentials grant for scope {endpoint.scope or '(none)'}"
        )
    return str(answer["access_token"])


def bearer_token(app: App, endpoint: Endpoint) -> str | None:
    """The token for the endpoint's requests, or None when it has no authentication."""
    if endpoint.auth == "none":
        return None
    if endpoint.uses_cognito:
        return cognito_token(app, endpoint)
    token = app.runtime.getenv(TOKEN_ENV)
    if not token:
        raise UsageError(
            f"the endpoint validates tokens of {endpoint.issuer or 'an existing identity provider'}"
            f" (scope {endpoint.scope or '-'}): get one from it and `export {TOKEN_ENV}=...`, "
            "or use --via-api-server"
        )
    return token


def check_status(what: str, response: https.Response) -> None:
    """The load balancer's answer as a finding: 401/403 is the token, 502/503 the targets."""
    if response.status == 200:
        return
    if response.status in (401, 403):
        raise CheckFailed(
            f"{what}: {response.status} from the load balancer: the token was rejected "
            "(issuer, expiry, scope or audience); see docs/endpoint.md"
        )
    if response.status in (502, 503, 504):
        raise CheckFailed(
            f"{what}: {response.status}: the load balancer has no healthy target; check the app "
            "(`ray-pd-eks status`) and the TargetGroupBinding "
            "(`kubectl get targetgroupbinding -A`)"
        )
    raise CheckFailed(f"{what}: HTTP {response.status}: {response.body[:200]!r}")
