"""``endpoint``: how to reach the OpenAI-compatible endpoint from this machine.

The serve service is ClusterIP only (nothing is exposed to the internet), so the way in is a
``kubectl port-forward``. Printing the lines needs no AWS call; ``--run`` starts the forward.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex

from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import EXIT_ACCESS, EXIT_OK, UsageError
from ray_pd_eks.config import AppConfig

NAME = "endpoint"
HELP = "print (or --run) the port-forward and curl lines for the model endpoint"
DESCRIPTION = """\
Print the kubectl port-forward to <rayServiceName>-serve-svc:8000 and the curl lines that
list the models and send one chat completion. With --run, start the port-forward (needs
kubectl with a kubeconfig for the cluster: `aws eks update-kubeconfig`); stop it with Ctrl-C.
No AWS call is made unless --run is given."""


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


def update_kubeconfig_line(config: AppConfig, region: str | None, profile: str | None) -> str:
    line = f"aws eks update-kubeconfig --name {config.cluster_name}"
    if region:
        line += f" --region {region}"
    if profile:
        line += f" --profile {profile}"
    return line


def run(app: App) -> int:
    config = app.config
    port = app.args.local_port
    if not 0 < port < 65536:
        raise UsageError(f"--local-port {port}: must be 1..65535")
    # Print-only mode must work offline: do not create a session just to learn its region.
    region = app.args.region or config.region or None
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
