"""pytest plugin for mutation testing only (``scripts/mutation.sh`` loads it with ``-p``).

mutmut's trampolines activate a mutant only in the module whose ``__name__`` matches the mutated
file's path (``assets.lambda.readiness.checks``). The Lambda assets are not packages: the tests
and the CLI load them as top-level modules (``checks``, ``kube``) or under private names
(``readiness_handler``), so no mutant of theirs would ever run. While a file under
``assets/lambda/`` executes, this gives it its path-derived name, so the functions it defines
carry that ``__module__``; the module keeps its own name in ``sys.modules`` afterwards. Normal
test runs never load this plugin.

A mutant is judged by the tests written for its module (``_JUDGES``), not by every test that
happens to call it: mutmut selects each test that reached the function while the suite ran, so
every test that builds a configuration (preflight's and status's, through ``cdk.json``) was
selected for every configuration rule. Those calls exercise the default configuration; the
module's own tests hold its edges. ``status`` shows the readiness checks' verdicts, so its tests
judge those. A surviving mutant ran every judge; a mutant only another module's tests would
catch counts as surviving, so this can only make the score stricter, and a survivor costs
seconds instead of tens of seconds.

Tests that need a synthesized app (the session fixtures of ``tests/conftest.py``) are dropped
from every session of the mutation run: each forked session would synthesize anew, tens of
seconds per mutant. The modules' handler and rule tests are offline and synth-free; what only
a synthesized template shows (a construct's wiring) is not what these functions decide.

Each mutant runs in its own pytest session (a forked child). Left alone, every session makes a
numbered directory under the machine-wide ``pytest-of-<user>`` and, when it ends, deletes the
oldest ones beyond three: thousands of sessions deleting each other's (and any other pytest
run's) temporary files, which cost more than a short test run. Here each session gets a
directory of its own under ``MUTMUT_BASETEMP`` (``scripts/mutation.sh`` sets it and removes it at
the end), so nothing is cleaned up while mutants run.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_LAMBDA = _ROOT / "assets" / "lambda"
_exec_module = importlib.machinery.SourceFileLoader.exec_module


def _path_named_exec(self: Any, module: ModuleType) -> None:
    path = Path(self.path).resolve()
    if _LAMBDA not in path.parents:
        _exec_module(self, module)
        return
    own_name = module.__name__
    code = self.get_code(own_name)
    assert code is not None, path
    path_name = ".".join(path.relative_to(_ROOT).with_suffix("").parts)
    module.__name__ = path_name
    previous = sys.modules.get(path_name)
    sys.modules[path_name] = module  # dataclasses look the module up while building classes
    try:
        exec(code, module.__dict__)
    finally:
        module.__name__ = own_name
        if previous is None:
            del sys.modules[path_name]
        else:
            sys.modules[path_name] = previous


importlib.machinery.SourceFileLoader.exec_module = _path_named_exec  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    root = os.environ.get("MUTMUT_BASETEMP")
    if root and config.option.basetemp is None:
        os.makedirs(root, exist_ok=True)
        config.option.basetemp = os.path.join(root, str(os.getpid()))


# The tests that judge each module's mutants (module prefix -> test files).
_JUDGES = {
    # The configuration package: its parsing, settings, rules and rule tables.
    "ray_pd_eks.config.": (
        "tests/test_config.py",
        "tests/test_limits.py",
        "tests/test_engine.py",
        "tests/test_endpoint_config.py",
        "tests/test_endpoint_audience.py",
        "tests/test_config_messages.py",
        "tests/test_setting_hints.py",
    ),
    "ray_pd_eks.cross_stack.": ("tests/test_cross_stack.py",),
    "ray_pd_eks.vpc_layout.": ("tests/test_network.py",),
    # The preflight command and its check groups (account, gpu, capacity, model, ...).
    "ray_pd_eks.cli.preflight.": ("tests/test_cli_preflight.py",),
    "ray_pd_eks.cli.drill.": ("tests/test_cli_drill.py",),
    "ray_pd_eks.cli.coldstart.": ("tests/test_cli_coldstart.py",),
    "ray_pd_eks.timeline.": ("tests/test_cli_coldstart.py", "tests/test_timeline.py"),
    "ray_pd_eks.cli.status.": ("tests/test_cli_status.py", "tests/test_branches.py"),
    # The KV proof's own tests, and the handler's, which judge the probe and the transfer.
    "assets.lambda.readiness.kvproof.": (
        "tests/test_kvproof.py",
        "tests/test_readiness_handler.py",
    ),
    # Every other module of the readiness asset (checks, placement, terminal, kv_probe,
    # nixl_logs, handler, kube). `status` reads the cluster with the readiness checks and shows
    # their verdicts. The NIXL log reader (nixl_logs, kube's head read) and the KV probe's
    # metrics have their own.
    "assets.lambda.readiness.": (
        "tests/test_readiness_handler.py",
        "tests/test_readiness_nixl_logs.py",
        "tests/test_kv_probe.py",
        "tests/test_branches.py",
        "tests/test_cli_status.py",
    ),
    "assets.lambda.capacity.": ("tests/test_capacity_handler.py", "tests/test_branches.py"),
    "assets.lambda.asg_tags.": ("tests/test_node_template_tags.py",),
    "assets.lambda.default_sg.": ("tests/test_default_sg.py",),
    "assets.lambda.cluster_active.": ("tests/test_cluster_active_handler.py",),
    # The Cluster stack's reading both GPU-stack waiters share (the layer's pd_lambda).
    "assets.lambda.layer.python.pd_lambda.cluster_stack.": (
        "tests/test_shared_layer.py",
        "tests/test_cluster_active_handler.py",
        "tests/test_capacity_handler.py",
    ),
    "assets.lambda.nodegroups_gone.": ("tests/test_nodegroups_gone_handler.py",),
    # The rollback test every handler's stack_rolling_back is (the layer's pd_lambda).
    "assets.lambda.layer.python.pd_lambda.rollback.": (
        "tests/test_shared_layer.py",
        "tests/test_branches.py",
    ),
}

# The session fixtures that synthesize the app (tests/conftest.py). A forked mutant session
# would synthesize again (tens of seconds each): tests that need one never run here.
_SYNTH_FIXTURES = frozenset({"default_app", "variant_app", "token_app", "public_cognito_app"})


def _synthesizes(item: pytest.Item) -> bool:
    """Whether the test needs a synthesized app: as a fixture, or as a parameter naming one
    (a test over several apps gets it with ``request.getfixturevalue``)."""
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    return bool(_SYNTH_FIXTURES & (names | {v for v in params.values() if isinstance(v, str)}))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    synthesizing = [i for i in items if _synthesizes(i)]
    if synthesizing:  # every run of this plugin: the clean run, the stats run, each mutant
        config.hook.pytest_deselected(items=synthesizing)
        dropped = {id(item) for item in synthesizing}
        items[:] = [item for item in items if id(item) not in dropped]
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:  # the clean run, the stats run, the forced failure
        return
    judges = next((f for prefix, f in _JUDGES.items() if mutant.startswith(prefix)), None)
    if judges is None:
        return
    keep = [item for item in items if item.nodeid.split("::", 1)[0] in judges]
    if not keep:  # never turn a mutant into "no tests": let every selected test judge it
        return
    kept = {id(item) for item in keep}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
    items[:] = keep
