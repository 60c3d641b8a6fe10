"""What every command receives: the parsed flags, the validated config, and injectable effects.

:class:`Runtime` gathers everything with a side effect outside the process (streams, the AWS
session, the clock, sleeping, running kubectl) so tests drive real commands without sleeping,
without AWS and without a terminal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from ray_pd_eks.cli.aws import Aws, SessionFactory, default_session
from ray_pd_eks.config import STAGE_ID, AppConfig


def _run_process(argv: Sequence[str], env: Mapping[str, str] | None) -> int:
    return subprocess.call(list(argv), env=dict(env) if env is not None else None)


def _capture_process(argv: Sequence[str]) -> tuple[int, str]:
    """(exit status, stdout) of a short local command; 127 and the reason when it cannot run."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return result.returncode, result.stdout


@dataclass
class Runtime:
    """Side effects of the tool; the defaults are the real ones."""

    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    session_factory: SessionFactory = default_session
    clock: Callable[[], float] = time.monotonic  # for intervals and timeouts
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # vs API timestamps
    sleep: Callable[[float], None] = time.sleep
    which: Callable[[str], str | None] = shutil.which
    run_process: Callable[[Sequence[str], Mapping[str, str] | None], int] = _run_process
    # A short command whose output is read (``nvidia-smi -L``).
    capture_process: Callable[[Sequence[str]], tuple[int, str]] = _capture_process
    # HTTPS to the application endpoint and its token endpoint (tests trust a loopback CA).
    ssl_context: Callable[[], ssl.SSLContext] = ssl.create_default_context
    getenv: Callable[[str], str | None] = os.environ.get


class App:
    """One invocation: flags, config, runtime, and the AWS session once a command needs it."""

    def __init__(
        self, args: argparse.Namespace, config: AppConfig | None, runtime: Runtime
    ) -> None:
        """``config`` None: the command reads its settings itself (``settings``, which must
        work on a file that does not validate, to repair it)."""
        self.args = args
        self._config = config
        self.runtime = runtime
        self._aws: Aws | None = None

    @property
    def stage_id(self) -> str:
        """The deployed Stage whose stacks a command reads: the pipeline's stage of ``--env``
        (``RayPdEks-<env>``, as stacks/pipeline_stack.py names it), else the settings' own."""
        env = getattr(self.args, "env", None)
        return f"{STAGE_ID}-{env}" if env else self.config.stage_id

    @property
    def config(self) -> AppConfig:
        if self._config is None:
            raise RuntimeError("this command reads its own configuration")
        return self._config

    def use_aws(self, config: AppConfig) -> Aws:
        """The session for ``config``'s region (a command that built its own configuration)."""
        self._config = self._config or config
        return self.aws

    @property
    def aws(self) -> Aws:
        if self._aws is None:
            self._aws = Aws(
                self.config,
                profile=self.args.profile,
                region=self.args.region,
                session_factory=self.runtime.session_factory,
                getenv=self.runtime.getenv,
            )
        return self._aws

    def print(self, *lines: str) -> None:
        for line in lines:
            self.runtime.stdout.write(line + "\n")

    def warn(self, line: str) -> None:
        self.runtime.stderr.write(line + "\n")

    def debug(self, line: str) -> None:
        if self.args.debug:
            self.runtime.stderr.write(f"debug: {line}\n")
