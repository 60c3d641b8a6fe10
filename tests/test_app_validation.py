"""aws-cdk-lib's built-in template validation runs in `cdk synth` only when asked for."""

from __future__ import annotations

import pytest

import app as app_module


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        (None, False),
        ("", False),
        ("false", False),
        ("0", False),
        ("yes", False),
        ("true", True),
        ("TRUE", True),
        (" true ", True),
    ],
)
def test_builtin_validation_only_with_cdk_validation_true(value: str | None, enabled: bool) -> None:
    environ = {} if value is None else {"CDK_VALIDATION": value}
    assert app_module.builtin_validation(environ) is enabled
