"""The commands that call the application endpoint, written once for the stack's outputs and
for the CLI's ``endpoint`` command.

Arguments may be CloudFormation tokens (the stack passes the load balancer's DNS name, the
user pool's id): the functions only concatenate strings, which CDK resolves in outputs.
"""

from __future__ import annotations

import json
import shlex

TOKEN_VARIABLE = "TOKEN"
PROMPT = "What is prefill/decode disaggregation?"


def endpoint_url(host: str) -> str:
    return f"https://{host}"


def client_secret_command(*, user_pool_id: str, client_id: str, region: str) -> str:
    """Prints the app client's secret (Cognito keeps it; read it only where you use it)."""
    return (
        f"aws cognito-idp describe-user-pool-client --user-pool-id {user_pool_id} "
        f"--client-id {client_id} --region {region} --query UserPoolClient.ClientSecret "
        "--output text"
    )


def token_command(
    *, token_url: str, user_pool_id: str, client_id: str, region: str, scope: str
) -> str:
    """One shell line that sets ``$TOKEN`` to an access token of the created Cognito client
    (OAuth 2.0 client-credentials grant; the secret goes from the AWS CLI straight into curl's
    basic-auth header and is never printed)."""
    secret = client_secret_command(user_pool_id=user_pool_id, client_id=client_id, region=region)
    extract = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])'"
    return (
        f'export {TOKEN_VARIABLE}=$(curl -s -u "{client_id}:$({secret})" '
        f"-d grant_type=client_credentials -d scope={scope} {token_url} | {extract})"
    )


def chat_body(model_id: str) -> str:
    return json.dumps(
        {"model": model_id, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 128}
    )


def curl_command(url: str, model_id: str, *, bearer: bool) -> str:
    """``curl`` of one chat completion; with ``bearer``, the token from ``$TOKEN``."""
    auth = f' -H "Authorization: Bearer ${TOKEN_VARIABLE}"' if bearer else ""
    return (
        f"curl -s {url}/v1/chat/completions{auth} -H 'Content-Type: application/json' "
        f"-d {shlex.quote(chat_body(model_id))}"
    )


def openai_python_command(url: str, model_id: str, *, bearer: bool) -> str:
    """The OpenAI Python client: the bearer token is its ``api_key`` (it sends
    ``Authorization: Bearer <api_key>``); without authentication any placeholder key works."""
    key = f"os.environ['{TOKEN_VARIABLE}']" if bearer else "'unused'"
    code = (
        "import os, openai; "
        f"client = openai.OpenAI(base_url='{url}/v1', api_key={key}); "
        f"reply = client.chat.completions.create(model='{model_id}', "
        f"messages=[{{'role': 'user', 'content': '{PROMPT}'}}]); "
        "print(reply.choices[0].message.content)"
    )
    return f'python3 -c "{code}"'
