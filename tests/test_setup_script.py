"""scripts/setup.sh checks Python (version, venv) and npm before installing anything, and says
what to install. A fake interpreter answers the checks; anything else it is asked exits 99, so
a check that wrongly passes shows as exit 99, never as an install."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup.sh"


def fake_python(tmp_path: Path, *, version: str, has_venv: bool) -> Path:
    major, minor = (int(p) for p in version.split(".")[:2])
    # setup.sh's version check: exit 1 below 3.11, 2 above 3.12.
    old = 1 if (major, minor) < (3, 11) else 2 if (major, minor) > (3, 12) else 0
    script = tmp_path / "python-fake"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n'
        f'  --version) echo "Python {version}" ;;\n'
        f"  *version_info*) exit {old} ;;\n"
        f"  *ensurepip*) exit {0 if has_venv else 1} ;;\n"
        '  *) echo "$*" >> "$0.calls"; exit 99 ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return script


def run_setup(python: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": python}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True)


def test_a_python_older_than_3_11_is_refused_with_what_to_install(tmp_path: Path) -> None:
    done = run_setup(str(fake_python(tmp_path, version="3.10.12", has_venv=True)))
    assert done.returncode == 1
    assert (
        "setup: Python 3.10.12 is too old: this project needs Python 3.11 or newer" in done.stderr
    )
    assert "PYTHON=python3.12 ./scripts/setup.sh" in done.stderr


@pytest.mark.parametrize("version", ["3.11.0", "3.12.9"])
def test_python_3_11_and_3_12_pass_the_version_check(tmp_path: Path, version: str) -> None:
    done = run_setup(str(fake_python(tmp_path, version=version, has_venv=True)))
    assert done.returncode == 99, done.stderr  # went on to `python -m venv`


@pytest.mark.parametrize("version", ["3.13.0", "3.14.1"])
def test_a_python_the_lock_does_not_install_on_is_refused_cleanly(
    tmp_path: Path, version: str
) -> None:
    """3.13: the lock lacks what libcst pulls in there (pip's raw hash error otherwise)."""
    done = run_setup(str(fake_python(tmp_path, version=version, has_venv=True)))
    assert done.returncode == 1
    assert f"setup: Python {version} is not supported yet: the pinned dependencies" in done.stderr
    assert "install Python 3.11 or 3.12" in done.stderr
    assert "PYTHON=python3.12 ./scripts/setup.sh" in done.stderr


@pytest.mark.parametrize(
    ("made_with", "args"),
    [("3.13.0", "-m venv --clear .venv"), ("3.12.1", "-m venv .venv"), (None, "-m venv .venv")],
)
def test_a_venv_of_another_python_is_made_anew(
    tmp_path: Path, made_with: str | None, args: str
) -> None:
    """A .venv left by another interpreter (a failed 3.13 run) is cleared, not mixed into."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "setup.sh").write_text(SETUP.read_text())
    if made_with:
        (project / ".venv").mkdir()
        (project / ".venv" / "pyvenv.cfg").write_text(f"home = /x\nversion = {made_with}\n")
    python = fake_python(tmp_path, version="3.12.3", has_venv=True)
    env = {**os.environ, "PYTHON": str(python)}
    done = subprocess.run(
        ["bash", str(project / "scripts" / "setup.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 99, done.stderr
    assert Path(f"{python}.calls").read_text().splitlines()[-1] == args
    assert ("making it anew with Python 3.12.3" in done.stderr) == ("--clear" in args)


def test_a_python_without_venv_says_which_package_adds_it(tmp_path: Path) -> None:
    done = run_setup(str(fake_python(tmp_path, version="3.12.3", has_venv=False)))
    assert done.returncode == 1
    assert "has no venv/ensurepip module" in done.stderr
    assert "apt install python3-venv" in done.stderr


def test_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    done = run_setup(str(tmp_path / "no-such-python"))
    assert done.returncode == 1
    assert "no-such-python' not found: install Python 3.11 or 3.12" in done.stderr


@pytest.mark.parametrize("with_npm", [False, True])
def test_npm_is_checked_before_anything_is_installed(tmp_path: Path, with_npm: bool) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "sh", "bash"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    if with_npm:
        (bin_dir / "npm").write_text("#!/bin/sh\nexit 98\n")
        (bin_dir / "npm").chmod(0o755)
    python = fake_python(tmp_path, version="3.12.3", has_venv=True)
    done = run_setup(str(python), path=str(bin_dir))
    if with_npm:
        assert done.returncode == 99, done.stderr
    else:
        assert done.returncode == 1
        assert "setup: npm not found: install Node.js with npm" in done.stderr


def _lock() -> dict[str, list[str]]:
    """requirements-lock.txt as normalized name==version -> its sha256 hashes."""
    entries: dict[str, list[str]] = {}
    current = ""
    for raw in (ROOT / "requirements-lock.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("--hash=sha256:"):
            entries[current].append(line.removeprefix("--hash=sha256:"))
        else:
            current = re.sub(r"[-_.]+", "-", line.lower())
            entries[current] = []
    return entries


def test_every_pin_is_in_the_hashed_lock_and_every_lock_entry_has_hashes() -> None:
    lock = _lock()
    assert lock and all(
        hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes) for hashes in lock.values()
    ), [k for k, v in lock.items() if not v]
    assert all("==" in name for name in lock)
    assert any(name.startswith("pip==") for name in lock)  # pip itself is pinned
    for requirements in ("requirements.txt", "requirements-dev.txt"):
        for raw in (ROOT / requirements).read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("-r "):
                continue
            assert re.sub(r"[-_.]+", "-", line.lower()) in lock, (requirements, line)


def test_setup_installs_only_hashed_files() -> None:
    text = SETUP.read_text()
    assert "--require-hashes -r requirements-lock.txt" in text
    assert "-c requirements-lock.txt" not in text
