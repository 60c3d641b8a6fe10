"""The helpers every handler shares live once, in a Lambda layer built from a plain folder
(assets/lambda/layer/python/pd_lambda/), and every function of the app's handlers carries it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tests.lambda_handlers import LambdaContext
from tests.synth import ROOT, Synthesized

LAMBDA = ROOT / "assets" / "lambda"
LAYER = LAMBDA / "layer"
HANDLER_FOLDERS = sorted(p for p in LAMBDA.iterdir() if p.is_dir() and p.name != "layer")
# The helpers that used to be copied into every handler, now only in the layer.
SHARED = {
    "stack_rolling_back": "rollback",
    "positive_int": "props",
    "one_line": "props",
    "time_left": "props",
}
# Handlers that read another stack (through the layer) besides their own stack's rollback test.
OTHER_STACKS = {
    "cluster_active": "reads the Cluster stack's status while it waits for it",
    "capacity": "reads the Cluster stack's status while the GPU node group is created",
}


def _functions(app: Synthesized) -> list[tuple[str, str, dict[str, Any]]]:
    """(stack, logical id, properties) of every function that runs one of our handlers."""
    ours = {f"{p.stem}." for folder in HANDLER_FOLDERS for p in folder.glob("*.py")}
    found = []
    for stack in app.templates:
        for logical_id, fn in app.resources(stack, "AWS::Lambda::Function").items():
            props = fn["Properties"]
            if props.get("Runtime", "").startswith("python") and any(
                str(props.get("Handler", "")).startswith(m) for m in ours
            ):
                found.append((stack, logical_id, props))
    return found


def test_the_layer_is_a_plain_folder_with_python_pd_lambda() -> None:
    package = LAYER / "python" / "pd_lambda"
    assert (package / "__init__.py").is_file()
    assert {p.stem for p in package.glob("*.py")} >= set(SHARED.values())
    # Nothing else at the layer's root: Lambda puts /opt/python on sys.path, nothing more.
    assert {p.name for p in LAYER.iterdir() if p.name != "__pycache__"} == {"python"}


def test_every_handler_function_carries_the_one_layer_of_its_stack(
    default_app: Synthesized,
) -> None:
    functions = _functions(default_app)
    assert len(functions) >= 6  # readiness (2), recreate (2), capacity (2), AZ, digests, token
    for stack, logical_id, props in functions:
        layers = default_app.resources(stack, "AWS::Lambda::LayerVersion")
        shared = [k for k, v in layers.items() if "pd_lambda" in v["Properties"]["Description"]]
        assert len(shared) == 1, stack
        assert props.get("Layers") == [{"Ref": shared[0]}], (stack, logical_id)
        (layer,) = [layers[k] for k in shared]
        assert layer["Properties"]["CompatibleRuntimes"] == [props["Runtime"]]


@pytest.mark.parametrize("folder", HANDLER_FOLDERS, ids=lambda p: p.name)
def test_no_handler_carries_its_own_copy_of_a_shared_helper(folder: Path) -> None:
    for source in folder.glob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in SHARED:
                # A thin wrapper may keep the old name; the logic is the layer's.
                calls = {
                    n.func.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                }
                assert node.name.lstrip("_") in calls, f"{source.name}: {node.name}"
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert "ROLLBACK_STATUS" not in names, source.name
        text = source.read_text()
        if folder.name in OTHER_STACKS:
            # Its own rollback test is still the layer's, and so is its reading of the Cluster
            # stack (pd_lambda.cluster_stack: one rule for "failed in this deploy").
            assert "stack_rolling_back(" in text and "cluster_stack.read(" in text
        assert "describe_stacks" not in text, source.name


@pytest.mark.parametrize(
    ("event", "answer", "status"),
    [
        (
            {"StackId": "arn:s/1"},
            {"Stacks": [{"StackStatus": "UPDATE_IN_PROGRESS"}]},
            "UPDATE_IN_PROGRESS",
        ),
        ({}, {"Stacks": [{"StackStatus": "UPDATE_IN_PROGRESS"}]}, ""),  # no stack named
        ({"StackId": "arn:s/1"}, {"Stacks": []}, ""),  # not found
        ({"StackId": "arn:s/1"}, {"Stacks": [{}]}, ""),  # no status in the answer
        ({"StackId": "arn:s/1"}, RuntimeError("Throttling"), ""),  # the call failed
    ],
)
def test_stack_status_is_empty_when_it_cannot_say(
    event: dict[str, str], answer: Any, status: str
) -> None:
    """The caller decides what not knowing means: "" for no stack, none found, no status or a
    failed call, never a placeholder that could read as a status."""
    from pd_lambda import rollback

    class Stacks:
        def describe_stacks(self, **_: Any) -> Any:
            if isinstance(answer, Exception):
                raise answer
            return answer

    assert rollback.stack_status(event, Stacks()) == status


def test_the_layer_answers_like_the_handlers_did() -> None:
    from pd_lambda import props, rollback

    class Stacks:
        def __init__(self, status: str) -> None:
            self.status = status

        def describe_stacks(self, **_: Any) -> dict[str, Any]:
            return {"Stacks": [{"StackStatus": self.status}]}

    event = {"StackId": "arn:aws:cloudformation:us-west-2:1:stack/s/1"}
    assert rollback.stack_rolling_back(event, Stacks("UPDATE_ROLLBACK_IN_PROGRESS")) is True
    assert rollback.stack_rolling_back(event, Stacks("UPDATE_IN_PROGRESS")) is False
    made: list[str] = []

    def make() -> Stacks:
        made.append("cfn")
        return Stacks("UPDATE_ROLLBACK_IN_PROGRESS")

    assert rollback.stack_rolling_back(event, make_client=make) is True
    assert made == ["cfn"]
    assert rollback.stack_rolling_back({}, make_client=make) is False
    assert made == ["cfn"]  # no stack to ask about: no client
    assert rollback.settled({"RequestType": "Delete", "K": "true"}, "K") == {"IsComplete": True}
    marked = {"RequestType": "Update", "K": "true", "Data": {"A": "1"}}
    assert rollback.settled(marked, "K") == {"IsComplete": True, "Data": {"A": "1"}}
    assert rollback.settled({"RequestType": "Update", "K": "false"}, "K") is None
    assert props.positive_int({"N": "1"}, "N") == 1
    with pytest.raises(KeyError, match="N must be a positive whole number, got '0'"):
        props.positive_int({"N": "0"}, "N", error=KeyError)
    assert props.positive_int({}, "N", default=7) == 7
    assert props.started_at({"T": "12.5"}, "T", 99.0) == 12.5
    assert props.started_at({"T": "later"}, "T", 99.0) == 99.0
    assert props.one_line("a\n  b", 10) == "a b"
    assert props.one_line("x" * 11, 10) == "x" * 7 + "..."
    props.require({"A": "1", "B": "2"}, ("A", "B"), construct="Some")
    with pytest.raises(KeyError, match="missing B, C; the Some construct must pass all of A, B, C"):
        props.require({"A": "1", "B": ""}, ("A", "B", "C"), construct="Some", error=KeyError)


def test_time_left_is_the_contexts_in_seconds() -> None:
    from pd_lambda import props

    time_left = props.time_left(LambdaContext(12.5))
    assert time_left is not None and time_left() == 12.5
    assert props.time_left(None) is None  # a direct call: no budget


@pytest.mark.parametrize(
    ("status", "began", "also", "failing"),
    [
        ("UPDATE_ROLLBACK_IN_PROGRESS", 0.0, (), True),  # failing now, whenever it began
        ("DELETE_IN_PROGRESS", 0.0, (), False),
        ("DELETE_IN_PROGRESS", 0.0, ("DELETE_IN_PROGRESS",), True),
        ("CREATE_FAILED", 1000.0 - 600, (), True),  # began at the lead: this deploy's
        ("CREATE_FAILED", 1000.0 - 601, (), False),  # one second earlier: a previous one's
        ("CREATE_FAILED", None, (), True),  # no time given: taken as this deploy's
        ("CREATE_IN_PROGRESS", 1000.0, (), False),
    ],
)
def test_the_cluster_stack_fails_in_this_deploy_by_one_rule(
    status: str, began: float | None, also: tuple[str, ...], failing: bool
) -> None:
    from pd_lambda import cluster_stack

    assert cluster_stack.LEAD_SECONDS == 600
    reading = cluster_stack.Reading(status, "why", began)
    assert reading.failing(started=1000.0, also=also) is failing
    assert reading.failed_earlier is (status == "CREATE_FAILED")


def test_a_cluster_stack_that_does_not_exist_reads_as_none() -> None:
    from botocore.exceptions import ClientError
    from pd_lambda import cluster_stack

    missing = ClientError(
        {"Error": {"Code": "ValidationError", "Message": "Stack with id X does not exist"}},
        "DescribeStacks",
    )
    denied = ClientError(
        {"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "DescribeStacks"
    )

    class Stacks:
        def __init__(self, answer: Any) -> None:
            self.answer = answer

        def describe_stacks(self, **_: Any) -> Any:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    assert cluster_stack.read(Stacks(missing), "X") is None
    assert cluster_stack.read(Stacks({"Stacks": []}), "X") is None
    with pytest.raises(ClientError):
        cluster_stack.read(Stacks(denied), "X")
    assert cluster_stack.read(Stacks({"Stacks": [{"StackStatus": "CREATE_COMPLETE"}]}), "X") == (
        cluster_stack.Reading("CREATE_COMPLETE", "no reason given", None)
    )
