"""The Node.js that jsii starts when Python loads the CDK library.

``import aws_cdk`` starts a Node.js child process (the jsii runtime) at once. The jsii Python
runtime pinned in requirements (jsii 1.142, ``jsii/_kernel/providers/process.py``) runs
``$JSII_NODE`` if set, else the first ``node`` on ``PATH``. Under ``npx cdk`` that is the
project's Node.js (``package.json`` pins it; ``npm ci`` puts it in ``node_modules/.bin``), but a
direct ``.venv/bin/python app.py``, ``python -m ray_pd_eks`` or ``python -m pytest`` would start
the machine's ``node`` instead, which may be one jsii no longer supports (it prints an
end-of-life banner for Node 20). Each entry point therefore sets ``JSII_NODE`` to the project's
Node.js before it imports the CDK: app.py, ray_pd_eks/__main__.py and tests/__init__.py.

Only the standard library here: it runs before anything else is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def project_node(project_dir: Path = PROJECT_DIR) -> Path | None:
    """``node_modules/.bin/node`` as ``npm ci`` installs it, or None before set-up."""
    node = project_dir / "node_modules" / ".bin" / "node"
    return node if node.is_file() and os.access(node, os.X_OK) else None


def jsii_node_env(
    environ: Mapping[str, str] = os.environ, project_dir: Path = PROJECT_DIR
) -> dict[str, str]:
    """The variables that make jsii start the project's Node.js: ``{"JSII_NODE": <path>}``,
    or nothing when ``JSII_NODE`` is already set (the caller's choice wins) or the project has
    no Node.js installed (jsii then falls back to ``node`` on ``PATH``)."""
    if environ.get("JSII_NODE"):
        return {}
    node = project_node(project_dir)
    return {"JSII_NODE": str(node)} if node else {}


def use_project_node() -> None:
    """Set ``JSII_NODE`` in this process's environment; call before importing ``aws_cdk``."""
    os.environ.update(jsii_node_env())
