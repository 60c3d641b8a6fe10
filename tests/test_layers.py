"""Layers point one way (docs/architecture.md, "Layout and choices"): ``ray_pd_eks`` (config,
instance data, CLI) at the bottom, ``pd_constructs`` above it, ``stacks`` above that,
``app.py`` on top. A module may import its own layer and the ones below, never one above."""

from __future__ import annotations

import ast

import pytest

from tests.synth import ROOT

LAYERS = ("ray_pd_eks", "pd_constructs", "stacks")


def upward_imports(source: str, layer: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source`` (function bodies included) of a layer
    above ``layer``."""
    above = LAYERS[LAYERS.index(layer) + 1 :]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in above]
    return sorted(found)


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_no_module_imports_a_layer_above_its_own(layer: str) -> None:
    modules = sorted((ROOT / layer).rglob("*.py"))
    assert len(modules) > 3
    found = [
        f"{m.relative_to(ROOT)}:{line} imports {name}"
        for m in modules
        for line, name in upward_imports(m.read_text(), layer)
    ]
    assert found == []


def test_an_upward_import_is_found_wherever_it_stands() -> None:
    source = (
        "import os\n"
        "import pd_constructs.helm\n"
        "from ray_pd_eks.config import AppConfig\n"
        "def f():\n"
        "    from stacks.stage import RayPdEksStage\n"
    )
    assert upward_imports(source, "ray_pd_eks") == [
        (2, "pd_constructs.helm"),
        (5, "stacks.stage"),
    ]
    assert upward_imports(source, "pd_constructs") == [(5, "stacks.stage")]
