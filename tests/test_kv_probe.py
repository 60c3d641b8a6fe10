"""The scheduled KV probe (kvProbeIntervalMinutes): its function, schedule and alarms in the
templates, and ``handler.scheduled_probe`` against the fake API server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pd_constructs.readiness import kv_probe
from ray_pd_eks import lambda_code
from tests.fakes import kube_api as fake
from tests.fakes.kube_api import FakeKubeApi
from tests.synth import Synthesized

pytest_plugins = ["tests.fakes.fixtures"]  # kube_api, probe_env

handler = lambda_code.handler()
kube = lambda_code.kube()


def _probe_function(app: Synthesized) -> dict[str, Any]:
    (fn,) = [
        r["Properties"]
        for r in app.resources("Readiness", "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == "handler.scheduled_probe"
    ]
    return fn


def _alarms(app: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["MetricName"]: r["Properties"]
        for r in app.resources("Readiness", "AWS::CloudWatch::Alarm").values()
    }


def test_the_probe_runs_as_the_readiness_poll_with_its_role_and_security_group(
    default_app: Synthesized,
) -> None:
    fn = _probe_function(default_app)
    # The poll lives with the other providers in the Cluster stack; the probe imports its role
    # and security group from there.
    (poll,) = [
        r["Properties"]
        for k, r in default_app.resources("Cluster", "AWS::Lambda::Function").items()
        if k.startswith("ProvidersReadiness")
        and r["Properties"].get("Handler") == "handler.is_complete"
    ]
    role = poll["Role"]["Fn::GetAtt"][0]
    assert role in json.dumps(fn["Role"])  # same role: same access entry, group and RBAC
    (group,) = poll["VpcConfig"]["SecurityGroupIds"]
    (probe_group,) = fn["VpcConfig"]["SecurityGroupIds"]
    assert group["Fn::GetAtt"][0] in json.dumps(probe_group)
    assert fn["Timeout"] == 120
    rule = default_app.only("Readiness", "AWS::Events::Rule")["Properties"]
    assert rule["ScheduleExpression"] == "rate(15 minutes)"
    assert handler.PROBE_NAMESPACE == kv_probe.PROBE_NAMESPACE


def test_default_alarms_cover_failure_stall_and_provider_on_the_alarm_topic(
    default_app: Synthesized,
) -> None:
    alarms = _alarms(default_app)
    assert set(alarms) == {"ProbeOk", "KvTransferStalled", "ProviderEfa"}
    assert alarms["ProbeOk"]["TreatMissingData"] == "breaching"  # no probe proves nothing
    assert alarms["ProbeOk"]["EvaluationPeriods"] == 2
    assert alarms["ProbeOk"]["Period"] == 900
    # No ProviderEfa is a provider the probe could not see (its log rotated past NIXL's
    # start-up line), not a pass and not TCP: the alarm keeps its state.
    assert alarms["ProviderEfa"]["TreatMissingData"] == "ignore"
    assert alarms["KvTransferStalled"]["TreatMissingData"] == "notBreaching"
    for alarm in alarms.values():
        assert alarm["Namespace"] == "RayPdEks/KvProbe"
        assert alarm["Dimensions"] == [{"Name": "RayService", "Value": "ray-llm"}]
        assert len(alarm["AlarmActions"]) == 1  # the workload stack's alarm topic


def test_without_observability_the_probe_runs_but_raises_no_alarm(
    variant_app: Synthesized,
) -> None:
    """observability=none (the account brings its own): metrics, no alarms, no topic."""
    assert _alarms(variant_app) == {}
    assert _probe_function(variant_app)["Handler"] == "handler.scheduled_probe"


def test_an_aggregated_app_alarms_only_on_the_integrity_probe(token_app: Synthesized) -> None:
    assert set(_alarms(token_app)) == {"ProbeOk"}


# --- the handler -----------------------------------------------------------------------------


def test_a_healthy_world_publishes_ok_metrics(
    kube_api: FakeKubeApi, probe_env: list[dict[str, Any]]
) -> None:
    kube_api.set_stage("serving")
    outcome = handler.scheduled_probe({}, None)
    assert (outcome["ProbeOk"], outcome["KvTransferStalled"], outcome["ProviderEfa"]) == (1, 0, 1)
    (line,) = probe_env
    emf = line["_aws"]["CloudWatchMetrics"][0]
    assert emf["Namespace"] == "RayPdEks/KvProbe" and emf["Dimensions"] == [["RayService"]]
    assert [m["Name"] for m in emf["Metrics"]] == [
        "ProbeOk",
        "KvTransferStalled",
        "ProviderEfa",
        "ProviderUnknown",
    ]
    assert (line["ProviderEfa"], line["ProviderUnknown"]) == (1, 0)
    assert line["RayService"] == fake.RAYSERVICE and line["ProbeOk"] == 1
    assert "returned" in line["Detail"] and "provider efa,efa" in line["Detail"]


@pytest.mark.parametrize(
    ("attribute", "value", "stalled", "reason"),
    [
        pytest.param("kv_transfers_per_chat", 0, 1, "did not rise", id="kv-stops-moving-stalls"),
        pytest.param(
            "chat_answer", "no idea", 0, "does not contain the code", id="answer-without-the-code"
        ),
    ],
)
def test_a_failed_probe_says_why(
    kube_api: FakeKubeApi,
    probe_env: list[dict[str, Any]],
    attribute: str,
    value: Any,
    stalled: int,
    reason: str,
) -> None:
    """KV that stops moving is a stall; an answer without the code fails the probe but is not
    one."""
    kube_api.set_stage("serving")
    setattr(kube_api, attribute, value)
    outcome = handler.scheduled_probe({}, None)
    assert (outcome["ProbeOk"], outcome["KvTransferStalled"]) == (0, stalled)
    assert reason in outcome["Reason"]


def test_the_tcp_provider_publishes_provider_efa_zero(
    kube_api: FakeKubeApi, probe_env: list[dict[str, Any]]
) -> None:
    kube_api.set_stage("serving")
    kube_api.set_nixl_backend("LIBFABRIC", provider="tcp")
    assert handler.scheduled_probe({}, None)["ProviderEfa"] == 0


def test_an_endpoint_that_is_down_fails_without_raising(
    kube_api: FakeKubeApi, probe_env: list[dict[str, Any]]
) -> None:
    kube_api.set_stage("deploying")
    outcome = handler.scheduled_probe({}, None)
    assert outcome["ProbeOk"] == 0 and "app qwen=DEPLOYING" in outcome["Reason"]
    kube_api.rayservice = None
    outcome = handler.scheduled_probe({}, None)
    assert outcome["ProbeOk"] == 0 and "not found" in outcome["Reason"]
    # A failure is no stall, and says nothing of the provider.
    assert outcome == {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": outcome["Reason"]}
    assert [line["ProbeOk"] for line in probe_env] == [0, 0]


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"KvBackend": "UCX"}, id="ucx"),
        pytest.param({"ServingMode": "aggregated"}, id="aggregated"),
    ],
)
def test_without_libfabric_between_engines_no_provider_is_published(
    kube_api: FakeKubeApi,
    probe_env: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    overrides: dict[str, str],
) -> None:
    """The provider is libfabric's: with UCX, or aggregated (no KV transfer), a pass and a
    failure both publish the probe and the stall only, and the probe never raises."""
    kube_api.set_stage("serving")
    if overrides.get("ServingMode") == "aggregated":
        kube_api.set_aggregated()
    else:
        kube_api.set_nixl_backend("UCX")
    monkeypatch.setenv("PROBE_PROPERTIES", json.dumps(kube_api.props(**overrides)))
    outcome = handler.scheduled_probe({}, None)
    assert (outcome["ProbeOk"], outcome["KvTransferStalled"], outcome["Reason"]) == (1, 0, "")
    assert set(outcome) == {"ProbeOk", "KvTransferStalled", "Reason", "Detail"}
    kube_api.set_stage("deploying")
    outcome = handler.scheduled_probe({}, None)
    assert outcome == {"ProbeOk": 0, "KvTransferStalled": 0, "Reason": outcome["Reason"]}
    assert "app qwen=DEPLOYING" in outcome["Reason"]
    published = [
        [m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]] for line in probe_env
    ]
    assert published == [["ProbeOk", "KvTransferStalled"]] * 2
    assert [line["ProbeOk"] for line in probe_env] == [1, 0]
