"""Exit codes and the one-line errors of the command-line tool.

Every failure a user can act on is raised as a :class:`CliError` carrying its exit code, and
``main`` prints only its message: a traceback would bury the one thing to do. ``--debug`` prints
the traceback too, for bug reports.
"""

from __future__ import annotations

from ray_pd_eks.config import CLI_NAME, SETTINGS_SET

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # the tool ran and found a problem (preflight FAIL, not RUNNING, no text)
EXIT_USAGE = 2  # bad flags or settings, or a local prerequisite (kubectl) is missing
EXIT_ACCESS = 3  # cannot reach or read AWS or the cluster: credentials, access, missing resource

# The app is one Stage (app.py: STAGE_ID = "RayPdEks") with no top-level stacks, so
# `cdk deploy --all` selects nothing; the Stage's stacks are selected by this pattern, and
# --concurrency lets the GPU node and workload stacks deploy side by side.
DEPLOY_COMMAND = "npx cdk deploy 'RayPdEks/*' --concurrency 4"


def deploy_command(stage_id: str) -> str:
    """:data:`DEPLOY_COMMAND` for the Stage ``stage_id`` (``<deploymentName>-RayPdEks``)."""
    return DEPLOY_COMMAND.replace("'RayPdEks/*'", f"'{stage_id}/*'")


# The operations CLI's console script (scripts/setup.sh installs it into .venv/bin;
# `python -m ray_pd_eks` is the same tool).
CLI = CLI_NAME
# Settings that must stick (access, the AZ) go where every later command reads them.
SET_COMMAND = SETTINGS_SET
ADD_ADMIN_ME_COMMAND = f"{CLI} settings --add-admin-me"

EXIT_CODES_HELP = """\
exit codes:
  0  ok: every check passed (status: the Serve app is RUNNING)
  1  a check failed (preflight FAIL, app not RUNNING or failed, smoke got no text, UCX fallback)
  2  usage or configuration error (bad flag, invalid context value, kubectl missing)
  3  AWS or Kubernetes access problem (no credentials, access denied, cluster or RayService
     not found, API endpoint unreachable)"""


class CliError(Exception):
    """A failure with a one-line message for the user and the process exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(CliError):
    """Bad flags, settings or local prerequisites (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class AccessError(CliError):
    """AWS or the cluster cannot be reached or read (exit 3)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_ACCESS)


class CheckFailed(CliError):
    """The tool did its job and the answer is 'not healthy' (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_CHECK_FAILED)
