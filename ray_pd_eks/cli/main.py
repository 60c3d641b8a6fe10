"""Argument parsing and dispatch for ``ray-pd-eks`` (``python -m ray_pd_eks``).

The global flags (``-c``, ``--region``, ``--profile``, ``--debug``, ``--cdk-json``) are accepted
before and after the command name, because people type both
``ray-pd-eks --region X status`` and ``ray-pd-eks status --region X``.
"""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from ray_pd_eks.cli import (
    alarm_queries,
    bench,
    coldstart,
    drill,
    efa_check,
    endpoint,
    preflight,
    rehearse,
    settings_command,
    smoke,
    status,
)
from ray_pd_eks.cli.app import App, Runtime
from ray_pd_eks.cli.errors import CLI, DEPLOY_COMMAND, EXIT_CODES_HELP, CliError, UsageError
from ray_pd_eks.cli.settings import DEFAULT_CDK_JSON, load_config, load_environment_config

COMMANDS: tuple[ModuleType, ...] = (
    settings_command,
    preflight,
    rehearse,
    status,
    endpoint,
    smoke,
    alarm_queries,
    efa_check,
    drill,
    coldstart,
    bench,
)
PROG = CLI  # also `python -m ray_pd_eks`

DESCRIPTION = """\
Operate the prefill/decode LLM endpoint that this CDK app deploys on EKS: check an account
before a deploy, watch the RayService come up, reach the endpoint, smoke-test it, prove the
KV cache moves over EFA and benchmark it. Reads the same settings as `cdk synth` (-c key=value
over settings.local.json over cdk.json) and talks to the cluster with your AWS credentials (no
kubectl needed)."""

_TYPICAL = (
    ("settings --set KEY=VALUE", "once: your admins, IP, region (settings.local.json)"),
    ("preflight", f"before `{DEPLOY_COMMAND}`"),
    ("rehearse", "the serve config on this machine's GPU or CPU, first"),
    ("status --watch", "while the deploy waits for the model"),
    ("smoke", "one chat completion (load balancer or API server)"),
    ("alarm-queries", "does every alarm see series? (after some traffic)"),
    ("efa-check", "LIBFABRIC (EFA) or UCX (TCP fallback)?"),
    ("drill decode-restart --yes", "time the recovery from a lost engine"),
    ("endpoint", "the URL, how to get a token, curl lines"),
    ("bench", "TTFT, ITL, throughput and cost per token"),
    ("coldstart", "where a GPU node's minutes went, beside the model"),
)
EPILOG = (
    "typical order:\n"
    + "".join(f"  {f'{PROG} {cmd}':<36}  {why}\n" for cmd, why in _TYPICAL)
    + "\n"
    + EXIT_CODES_HELP
)


def _add_global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    # After the command, defaults are suppressed so they do not overwrite values given before it;
    # -c gets its own list so pairs given in both places add up.
    default = argparse.SUPPRESS if after_command else None
    group = parser.add_argument_group("settings and access")
    group.add_argument(
        "-c",
        "--context",
        dest="context_after" if after_command else "context",
        action="append",
        default=argparse.SUPPRESS if after_command else [],
        metavar="KEY=VALUE",
        help="override a cdk.json context value, as with `cdk -c` (repeatable)",
    )
    group.add_argument(
        "--cdk-json",
        type=Path,
        default=argparse.SUPPRESS if after_command else DEFAULT_CDK_JSON,
        metavar="PATH",
        help="the cdk.json whose context to read (default: the repository's)",
    )
    group.add_argument(
        "--env",
        default=default,
        metavar="NAME",
        help="operate the pipeline environment NAME of cdk.json: its overrides, account, region "
        "and stacks (RayPdEks-NAME-*), without settings.local.json",
    )
    group.add_argument(
        "--region",
        default=default,
        help="AWS region (default: context 'region', then $AWS_REGION, then "
        "$AWS_DEFAULT_REGION or the profile's region)",
    )
    group.add_argument(
        "--profile",
        default=default,
        help="AWS named profile to use (default: $AWS_PROFILE, else the default profile)",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if after_command else False,
        help="show tracebacks and API details on errors",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        sub = commands.add_parser(
            module.NAME,
            help=module.HELP,
            description=module.DESCRIPTION,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        _add_global_options(sub, after_command=True)
        sub.set_defaults(handler=module.run, needs_config=getattr(module, "NEEDS_CONFIG", True))
    return parser


def main(argv: Sequence[str] | None = None, runtime: Runtime | None = None) -> int:
    """Run one command; return its exit code (argparse exits 2 itself on bad flags)."""
    runtime = runtime or Runtime()
    args = build_parser().parse_args(argv)
    args.context = [*args.context, *getattr(args, "context_after", [])]
    handler: Callable[[App], int] = args.handler
    try:
        config = None
        if args.env and not args.needs_config:
            raise UsageError(
                f"--env {args.env}: `{args.command}` works on settings.local.json, which pipeline "
                "environments do not read; their settings are their overrides in cdk.json"
            )
        if args.env:
            config = load_environment_config(args.cdk_json, args.context, args.env, runtime.getenv)
        elif args.needs_config:
            config = load_config(args.cdk_json, args.context, runtime.getenv)
        return handler(App(args, config, runtime))
    except CliError as err:
        if args.debug:
            traceback.print_exc(file=runtime.stderr)
        runtime.stderr.write(f"error: {err.message}\n")
        return err.exit_code
    except KeyboardInterrupt:
        runtime.stderr.write("interrupted\n")
        return 130
