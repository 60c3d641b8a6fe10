"""cfn-lint over the session's templates in a background process.

Linting the 21 session templates (3 apps x 6 stacks and 3 stacks of a fourth, two regions each)
costs about 11 s of CPU.
The session fixtures hand each template to one worker process as soon as it is synthesized; the
worker lints it on the other core while the suite goes on, with one cfn-lint ``Runner`` (its
rules load once, not once per template: that was about 1 s each, half the cost). The
per-template tests (``tests/test_compliance.py``) run last and collect the results, so a finding
still fails the test that names the app and the stack, with the rule and its message.

Only the templates that a collected test asks for are linted (``want``), so a run of other
tests starts no worker. The worker is a fresh interpreter (``spawn``), never a fork of the test
process, which by then runs the jsii kernel's threads and child process.

A template that linted clean is not linted again while nothing that decides its findings
changes: ``.cfn_lint_cache/clean.json`` (git-ignored, like mypy's cache) keeps the digest of
each clean one, over the template's text, cfn-lint's version (its rules and resource specs ship
with it), the regions, the ignored rules and this file. A warm run whose templates did not
change starts the worker only for the deliberate mistake of
``test_cfn_lint_in_the_background_reports_a_finding``; a change to a construct relints the
templates it changed. Findings are never cached: a template with one is linted on every run.
``CFN_LINT_CACHE=off`` lints everything (the cache is neither read nor written); removing the
folder does it once.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
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
_pending: dict[tuple[str, str], tuple[str, Future[list[str]]]] = {}
_pool: ProcessPoolExecutor | None = None

CACHE_FILE = Path(__file__).resolve().parent.parent / ".cfn_lint_cache" / "clean.json"
# Digests kept: the session's 21 templates many times over, so that switching branches back
# and forth does not relint; the oldest go first.
_CACHE_ENTRIES = 400
_clean: list[str] | None = None  # the cache file's digests, read on first use
_newly_clean: list[str] = []


def _cache_on() -> bool:
    return os.environ.get("CFN_LINT_CACHE", "").lower() not in ("off", "0", "false", "no")


@functools.cache
def _linter_digest() -> bytes:
    """cfn-lint's version, the settings and the code of this file, hashed."""
    h = hashlib.sha256()
    for part in (
        importlib.metadata.version("cfn-lint"),  # not cfnlint.version: importing it takes 1 s
        json.dumps([CFN_LINT_REGIONS, sorted(CFN_LINT_IGNORED)]),
        Path(__file__).read_text(),
    ):
        h.update(part.encode() + b"\0")
    return h.digest()


def digest(template_json: str) -> str:
    """What decides a template's findings, hashed: the linter (``_linter_digest``) and the
    template's text as linted (line numbers are part of a finding)."""
    return hashlib.sha256(_linter_digest() + template_json.encode()).hexdigest()


def _known_clean() -> list[str]:
    global _clean
    if _clean is None:
        _clean = []
        if _cache_on():
            try:
                _clean = [str(d) for d in json.loads(CACHE_FILE.read_text())["clean"]]
            except (OSError, ValueError, KeyError, TypeError):
                _clean = []
    return _clean


def want(keys: Iterable[tuple[str, str]]) -> None:
    """Lint these (app fixture name, stack) pairs in the background once they exist."""
    _wanted.update(keys)


def lint_in_background(template: dict[str, Any]) -> Future[list[str]]:
    """Lint one template in the worker (started on first use), whatever the cache knows."""
    return _lint_text_in_background(json.dumps(template, indent=1))


def _lint_text_in_background(template_json: str) -> Future[list[str]]:
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    return _pool.submit(lint_template, template_json)


_linting: dict[str, Future[list[str]]] = {}  # by digest: one lint for identical templates


def _start(template: dict[str, Any]) -> tuple[str, Future[list[str]]]:
    """The template's digest and its findings: known clean (the cache), being linted (for
    another app whose stack is the same text: the default and token apps' Cluster), or
    started now."""
    text = json.dumps(template, indent=1)
    key = digest(text)
    if key in _known_clean():
        done: Future[list[str]] = Future()
        done.set_result([])
        return key, done
    if key not in _linting:
        _linting[key] = _lint_text_in_background(text)
    return key, _linting[key]


def submit(app_name: str, templates: dict[str, dict[str, Any]]) -> None:
    """Start linting the wanted stacks of a just-synthesized app (those not known clean)."""
    for stack, template in templates.items():
        key = (app_name, stack)
        if key in _wanted and key not in _pending:
            _pending[key] = _start(template)


def findings(app_name: str, stack: str, template: dict[str, Any]) -> list[str]:
    """The findings on one template: known clean, the background result when one was started,
    else linted here and now."""
    started = _pending.pop((app_name, stack), None)
    if started is None:
        text = json.dumps(template, indent=1)
        key = digest(text)
        found = [] if key in _known_clean() else lint_template(text)
    else:
        key, future = started
        found = future.result()
    if not found and key not in _known_clean():
        _newly_clean.append(key)
    return found


def _save_cache() -> None:
    if not _newly_clean or not _cache_on():
        return
    kept = [d for d in _known_clean() if d not in _newly_clean] + _newly_clean
    CACHE_FILE.parent.mkdir(exist_ok=True)
    partial = CACHE_FILE.with_name(f"{CACHE_FILE.name}.{os.getpid()}")
    partial.write_text(json.dumps({"clean": kept[-_CACHE_ENTRIES:]}, indent=0) + "\n")
    partial.replace(CACHE_FILE)  # whole, even with two runs ending at once
    _newly_clean.clear()


def shutdown() -> None:
    global _pool, _clean
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
        _pool = None
    _pending.clear()
    _linting.clear()
    _save_cache()
    _clean = None
