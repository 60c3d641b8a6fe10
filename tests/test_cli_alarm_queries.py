"""``alarm-queries``: each deployed alarm's value is evaluated once; an alarm whose query can
return no series is blind, and says so. CloudWatch's DescribeAlarms is stubbed (checked against
botocore's model); the PromQL query API is replaced by a table of answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pd_constructs.observability.promql import MISSING_IS_NORMAL, alarm_specs
from ray_pd_eks.cli import alarm_queries
from ray_pd_eks.cli.app import App
from ray_pd_eks.config import DEFAULTS
from ray_pd_eks.monitoring import NO_SERIES_IS_NORMAL, alarm_name_prefix, alarm_probe
from tests.cli_fixtures import REGION, Harness, write_cdk_json

TELEMETRY = DEFAULTS.with_overrides({"gpuNodeTelemetry": True})
PREFIX = alarm_name_prefix(DEFAULTS)
SERIES = {"status": "success", "data": {"resultType": "vector", "result": [{"value": [0, "1"]}]}}
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def test_the_probe_is_the_value_each_alarm_compares() -> None:
    """The CLI reads deployed queries; the probe it takes is exactly the spec's."""
    for spec in alarm_specs(TELEMETRY):
        assert alarm_probe(spec.query) == spec.probe, spec.id


def test_the_alarms_quiet_without_series_are_the_same_in_both_places() -> None:
    normal = {s.id for s in alarm_specs(TELEMETRY) if s.missing == MISSING_IS_NORMAL}
    assert normal == set(NO_SERIES_IS_NORMAL)


def test_the_query_goes_to_the_regions_promql_endpoint() -> None:
    url = alarm_queries.query_url("eu-west-1", 'up{a="b"}')
    assert (
        url == "https://monitoring.eu-west-1.amazonaws.com/api/v1/query?query=up%7Ba%3D%22b%22%7D"
    )
    assert alarm_queries.query_url("cn-north-1", "up").startswith(
        "https://monitoring.cn-north-1.amazonaws.com.cn/"
    )


def _harness(tmp_path: Path, specs: list[Any]) -> Harness:
    h = Harness(write_cdk_json(tmp_path, region=REGION))
    h.session.stub("cloudwatch").add_response(
        "describe_alarms",
        {
            "MetricAlarms": [
                {
                    "AlarmName": f"{PREFIX}{s.id}",
                    "EvaluationCriteria": {"PromQLCriteria": {"Query": s.query}},
                }
                for s in specs
            ]
        },
        {"AlarmNamePrefix": PREFIX, "AlarmTypes": ["MetricAlarm"]},
    )
    return h


def _answers(monkeypatch: pytest.MonkeyPatch, table: dict[str, dict[str, Any]]) -> list[str]:
    asked: list[str] = []

    def fake(app: App, expr: str) -> dict[str, Any]:
        asked.append(expr)
        return table[expr]

    monkeypatch.setattr(alarm_queries, "run_query", fake)
    return asked


def test_an_alarm_whose_query_returns_nothing_is_reported_blind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = {s.id: s for s in alarm_specs(TELEMETRY)}
    chosen = [specs[i] for i in ("TtftP95", "HeadDown", "ErrorRatio", "KvCacheFull")]
    h = _harness(tmp_path, chosen)
    asked = _answers(
        monkeypatch,
        {
            specs["TtftP95"].probe: EMPTY,  # the histogram is not where the query reads it
            specs["HeadDown"].probe: SERIES,
            specs["ErrorRatio"].probe: EMPTY,  # no 5xx yet: its healthy state
            specs["KvCacheFull"].probe: {
                "status": "error",
                "errorType": "bad_data",
                "error": "unsupported: group_left with float multiplication",
            },
        },
    )
    result = h.run("alarm-queries")
    assert result.code == 1, result.err
    lines = {line.split()[1]: line for line in result.out.splitlines() if line.startswith("  ")}
    assert lines["TtftP95"].split()[0] == "FAIL"
    assert "no series: the alarm is blind and can never fire" in lines["TtftP95"]
    assert lines["HeadDown"].split()[:3] == ["OK", "HeadDown", "1"]
    assert "no series (none until the first 5xx)" in lines["ErrorRatio"]
    assert lines["ErrorRatio"].split()[0] == "OK"
    assert "the query fails (unsupported: group_left" in lines["KvCacheFull"]
    # Each alarm's probe ran exactly once, without its comparison or `or vector(0)`.
    assert sorted(asked) == sorted(s.probe for s in chosen)
    assert not [q for q in asked if "vector(0)" in q or q.rstrip().endswith(("> 2", "< 1"))]
    assert result.out.rstrip().endswith("an alarm is blind (above)")
    h.session.assert_no_pending_responses()


def test_every_alarm_with_series_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = alarm_specs(DEFAULTS)  # the default: ErrorRatio, HeadDown
    h = _harness(tmp_path, list(specs))
    _answers(monkeypatch, {s.probe: SERIES for s in specs})
    result = h.run("alarm-queries")
    assert result.code == 0, result.err
    assert "every alarm can see what it watches" in result.out


def test_no_alarms_deployed_is_an_access_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = _harness(tmp_path, [])
    _answers(monkeypatch, {})
    result = h.run("alarm-queries")
    assert result.code == 3
    assert f"no PromQL alarm named {PREFIX}*" in result.err


def test_observability_none_has_no_alarms_to_check(tmp_path: Path) -> None:
    h = Harness(write_cdk_json(tmp_path, region=REGION, observability="none"))
    result = h.run("alarm-queries")
    assert result.code == 2
    assert "observability is none" in result.err


def test_the_query_is_signed_for_cloudwatch_and_its_answer_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json
    import ssl
    from types import SimpleNamespace

    from botocore.credentials import Credentials

    from ray_pd_eks.cli import https

    sent: dict[str, Any] = {}

    def fake_request(method: str, url: str, **kwargs: Any) -> https.Response:
        sent.update(method=method, url=url, headers=kwargs["headers"])
        return https.Response(status=200, body=json.dumps(SERIES).encode())

    monkeypatch.setattr(https, "request", fake_request)
    session = SimpleNamespace(get_credentials=lambda: Credentials("AKIDEXAMPLE", "secret"))
    app: Any = SimpleNamespace(
        aws=SimpleNamespace(region="us-west-2", session=session),
        runtime=SimpleNamespace(ssl_context=ssl.create_default_context, clock=lambda: 0.0),
    )
    assert alarm_queries.run_query(app, "up") == SERIES
    assert sent["method"] == "GET"
    assert sent["url"] == "https://monitoring.us-west-2.amazonaws.com/api/v1/query?query=up"
    auth = sent["headers"]["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-west-2/monitoring/aws4_request" in auth

    def denied(method: str, url: str, **kwargs: Any) -> https.Response:
        return https.Response(status=403, body=b'{"message":"not authorized"}')

    monkeypatch.setattr(https, "request", denied)
    with pytest.raises(alarm_queries.AccessError, match="cloudwatch:GetMetricData"):
        alarm_queries.run_query(app, "up")
