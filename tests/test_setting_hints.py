"""Every hint that tells a user how to change a setting names the documented way: the
``settings`` command (``ray-pd-eks settings --set key=value``, which writes
settings.local.json so every later command sees the value; docs/settings.md). ``-c key=value``
changes a setting for one command only, so a hint may offer it only as that ("... or -c
key=... for one command"), never as the fix.

The scan reads every string the code can show a user: warnings and errors of the constructs,
the custom-resource handlers' messages (which CloudFormation shows as the failure reason) and
the CLI's messages. Docstrings and comments are not messages and are left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pd_lambda import settings_hint

from pd_constructs.endpoint.endpoint import endpoint_warnings
from ray_pd_eks.cli import errors
from ray_pd_eks.config import DEFAULTS, SETTINGS_SET, AppConfig, set_hint
from tests.conftest import CERTIFICATE
from tests.synth import ROOT

SETTINGS = set(AppConfig.context_keys())
DOCS = sorted((ROOT / "docs").glob("*.md"))
# `-c <setting>` in a message (`=value` or not); `{}` stands for a formatted value, so
# `-c {}=` is an f-string's `-c {key}=...` (`-c {}` alone is kubectl's container flag).
_OVERRIDE = re.compile(r"-c (\w+|\{\}=)")
# The one accepted form of `-c` in a message: offered for one command beside the fix.
_FOR_ONE_COMMAND = re.compile(r"or -c [\w{}]+=\S* for one command")
SOURCES = sorted(
    [
        *(ROOT / "pd_constructs").rglob("*.py"),
        *(ROOT / "stacks").glob("*.py"),
        *(ROOT / "ray_pd_eks").rglob("*.py"),
        *(ROOT / "assets" / "lambda").rglob("*.py"),
        ROOT / "app.py",
    ]
)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal but docstrings; an f-string's fields read `{}`,
    and implicitly concatenated literals (one message over several lines) stay one text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    inside_fstring = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                str(p.value) if isinstance(p, ast.Constant) else "{}" for p in node.values
            )
            out.append((node.lineno, text))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and id(node) not in inside_fstring
        ):
            out.append((node.lineno, node.value))
    return out


def _hints_offering_c(text: str) -> list[str]:
    """The settings a message tells the user to change with `-c` (not as the one-command
    alternative)."""
    rest = _FOR_ONE_COMMAND.sub("", text)
    return [key for key in _OVERRIDE.findall(rest) if key == "{}=" or key in SETTINGS]


def test_the_scan_finds_a_c_hint_and_accepts_the_documented_forms() -> None:
    assert _hints_offering_c("set -c gpuAz=us-west-2a or leave it empty") == ["gpuAz"]
    assert _hints_offering_c("(-c kvBackend=LIBFABRIC)") == ["kvBackend"]
    assert _hints_offering_c("or -c {}=...") == ["{}="]
    assert _hints_offering_c("or lower -c gpuNodeCount") == ["gpuNodeCount"]
    assert not _hints_offering_c("kubectl logs -n ns {} -c {} --previous")
    assert not _hints_offering_c(f"use {set_hint('gpuAz', 'us-west-2a')}")
    assert not _hints_offering_c(
        "(fix it with `ray-pd-eks settings --set gpuAz=...`, or -c gpuAz=... for one command)"
    )
    assert not _hints_offering_c("kubectl logs pod -c ray-worker --previous")
    assert not _hints_offering_c("-c key=value on any command")  # the option, not a hint


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_message_tells_the_user_to_change_a_setting_with_c(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for line, text in _strings(path)
        if _hints_offering_c(text)
    ]
    assert not bad, "use ray_pd_eks.config.set_hint (pd_lambda.settings_hint in handlers):\n" + (
        "\n".join(bad)
    )


def test_every_hint_names_the_same_command() -> None:
    """The constructs', the CLI's and the handlers' hints: one command, the console script's."""
    assert SETTINGS_SET == "ray-pd-eks settings --set" == errors.SET_COMMAND
    assert settings_hint.SET_COMMAND == SETTINGS_SET
    assert set_hint("gpuAz", "us-west-2c") == "`ray-pd-eks settings --set gpuAz=us-west-2c`"
    assert settings_hint.set_hint("gpuAz", "us-west-2c") == set_hint("gpuAz", "us-west-2c")
    assert set_hint("gpuAz") == "`ray-pd-eks settings --set gpuAz=...`"


def test_the_constructs_warnings_name_the_settings_command() -> None:
    """The endpoint's synth warnings (no domain, no region) say how to set the missing value."""
    config = DEFAULTS.with_overrides(
        {
            "endpointExposure": "internal",
            "endpointCertificateArn": CERTIFICATE,
            "endpointAllowedCidrs": ["10.0.0.0/8"],
        }
    )
    warnings = dict(endpoint_warnings(config))
    assert (
        f"set {set_hint('endpointDomainName', '<that name>')}."
        in (warnings["ray-pd-eks:noEndpointDomain"])
    )
    assert (
        f"set {set_hint('region', '<deploy region>')} to get them"
        in (warnings["ray-pd-eks:noEndpointAccessLogs"])
    )


# -- the manual: README and docs/ --------------------------------------------------------

MANUAL = {"README.md": ROOT / "README.md", **{f"docs/{p.name}": p for p in DOCS}}
# A command shown whole: `-c` there is what it is, an override for that one command.
_COMMAND = re.compile(r"^\s*(npx cdk|ray-pd-eks) ")


def _c_hints_in_manual(name: str, text: str) -> list[str]:
    """Each `-c <setting>=` of the manual that is not part of a command shown whole (inline or
    in a code block), nor the "for one command" form, nor docs/settings.md's precedence."""
    if name == "docs/settings.md":
        text = re.sub(r"## Precedence\n.*?\n## ", "## ", text, flags=re.S)
    text = _FOR_ONE_COMMAND.sub("", text)
    bad = []
    # Between fences: code blocks (odd pieces), one command a line; prose otherwise, where an
    # inline code span may wrap onto the next line.
    for i, piece in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if i % 2:
            shown, prose = piece.splitlines(), ""
        else:
            joined = re.sub(r"\s*\n\s*", " ", piece)
            shown, prose = re.findall(r"`([^`]*)`", joined), re.sub(r"`[^`]*`", "", joined)
        for code in shown:
            if any(k in SETTINGS for k in _OVERRIDE.findall(code)) and not _COMMAND.match(code):
                bad.append(f"{name}: {code.strip()!r}")
        for key in _OVERRIDE.findall(prose):
            if key in SETTINGS:
                bad.append(f"{name}: -c {key}= in prose")
    return bad


def test_the_manual_check_flags_a_c_fix_and_accepts_a_whole_command() -> None:
    assert _c_hints_in_manual("README.md", "`-c observability=none` removes it")
    assert _c_hints_in_manual("docs/x.md", "set -c gpuAz=us-west-2a")
    assert not _c_hints_in_manual("docs/x.md", "`npx cdk synth 'RayPdEks/*' -c maxModelLen=8192`")
    assert not _c_hints_in_manual(
        "docs/x.md", "```bash\nray-pd-eks preflight -c gpuNodeCount=3\n```"
    )
    assert not _c_hints_in_manual("docs/x.md", "`ray-pd-eks settings --set observability=none`")


def test_the_manual_changes_settings_with_the_settings_command() -> None:
    bad = [
        hint
        for name, path in MANUAL.items()
        for hint in _c_hints_in_manual(name, path.read_text(encoding="utf-8"))
    ]
    assert not bad, "say `ray-pd-eks settings --set key=value`:\n" + "\n".join(bad)
