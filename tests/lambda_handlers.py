"""A Lambda's module loaded by its path, and the boto3 stand-ins the handlers' tests share.

The folders under ``assets/lambda/`` are not packages, and each has a ``handler.py``: a test
module loads the one it tests under a name of its own (dataclasses look their module up in
``sys.modules``), through ray_pd_eks.lambda_code's loader, which refuses to reuse a different
file already imported under that name.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from ray_pd_eks import lambda_code


def load(folder: str, module_name: str, name: str = "handler") -> ModuleType:
    """``assets/lambda/<folder>/<name>.py``, imported as ``module_name``. The readiness folder's
    modules import their siblings (``kube``, ``checks``, ``steps``...) by those names, as in
    the Lambda: those are loaded first, under those names."""
    if folder == lambda_code.READINESS_DIR.name:
        lambda_code.steps()  # and with it every sibling the handler imports
    return lambda_code._load(name, module_name, lambda_code.LAMBDA_DIR / folder)


def stubbed_client(service: str) -> tuple[Any, Stubber]:
    """A boto3 client of ``service`` (us-west-2, placeholder keys) and its active Stubber."""
    client = boto3.client(
        service, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"
    )
    stub = Stubber(client)
    stub.activate()
    return client, stub


def stubbed_stack(stack_id: str, status: str, *, created: Any) -> tuple[Any, Stubber]:
    """A CloudFormation client whose one ``DescribeStacks`` of ``stack_id`` answers that the
    stack (created at ``created``) is ``status``, and its Stubber."""
    client, stub = stubbed_client("cloudformation")
    stack = {
        "StackId": stack_id,
        "StackName": stack_id.split("/")[1],
        "CreationTime": created,
        "StackStatus": status,
    }
    stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": stack_id})
    return client, stub


RESERVATION_ID = "cr-0123456789abcdef0"


def capacity_reservation(**changes: Any) -> dict[str, Any]:
    """An active, open On-Demand Capacity Reservation for 2 x g6.8xlarge in us-west-2c, as
    EC2's DescribeCapacityReservations describes it; ``changes`` replace fields (None drops
    one)."""
    reservation: dict[str, Any] = {
        "CapacityReservationId": RESERVATION_ID,
        "InstanceType": "g6.8xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2c",
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "active",
        "InstanceMatchCriteria": "open",
    }
    reservation.update(changes)
    return {k: v for k, v in reservation.items() if v is not None}


def boto3_makes(monkeypatch: pytest.MonkeyPatch, handler: ModuleType, **clients: Any) -> list[str]:
    """Replaces ``boto3.client``: hands out ``clients`` by service name, each only with the
    handler's timeouts and retries (its ``CLIENT_CONFIG``); returns the names asked for, in
    order."""
    made: list[str] = []

    def client(name: str, *, config: Any = None) -> Any:
        assert config is handler.CLIENT_CONFIG, f"{name} client without CLIENT_CONFIG"
        made.append(name)
        return clients[name]

    monkeypatch.setattr(boto3, "client", client)
    return made


def positive_whole_number_check(
    handler: ModuleType, properties: dict[str, str], key: str, ok: bool
) -> None:
    """``handler.on_event`` of a Create with ``properties``: taken when ``ok``, else refused
    because ``key`` is not a positive whole number."""
    event = {"RequestType": "Create", "ResourceProperties": properties}
    if ok:
        handler.on_event(event, None)
    else:
        with pytest.raises(RuntimeError, match=f"{key} must be a positive whole number"):
            handler.on_event(event, None)


def stack_status_client(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, status: str
) -> list[str]:
    """Replaces ``module._client``: each client it makes stands in for CloudFormation, whose
    ``DescribeStacks`` answers one stack in ``status``; returns the names asked for, in
    order."""
    asked: list[str] = []

    class Cfn:
        def describe_stacks(self, **_: Any) -> dict[str, Any]:
            return {"Stacks": [{"StackStatus": status}]}

    def client(name: str) -> Any:
        asked.append(name)
        return Cfn()

    monkeypatch.setattr(module, "_client", client)
    return asked


class LambdaContext:
    """The Lambda context's part the handlers read: ``seconds`` left in this run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)


def clock_at(
    monkeypatch: pytest.MonkeyPatch, handler: ModuleType, started: float
) -> Callable[[float], None]:
    """``at(seconds)`` sets the handler's clock to that many seconds after ``started``; it
    starts at 60."""

    def set_elapsed(seconds: float) -> None:
        monkeypatch.setattr(handler, "clock", lambda: started + seconds)

    set_elapsed(60)
    return set_elapsed


def clock_fixture(handler: ModuleType, started: float) -> Any:
    """A test module's ``at`` fixture: ``at(seconds)`` sets ``handler``'s clock to that many
    seconds after ``started`` (``clock_at``)."""

    @pytest.fixture
    def at(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
        return clock_at(monkeypatch, handler, started)

    return at


def after(started: float, seconds: float) -> datetime:
    """The moment ``seconds`` after ``started`` (epoch seconds), as boto3 parses API times."""
    return datetime.fromtimestamp(started + seconds, tz=UTC)
