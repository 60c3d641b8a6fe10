"""The ``ray-pd-eks`` command: the operations CLI's entry point, and its console script.

``run`` is what ``ray-pd-eks`` and ``python -m ray_pd_eks`` execute: the CLI's ``main``, plus
the two ways a command-line tool ends that are not errors of the tool. A closed pipe
(``ray-pd-eks settings | head -1``) ends quietly with 141, as a shell's SIGPIPE would, and
Ctrl-C (even while the modules still import) ends with "interrupted" and 130; neither prints a
traceback.

``install`` writes the console script into a virtual environment's ``bin``. The project has
no build backend, and none is needed for one script: it runs the venv's Python on this
checkout (``sys.path`` gets the repository root, as an editable install would), so it works
from any folder, whatever Python is first on PATH. ``scripts/setup.sh`` calls it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ray_pd_eks.config import CLI_NAME

REPO_ROOT = Path(__file__).resolve().parent.parent
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left
EXIT_INTERRUPTED = 130  # 128 + SIGINT

SCRIPT = """\
#!{python}
# The ray-pd-eks console script, written by scripts/setup.sh (ray_pd_eks/console.py).
import sys

try:
    sys.path.insert(0, {repo!r})
    from ray_pd_eks.console import run
except KeyboardInterrupt:  # Ctrl-C while the tool starts
    sys.stderr.write("interrupted\\n")
    sys.exit(130)
sys.exit(run())
"""


def _cli_main(argv: Sequence[str] | None) -> int:
    from ray_pd_eks.node_runtime import jsii_node_env

    # Commands that synthesize import aws_cdk, which starts jsii's Node.js: the project's.
    os.environ.update(jsii_node_env())
    from ray_pd_eks.cli.main import main

    return main(argv)


def run(
    argv: Sequence[str] | None = None, main: Callable[[Sequence[str] | None], int] = _cli_main
) -> int:
    """Run one command; its exit code, 141 on a closed stdout, 130 on Ctrl-C."""
    try:
        code = main(argv)
        sys.stdout.flush()  # a pipe closed early fails here, not at interpreter exit
        return code
    except BrokenPipeError:
        # Python's advice (library docs, "Note on SIGPIPE"): point stdout at devnull so the
        # interpreter's own flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


def install(bin_dir: Path, python: Path, repo: Path = REPO_ROOT) -> Path:
    """Write ``bin_dir/ray-pd-eks`` running ``python`` on ``repo``; return its path."""
    script = bin_dir / CLI_NAME
    script.write_text(SCRIPT.format(python=python, repo=str(repo)), encoding="utf-8")
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    # python -m ray_pd_eks.console install: into the running interpreter's venv.
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m ray_pd_eks.console install")
    venv_bin = Path(sys.executable).parent
    print(f"installed {install(venv_bin, Path(sys.executable))}")
