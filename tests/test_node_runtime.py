"""jsii runs the Node.js the project pins, whichever way Python loads the CDK library."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from ray_pd_eks.node_runtime import jsii_node_env, project_node
from tests.synth import ROOT


def test_jsii_runs_the_projects_pinned_node() -> None:
    """The Node.js process this session's CDK objects live in is node_modules/.bin/node, at
    the version package.json pins (not whatever ``node`` comes first on PATH)."""
    import aws_cdk  # noqa: F401  (loaded already by the session; starts jsii if not)
    from jsii._runtime import kernel

    args = kernel.provider._process._process.args  # type: ignore[attr-defined]
    assert Path(args[0]) == ROOT / "node_modules" / ".bin" / "node", args
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["node"]
    version = subprocess.run([args[0], "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"v{pinned}"


# Modules an entry point may import before setting JSII_NODE: none of them loads jsii.
_BEFORE_JSII = {"__future__", "os", "sys", "collections.abc", "pathlib", "typing"}


def _env_update_precedes_other_imports(path: Path) -> bool:
    """Whether ``os.environ.update(jsii_node_env())`` runs at module level before any import
    other than the standard library's basics and ray_pd_eks.node_runtime."""
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Import):
            if any(alias.name not in _BEFORE_JSII for alias in stmt.names):
                return False
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.module not in _BEFORE_JSII | {"ray_pd_eks.node_runtime"}:
                return False
        elif (
            isinstance(stmt, ast.Expr) and ast.unparse(stmt) == "os.environ.update(jsii_node_env())"
        ):
            return True
    return False


def test_entry_points_set_jsii_node_before_anything_can_load_the_cdk(tmp_path: Path) -> None:
    for entry in ("app.py", "tests/__init__.py"):
        assert _env_update_precedes_other_imports(ROOT / entry), entry
    # ray-pd-eks and python -m ray_pd_eks: console.py sets it before importing the CLI, and
    # imports nothing of the CDK before that.
    console = (ROOT / "ray_pd_eks" / "console.py").read_text()
    body = console.split("def _cli_main(", 1)[1]
    assert body.index("os.environ.update(jsii_node_env())") < body.index(
        "from ray_pd_eks.cli.main import main"
    )
    assert "aws_cdk" not in console.split("def _cli_main(", 1)[0]
    # The check itself: an import of the CDK first is caught.
    late = tmp_path / "late.py"
    late.write_text(
        "import os\nimport aws_cdk\nfrom ray_pd_eks.node_runtime import jsii_node_env\n"
        "os.environ.update(jsii_node_env())\n"
    )
    assert not _env_update_precedes_other_imports(late)


def test_jsii_node_env_points_at_the_installed_node(tmp_path: Path) -> None:
    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    assert jsii_node_env({}, tmp_path) == {}  # before `npm ci`: jsii uses PATH's node
    node = bin_dir / "node"
    node.write_text("#!/bin/sh\n")
    node.chmod(0o644)
    assert project_node(tmp_path) is None  # not executable
    node.chmod(0o755)
    assert jsii_node_env({}, tmp_path) == {"JSII_NODE": str(node)}
    assert jsii_node_env({"JSII_NODE": "/opt/node/bin/node"}, tmp_path) == {}  # caller's wins
    assert jsii_node_env({"JSII_NODE": ""}, tmp_path) == {"JSII_NODE": str(node)}
