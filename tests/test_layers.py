"""Layers point one way (docs/architecture.md, "Layout and choices"): ``ray_pd_eks`` (config,
instance data, CLI) at the bottom, ``pd_constructs`` above it, ``stacks`` above that,
``app.py`` on top. A module may import its own layer and the ones below, never one above.

Inside ``pd_constructs`` the same holds between its packages, one per concern: ``PACKAGES``
says which others each may import, and each package's ``__init__`` docstring says it in words."""

from __future__ import annotations

import ast
from graphlib import TopologicalSorter

import pytest

from tests.synth import ROOT

LAYERS = ("ray_pd_eks", "pd_constructs", "stacks")

# Each package of pd_constructs -> the other packages of pd_constructs it may import (its own
# modules and ray_pd_eks it always may). A sideways import (serving -> cluster) or an upward one
# (network -> serving) is refused; a new package, or a new need, is a row here first.
_BUILDERS = {"network", "cluster", "observability", "endpoint", "serving", "readiness"}
PACKAGES: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "lifecycle": frozenset({"common"}),
    "network": frozenset({"common", "lifecycle"}),
    "cluster": frozenset({"common", "lifecycle"}),
    "observability": frozenset({"common"}),
    "endpoint": frozenset({"common", "network"}),
    "serving": frozenset({"common", "lifecycle", "network"}),
    "readiness": frozenset({"common", "lifecycle", "endpoint"}),
    "inventory": frozenset({"common", "lifecycle", *_BUILDERS}),
}


def _imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``source``, function bodies included; a
    relative import is returned with its dots (``..serving.workload``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if module == "pd_constructs":  # from pd_constructs import serving
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, module))
    return sorted(found)


def upward_imports(source: str, layer: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source`` (function bodies included) of a layer
    above ``layer``."""
    above = LAYERS[LAYERS.index(layer) + 1 :]
    return [(line, name) for line, name in _imports(source) if name.split(".")[0] in above]


def forbidden_package_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in a module of ``pd_constructs.<package>`` that its row
    of ``PACKAGES`` does not allow: another package's modules, or a relative import (which
    would hide where it points)."""
    allowed = PACKAGES[package] | {package}

    def forbidden(name: str) -> bool:
        parts = name.split(".")
        if name.startswith("."):
            return True
        return parts[0] == "pd_constructs" and (len(parts) < 2 or parts[1] not in allowed)

    return [(line, name) for line, name in _imports(source) if forbidden(name)]


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
        "import pd_constructs.common.helm\n"
        "from ray_pd_eks.config import AppConfig\n"
        "def f():\n"
        "    from stacks.stage import RayPdEksStage\n"
    )
    assert upward_imports(source, "ray_pd_eks") == [
        (2, "pd_constructs.common.helm"),
        (5, "stacks.stage"),
    ]
    assert upward_imports(source, "pd_constructs") == [(5, "stacks.stage")]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_construct_package_imports_only_what_its_row_allows(package: str) -> None:
    modules = sorted((ROOT / "pd_constructs" / package).rglob("*.py"))
    assert modules
    found = [
        f"{m.relative_to(ROOT)}:{line} imports {name}"
        for m in modules
        for line, name in forbidden_package_imports(m.read_text(), package)
    ]
    assert found == [], f"not allowed for {package} by PACKAGES: {found}"


def test_a_sideways_or_upward_package_import_is_found_wherever_it_stands() -> None:
    source = (
        "from pd_constructs.common.nag import acknowledge\n"
        "from pd_constructs.lifecycle.rollback import grant_describe_own_stack\n"
        "import pd_constructs.cluster.cluster\n"
        "from pd_constructs import serving\n"
        "from ray_pd_eks.config import AppConfig\n"
        "def f():\n"
        "    from pd_constructs.inventory.render import write_rendered\n"
        "    from ..endpoint import endpoint\n"
    )
    assert forbidden_package_imports(source, "network") == [
        (3, "pd_constructs.cluster.cluster"),  # sideways
        (4, "pd_constructs.serving"),  # upward, as a package
        (7, "pd_constructs.inventory.render"),  # upward, in a function
        (8, "..endpoint"),  # relative
    ]
    assert forbidden_package_imports(source, "inventory") == [(8, "..endpoint")]


def test_every_package_of_pd_constructs_has_a_row_and_no_module_is_left_flat() -> None:
    root = ROOT / "pd_constructs"
    assert {p.parent.name for p in root.glob("*/__init__.py")} == set(PACKAGES)
    modules = [p.relative_to(root).parts for p in root.rglob("*.py")]
    assert [m for m in modules if len(m) == 1] == [("__init__.py",)]
    assert {m[0] for m in modules if len(m) > 1} == set(PACKAGES)


def test_every_package_says_what_it_owns_and_may_import() -> None:
    for package in PACKAGES:
        doc = ast.get_docstring(
            ast.parse((ROOT / "pd_constructs" / package / "__init__.py").read_text())
        )
        assert doc and "may import" in doc.lower(), package


def test_the_package_table_points_one_way() -> None:
    """No cycle: a package never may import one that may import it, even through others."""
    order = list(TopologicalSorter(PACKAGES).static_order())
    assert order[0] == "common" and order[-1] == "inventory"
    assert all(allowed <= set(PACKAGES) for allowed in PACKAGES.values())


# A module longer than this is split by responsibility (docs/architecture.md, "Layout and
# choices"): a reader finds a thing by its module's name, not by scrolling.
MAX_MODULE_LINES = 800
PRODUCT = ("app.py", "ray_pd_eks", "pd_constructs", "stacks", "assets/lambda")


def too_long(lines: dict[str, int], limit: int = MAX_MODULE_LINES) -> list[str]:
    """The modules of ``lines`` (path -> line count) over ``limit``, with their counts."""
    return [f"{path}: {n} lines" for path, n in sorted(lines.items()) if n > limit]


def test_too_long_is_over_the_limit_not_at_it() -> None:
    assert too_long({"a.py": 800, "b.py": 801, "c.py": 12}) == ["b.py: 801 lines"]


def test_no_product_module_is_over_800_lines() -> None:
    files = [
        path
        for part in PRODUCT
        for path in ([ROOT / part] if part.endswith(".py") else (ROOT / part).rglob("*.py"))
    ]
    assert len(files) > 100
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in files}
    assert too_long(lines) == []
