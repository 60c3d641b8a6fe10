"""cfn-lint over the session's templates in a background process.

Linting the 18 session templates (3 apps x 5 stacks and 3 stacks of a fourth, two regions each)
costs about 13 s of CPU.
The session fixtures hand each template to one worker process as soon as it is synthesized; the
worker lints it on the other core while the suite goes on, with one cfn-lint ``Runner`` (its
rules load once, not once per template: that was about 1 s each, half the cost). The
per-template tests (``tests/test_compliance.py``) run last and collect the results, so a finding
still fails the test that names the app and the stack, with the rule and its message.

Only the templates that a collected test asks for are linted (``want``), so a run of other
tests starts no worker. The worker is a fresh interpreter (``spawn``), never a fork of the test
process, which by then runs the jsii kernel's threads and child process.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

# cfn-lint rules ignored, each with its reason:
CFN_LINT_IGNORED = {
    # aws-cdk-lib's Lambda constructs add an explicit DependsOn on the execution role next to the
    # GetAtt of it; redundant but harmless, and not ours to change.
    "W3005",
}
CFN_LINT_REGIONS = ["us-west-2", "us-east-1"]

_runner: Any = None  # the worker's cfn-lint Runner, made on its first template


def lint_template(template_json: str) -> list[str]:
    """cfn-lint's findings on one template as ``"<rule> <message> (line N)"`` (lines as in
    cdk.out, which indents by one); runs in the worker, and in the test process when no worker
    was started for the template."""
    global _runner
    from cfnlint.api import ManualArgs
    from cfnlint.config import ConfigMixIn
    from cfnlint.decode.decode import decode_str
    from cfnlint.runner import Runner

    if _runner is None:
        _runner = Runner(
            ConfigMixIn(
                **ManualArgs(regions=CFN_LINT_REGIONS, ignore_checks=sorted(CFN_LINT_IGNORED))
            )
        )
    template, errors = decode_str(template_json)
    matches = errors or ([] if template is None else list(_runner.validate_template(template)))
    return [f"{m.rule.id} {m.message} (line {m.linenumber})" for m in matches]


_wanted: set[tuple[str, str]] = set()
_pending: dict[tuple[str, str], Future[list[str]]] = {}
_pool: ProcessPoolExecutor | None = None


def want(keys: Iterable[tuple[str, str]]) -> None:
    """Lint these (app fixture name, stack) pairs in the background once they exist."""
    _wanted.update(keys)


def lint_in_background(template: dict[str, Any]) -> Future[list[str]]:
    """Lint one template in the worker (started on first use)."""
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    return _pool.submit(lint_template, json.dumps(template, indent=1))


def submit(app_name: str, templates: dict[str, dict[str, Any]]) -> None:
    """Start linting the wanted stacks of a just-synthesized app."""
    for stack, template in templates.items():
        key = (app_name, stack)
        if key in _wanted and key not in _pending:
            _pending[key] = lint_in_background(template)


def findings(app_name: str, stack: str, template: dict[str, Any]) -> list[str]:
    """The findings on one template: the background result when one was started, else linted
    here and now."""
    future = _pending.pop((app_name, stack), None)
    if future is None:
        return lint_template(json.dumps(template, indent=1))
    return future.result()


def shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
        _pool = None
    _pending.clear()
