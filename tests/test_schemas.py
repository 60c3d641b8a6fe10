"""The repository carries what its tests read: every schema file is listed with its source,
and no test reaches outside the clone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "tests" / "schemas"


def test_every_schema_file_is_listed_with_source_version_and_licence() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"^\| `([^`]+)` \|(.*)$", readme, flags=re.M)}
    files = {
        str(p.relative_to(SCHEMAS))
        for p in SCHEMAS.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    assert files == set(rows), files ^ set(rows)
    for name, row in rows.items():
        cells = [c.strip() for c in row.split("|") if c.strip()]
        assert len(cells) == 4, name  # what, source, version, licence


def test_the_kuberay_crd_is_the_pinned_release() -> None:
    chart = (SCHEMAS / "kuberay-v1.7.0" / "kuberay-operator-Chart.yaml").read_text()
    assert re.search(r"^version: 1\.7\.0$", chart, flags=re.M)
    crd = (SCHEMAS / "kuberay-v1.7.0" / "ray.io_rayservices.yaml").read_text()
    assert "name: rayservices.ray.io" in crd


def test_no_test_reads_outside_the_repository() -> None:
    outside = re.compile(r"ROOT\.parent|\.\./shared|/work/shared|shared\" / \"reference")
    for path in (ROOT / "tests").glob("*.py"):
        if path.name == Path(__file__).name:
            continue
        assert not outside.search(path.read_text()), path.name
