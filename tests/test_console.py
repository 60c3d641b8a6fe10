"""The `ray-pd-eks` console script and how every command ends: from any folder, and without a
traceback on a closed pipe or Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from ray_pd_eks import console
from tests.synth import ROOT

CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_the_console_script_runs_from_another_folder(tmp_path: Path) -> None:
    """What setup.sh installs into .venv/bin: no PYTHONPATH, not the repository's folder."""
    script = console.install(tmp_path, Path(sys.executable))
    assert script.name == "ray-pd-eks"
    done = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, env=CLEAN_ENV, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ray-pd-eks ")
    assert "ray-pd-eks settings --set KEY=VALUE" in done.stdout


def test_setup_installs_the_console_script() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert ".venv/bin/python -m ray_pd_eks.console install" in setup


def test_a_closed_pipe_ends_quietly() -> None:
    """`ray-pd-eks settings | head -1`: the reader is gone before the tool writes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_pd_eks", "settings"],
        cwd=ROOT,
        env=CLEAN_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == console.EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_ctrl_c_says_interrupted_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(argv: Sequence[str] | None) -> int:
        raise KeyboardInterrupt

    assert console.run([], main=interrupted) == console.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted\n"


def test_ctrl_c_while_starting_leaves_no_traceback(tmp_path: Path) -> None:
    """The console script catches Ctrl-C from its first statement on. (``python -m`` has a
    window inside CPython's runpy, before any of the package's code runs, that nothing in the
    package can cover.)"""
    script = console.install(tmp_path, Path(sys.executable))
    proc = subprocess.Popen(
        [str(script), "settings"],
        cwd=ROOT,
        env=CLEAN_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    # Before Python installs its handler the signal kills it (-2); after, the tool says so.
    assert code in (-signal.SIGINT, console.EXIT_INTERRUPTED), (code, err)
    assert "Traceback" not in err, err
