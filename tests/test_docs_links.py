"""Every relative link of the manual (README.md and docs/*.md) resolves.

A link names a file or folder of the repository; a ``#anchor`` into a markdown page names one
of its headings as GitHub renders it. Links inside code (fenced blocks, inline spans) are text,
not links, and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", flags=re.S)
# [text](target) and [text](target "title"); images too. Reference definitions: [x]: target.
_INLINE = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", flags=re.M)
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", flags=re.I)


def _prose(text: str) -> str:
    """The text without code: fenced blocks and inline code spans."""
    return _SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lowercase, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page; a repeated heading gets ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _FENCE.sub("", text), flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(text: str) -> list[str]:
    """Every link target of a page outside code, external ones (http:, mailto:...) left out."""
    prose = _prose(text)
    targets = _INLINE.findall(prose) + _REFERENCE.findall(prose)
    return [t for t in targets if t and not _EXTERNAL.match(t)]


def broken(page: Path) -> list[str]:
    """The page's relative links that name no file or folder, or no heading of their page."""
    bad = []
    for target in links(page.read_text(encoding="utf-8")):
        path_part, _, anchor = target.partition("#")
        path = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not path.exists():
            bad.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor.lower() not in anchors(path.read_text()):
            bad.append(f"{target}: no heading #{anchor} in {path.name}")
    return bad


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_anchors_are_githubs() -> None:
    page = "# Upgrading: the GPU nodes start beside the `Cluster` stack\n## A\n## A\n"
    assert anchors(page) == {"upgrading-the-gpu-nodes-start-beside-the-cluster-stack", "a", "a-1"}
    assert slug("Redeploying after `retainLogs=true`: the fixed-name log groups") == (
        "redeploying-after-retainlogstrue-the-fixed-name-log-groups"
    )
    assert slug("Charts vendored; chart images pinned by tag, not by digest") == (
        "charts-vendored-chart-images-pinned-by-tag-not-by-digest"
    )
    # A heading inside a code block is no heading.
    assert anchors("```\n# not one\n```\n# one\n") == {"one"}


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Here\n", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n[a](other.md#here) [b](folder/) [c](#top) [d](https://x.test/y) [e](mailto:a@b)\n"
        "`[f](missing.md)`\n```\n[g](missing.md)\n```\n"
        "[h](missing.md) [i](other.md#gone) [j](#nowhere)\n[k]: gone.md\n",
        encoding="utf-8",
    )
    assert broken(page) == [
        "missing.md: no such file",
        "other.md#gone: no heading #gone in other.md",
        "#nowhere: no heading #nowhere in page.md",
        "gone.md: no such file",
    ]
