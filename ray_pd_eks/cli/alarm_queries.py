"""``alarm-queries``: run each deployed alarm's query once and say which return no series.

A PromQL alarm breaches on the series its query returns, so a query that can return none (a
metric stored under another name than the query reads, a join CloudWatch does not evaluate, a
scrape that never happens) leaves the alarm OK forever, silently. This command reads this
deployment's alarms (``cloudwatch:DescribeAlarms``, names ``<clusterName>-<rayServiceName>-``),
takes the value each one compares (its query without the comparison:
:func:`ray_pd_eks.monitoring.alarm_probe`) and evaluates it once through CloudWatch's
Prometheus-compatible query API (``GET https://monitoring.<region>.amazonaws.com/api/v1/query``,
signed with SigV4 like any AWS call). Each alarm gets one line: its series count, or no series
(blind, unless that is its healthy state: ``NO_SERIES_IS_NORMAL``), or the query's error.

Run it after the deploy and a little traffic (``smoke``): rate windows need a few scrapes.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any

from ray_pd_eks.cli import https
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, AccessError, UsageError
from ray_pd_eks.cli.output import FAIL, OK, Finding, summary
from ray_pd_eks.monitoring import NO_SERIES_IS_NORMAL, alarm_name_prefix, alarm_probe

NAME = "alarm-queries"
HELP = "run each alarm's query once and say which return no series (a blind alarm)"
DESCRIPTION = """\
Read this deployment's PromQL alarms, evaluate the value each one compares once through
CloudWatch's PromQL query API, and print one line per alarm: how many series it returns, or
that it returns none (the alarm can then never fire), or the query's error. Needs
cloudwatch:DescribeAlarms and the PromQL query permissions (cloudwatch:GetMetricData,
cloudwatch:ListMetrics). Exit 1 if an alarm that should see series sees none or fails."""

QUERY_TIMEOUT_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # the global flags (-c, --region, --profile) are all it takes


def query_url(region: str, expr: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://monitoring.{region}.{suffix}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expr}
    )


def run_query(app: App, expr: str) -> dict[str, Any]:
    """One instant query, signed with the session's credentials (SigV4, service
    ``monitoring``); the decoded Prometheus API answer."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    region = app.aws.region
    url = query_url(region, expr)
    credentials = app.aws.session.get_credentials()
    if credentials is None:
        raise AccessError("no AWS credentials to sign the PromQL query with")
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials.get_frozen_credentials(), "monitoring", region).add_auth(request)
    response = https.request(
        "GET",
        url,
        context=app.runtime.ssl_context(),
        clock=app.runtime.clock,
        headers=dict(request.headers.items()),
        timeout=QUERY_TIMEOUT_SECONDS,
    )
    text = response.body[:300].decode("utf-8", "replace")
    if response.status in (401, 403):
        raise AccessError(
            f"the PromQL query API refused the request (HTTP {response.status}: {text}): it "
            "needs cloudwatch:GetMetricData and cloudwatch:ListMetrics"
        )
    try:
        answer = json.loads(response.body or b"{}")
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "status" not in answer:
        return {"status": "error", "error": f"HTTP {response.status}: {text}"}
    return answer


def deployed_alarms(app: App) -> list[tuple[str, str]]:
    """(alarm name without the prefix, PromQL query) of every PromQL alarm of this
    deployment."""
    prefix = alarm_name_prefix(app.config)
    found: list[tuple[str, str]] = []
    with app.aws.errors("cloudwatch:DescribeAlarms"):
        client = app.aws.client("cloudwatch")
        token: str | None = None
        while True:
            kwargs = {"NextToken": token} if token else {}
            page = client.describe_alarms(
                AlarmNamePrefix=prefix, AlarmTypes=["MetricAlarm"], **kwargs
            )
            for alarm in page.get("MetricAlarms", []):
                criteria = (alarm.get("EvaluationCriteria") or {}).get("PromQLCriteria") or {}
                if criteria.get("Query"):
                    name = str(alarm["AlarmName"]).removeprefix(prefix)
                    found.append((name, str(criteria["Query"])))
            token = page.get("NextToken")
            if not token:
                break
    return sorted(found)


def judge(name: str, answer: dict[str, Any]) -> Finding:
    if answer.get("status") != "success":
        error = str(answer.get("error") or answer.get("errorType") or "no answer")
        why = f"the query fails ({error[:200]}): the alarm cannot evaluate it"
        return Finding(FAIL, name, why)
    result = (answer.get("data") or {}).get("result") or []
    if result:
        return Finding(OK, name, f"{len(result)} series")
    if name in NO_SERIES_IS_NORMAL:
        return Finding(OK, name, f"no series ({NO_SERIES_IS_NORMAL[name]})")
    return Finding(
        FAIL,
        name,
        "no series: the alarm is blind and can never fire. Right after a deploy or a restart "
        "send some traffic (smoke) and wait a few minutes; if it stays empty, the metric is "
        "not scraped or not stored under the name the query reads (docs/observability.md)",
    )


def run(app: App) -> int:
    config = app.config
    if not config.observability_enabled:
        raise UsageError("observability is none: this deployment has no alarms")
    alarms = deployed_alarms(app)
    prefix = alarm_name_prefix(config)
    if not alarms:
        raise AccessError(
            f"no PromQL alarm named {prefix}* in {app.aws.region}: is the workload stack "
            "deployed there (check the clusterName and rayServiceName settings and --region)?"
        )
    app.print(f"Alarm queries of {prefix}* ({len(alarms)}), each evaluated once:")
    findings = []
    for name, query in alarms:
        finding = judge(name, run_query(app, alarm_probe(query)))
        findings.append(finding)
        app.print(f"  {finding.level:<5} {finding.check:<20} {finding.text}")
    app.print(
        "",
        summary(findings, "every alarm can see what it watches", "an alarm is blind (above)"),
    )
    return EXIT_CHECK_FAILED if any(f.level == FAIL for f in findings) else EXIT_OK


__all__ = ["NAME", "deployed_alarms", "judge", "run", "run_query"]
