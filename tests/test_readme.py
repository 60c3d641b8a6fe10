"""The README is the manual: its commands and settings must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from ray_pd_eks.cli.main import COMMANDS
from ray_pd_eks.config import DEFAULTS, OTHER_CONTEXT_KEYS, AppConfig

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_two_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/setup.sh" in README and "./scripts/setup.sh" in ci
    assert "./scripts/test.sh" in README and "./scripts/test.sh" in ci
    assert "pytest" in (ROOT / "scripts" / "test.sh").read_text()


def test_every_setting_is_documented_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| `?([^|`]*)`? \|", README, flags=re.M))
    for key, name in AppConfig.context_keys().items():
        assert key in rows, f"README lacks setting {key}"
        default = getattr(DEFAULTS, name)
        shown = rows[key].strip()
        if isinstance(default, bool):
            assert shown == str(default).lower(), key
        elif isinstance(default, (int, float)):
            assert float(shown) == float(default), key
        elif isinstance(default, tuple):
            assert shown == "[]", key
        else:
            assert shown in (default, f'"{default}"'), key


def test_every_context_override_in_the_readme_is_a_real_setting() -> None:
    keys = set(AppConfig.context_keys()) | OTHER_CONTEXT_KEYS
    used = set(re.findall(r"-c (\w+)=", README)) - {"key"}  # "-c key=value" in prose
    assert used, "README shows no -c overrides"
    assert used <= keys, used - keys


def test_operations_guide_covers_every_cli_command() -> None:
    for module in COMMANDS:
        assert f"ray_pd_eks {module.NAME}" in README, module.NAME


def test_deploy_commands_select_the_stage_stacks() -> None:
    assert "npx cdk deploy 'RayPdEks/*'" in README
    assert "npx cdk destroy 'RayPdEks/*'" in README
