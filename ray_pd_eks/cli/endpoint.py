"""``endpoint``: how to reach the OpenAI-compatible endpoint from this machine.

With ``endpointExposure`` set, the stack owns an HTTPS load balancer: the URL and the exact
commands to get a token and call the model come from the workload stack's outputs (one
``cloudformation:DescribeStacks``). Otherwise the serve service is ClusterIP only, so the way in
is a ``kubectl port-forward``: printing those lines needs no AWS call; ``--run`` starts the
forward (in either case).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex

from ray_pd_eks import endpoint_commands as commands
from ray_pd_eks.cli import alb
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import EXIT_ACCESS, EXIT_OK, UsageError
from ray_pd_eks.config import AppConfig, set_hint

NAME = "endpoint"
HELP = "print the endpoint's URL, how to get a token and the curl/OpenAI lines (or --run)"
DESCRIPTION = """\
With endpointExposure set: print the application endpoint's URL (from the workload stack's
outputs), the command that gets an access token (the stack's Cognito client; its secret goes
from Cognito to curl and is never shown) and the curl and OpenAI Python lines that call it.

Otherwise: print the kubectl port-forward to <rayServiceName>-serve-svc:8000 and the curl
lines that list the models and send one chat completion; no AWS call is made.

With --run, start the port-forward (needs kubectl with a kubeconfig for the cluster:
`aws eks update-kubeconfig`); stop it with Ctrl-C."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", action="store_true", help="run the port-forward with kubectl (Ctrl-C stops it)"
    )
    parser.add_argument(
        "--local-port",
        type=int,
        default=8000,
        metavar="PORT",
        help="local port to forward (default: 8000)",
    )
    alb.add_stack_argument(parser)


def port_forward_argv(config: AppConfig, local_port: int) -> list[str]:
    service = f"svc/{config.ray_service_name}-serve-svc"
    return ["kubectl", "port-forward", "-n", config.namespace, service, f"{local_port}:8000"]


def curl_lines(config: AppConfig, local_port: int) -> list[str]:
    base = f"http://localhost:{local_port}"
    body = {
        "model": config.model_id,
        "messages": [{"role": "user", "content": "What is prefill/decode disaggregation?"}],
        "max_tokens": 128,
        "temperature": 0,
    }
    return [
        f"curl -s {base}/v1/models",
        f"curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps(body))}",
    ]


# When neither the settings nor the environment name a region: the shell fills it in, or stops
# with this line (aws eks would otherwise use the profile's region, perhaps not the deploy's).
REGION_FROM_SHELL = '"${AWS_REGION:?set AWS_REGION to your deploy region}"'


def update_kubeconfig_line(config: AppConfig, region: str | None, profile: str | None) -> str:
    line = f"aws eks update-kubeconfig --name {config.cluster_name}"
    line += f" --region {region or REGION_FROM_SHELL}"
    if profile:
        line += f" --profile {profile}"
    return line


def application_lines(app: App, endpoint: alb.Endpoint) -> list[str]:
    """The URL, the token step and the calls, with the deployed ids filled in."""
    config = app.config
    bearer = endpoint.auth != "none"
    auth = f' -H "Authorization: Bearer ${alb.TOKEN_ENV}"' if bearer else ""
    lines = [
        f"Application endpoint of RayService {config.ray_service_name}: {endpoint.url}",
        f"({config.endpoint_exposure} load balancer, authentication {endpoint.auth}; stack "
        f"{endpoint.stack})",
        "",
    ]
    step = 1
    if endpoint.uses_cognito:
        token = commands.token_command(
            token_url=endpoint.token_url,
            user_pool_id=endpoint.user_pool_id,
            client_id=endpoint.client_id,
            region=app.aws.region,
            scope=endpoint.scope,
        )
        lines += [
            f"{step}. Get an access token (valid one hour; the app client's secret goes from "
            "Cognito to curl, never to the screen):",
            f"   {token}",
        ]
        step += 1
    elif bearer:
        wants = ", ".join(
            x
            for x in (
                f"audience {config.endpoint_jwt_audience}" if config.endpoint_jwt_audience else "",
                f"scope {endpoint.scope}" if endpoint.scope else "",
            )
            if x
        )
        lines += [
            f"{step}. Get an access token from {endpoint.issuer} ({wants}) and:",
            f"   export {alb.TOKEN_ENV}=<the access token>",
        ]
        step += 1
    lines += [
        f"{step}. List the models and ask one question:",
        f"   curl -s {endpoint.url}/v1/models{auth}",
        f"   {commands.curl_command(endpoint.url, config.model_id, bearer=bearer)}",
        f"{step + 1}. From Python (pip install openai; the token is the API key):",
        f"   {commands.openai_python_command(endpoint.url, config.model_id, bearer=bearer)}",
        "",
        "docs/endpoint.md has the token flow for applications. Without the load balancer: "
        "this command's --run starts a kubectl port-forward.",
    ]
    return lines


def run(app: App) -> int:
    config = app.config
    port = app.args.local_port
    if not 0 < port < 65536:
        raise UsageError(f"--local-port {port}: must be 1..65535")
    if config.endpoint_exposed and not app.args.run:
        app.print(*application_lines(app, alb.describe(app, app.args.stack)))
        return EXIT_OK
    # Print-only mode must work offline: do not create a session just to learn its region.
    getenv = app.runtime.getenv
    region = (
        app.args.region or config.region or getenv("AWS_REGION") or getenv("AWS_DEFAULT_REGION")
    )
    forward = port_forward_argv(config, port)
    app.print(
        f"Endpoint of RayService {config.ray_service_name} "
        f"(namespace {config.namespace}, cluster {config.cluster_name})",
        "",
        "1. Point kubectl at the cluster (once):",
        f"   {update_kubeconfig_line(config, region, app.args.profile)}",
        "2. Forward the serve service to this machine (keep it running):",
        f"   {shlex.join(forward)}",
        "3. In another terminal, list the models and ask one question:",
        *(f"   {line}" for line in curl_lines(config, port)),
        "",
        "For applications: an HTTPS endpoint with tokens, owned by the stack "
        f"({set_hint('endpointExposure', 'internal|internet-facing')}): docs/endpoint.md",
    )
    if not app.args.run:
        return EXIT_OK
    kubectl = app.runtime.which("kubectl")
    if kubectl is None:
        raise UsageError(
            "kubectl not found on PATH: install it (https://kubernetes.io/docs/tasks/tools/) "
            "or run the printed command where it is installed"
        )
    env = dict(os.environ)
    if app.args.profile:
        # The kubeconfig's exec plugin calls `aws eks get-token`, which reads AWS_PROFILE.
        env["AWS_PROFILE"] = app.args.profile
    app.print("", f"Running: {shlex.join(forward)}  (Ctrl-C to stop)")
    try:
        code = app.runtime.run_process([kubectl, *forward[1:]], env)
    except KeyboardInterrupt:
        return EXIT_OK
    if code != 0:
        app.warn(
            f"error: kubectl port-forward exited with {code}: check `kubectl get svc -n "
            f"{config.namespace}` and that the kubeconfig is set "
            f"(`{update_kubeconfig_line(config, region, app.args.profile)}`)"
        )
        return EXIT_ACCESS
    return EXIT_OK
