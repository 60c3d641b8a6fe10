"""Every validated limit of the configuration, tested on both sides.

One row per edge: the value AT the limit is accepted (and parsed to that value), the value one
step PAST it is rejected with a line that names the context key and says what is allowed. A
one-character change to a comparison (``<`` for ``<=``, 47 for 48) fails one of the pair.

Adding a setting with a limit? Add a row to ``LIMITS``: ``Edge(key, at_limit, past_limit,
"text of the rejection")``, with ``base`` for other settings the edge depends on and ``named``
when the rejection names another key. Numbers are checked at the level of settings: an int or
float setting without a row fails ``test_every_numeric_setting_has_its_edges`` until it has one
(or is listed in ``UNBOUNDED`` with the reason).

These call ``AppConfig.from_context`` directly: no synth, milliseconds per row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from ray_pd_eks.config import AppConfig, ConfigError


@dataclass(frozen=True)
class Edge:
    key: str  # the context key set to at_limit / past_limit
    at_limit: Any  # accepted
    past_limit: Any  # rejected
    text: str  # must appear in the rejection line
    base: Mapping[str, Any] = field(default_factory=dict)  # other keys the edge needs
    named: str = ""  # the key the rejection names, when not ``key``
    why: str = ""  # which edge this is, for the test id

    @property
    def id(self) -> str:
        return f"{self.key}-{self.why or self.at_limit}"


NVME_OFF = {"gpuLocalStorage": "none"}
ENDPOINT = {
    "endpointExposure": "internal",
    "endpointAllowedCidrs": ["10.0.0.0/8"],
    "endpointCertificateArn": (
        "arn:aws:acm:us-west-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
    ),
}
IDP = {
    **ENDPOINT,
    "endpointJwtIssuer": "https://login.example.com",
    "endpointJwksUri": "https://login.example.com/jwks",
}
GP3_ROOT = {"gpuLocalStorage": "none", "gpuRootVolumeThroughput": 750}  # 3000 IOPS allow 750

LIMITS: list[Edge] = [
    # -- the Ray cluster revision (forces a recreate) ------------------------------------------
    Edge("kvProbeIntervalMinutes", 5, 4, "must be 0 (off) or 5..1440 minutes", why="min"),
    Edge("kvProbeIntervalMinutes", 1440, 1441, "must be 0 (off) or 5..1440 minutes", why="max"),
    Edge("kvProbeIntervalMinutes", 0, -1, "must be 0 (off) or 5..1440 minutes", why="off"),
    Edge("rayClusterRevision", 0, -1, "must be a whole number 0..999999", why="min"),
    Edge("rayClusterRevision", 999_999, 1_000_000, "must be a whole number 0..999999", why="max"),
    # -- the examples ------------------------------------------------------------------
    Edge("gpuMemoryUtilization", 1.0, 1.01, "(0, 1]", why="max"),
    Edge("modelParamsBillions", 0, -0.1, "must be 0 (read it from", why="min"),
    Edge(
        "modelParamsBillions",
        600,
        600.5,
        "must be 0 (read it from",
        base={"gpuNodeType": "p5en.48xlarge", "tensorParallelSize": 8, "gpuMemoryUtilization": 1},
        why="max",
    ),
    # A model small enough for 1 % of an L4 (the fit check of tests/test_gpu_types.py).
    Edge(
        "gpuMemoryUtilization",
        0.01,
        0,
        "(0, 1]",
        base={"modelParamsBillions": 0.1},
        why="min-exclusive",
    ),
    Edge("gpuMemoryUtilization", "1.0", "1.0001", "(0, 1]", why="max-from-c"),
    Edge("rayServiceName", "r" * 47, "r" * 48, "is 48 characters; the limit is 47"),
    Edge("clusterName", "c" * 100, "c" * 101, "is 101 characters; the limit is 100"),
    Edge("namespace", "n" * 63, "n" * 64, "is 64 characters; the limit is 63"),
    Edge("gpuNodegroupName", "g" * 33, "g" * 34, "is 34 characters; the limit is 33"),
    Edge("modelId", "m" * 128, "m" * 129, "is 129 characters; the limit is 128"),
    # -- the model revision and the staging bucket's owner ------------------------------------
    Edge("modelRevision", "r" * 128, "r" * 129, "Hugging Face revision of at most 128"),
    Edge("modelRevision", "v1.0/rc-2_x", "-main", "must be a Hugging Face revision", why="ref"),
    Edge("modelS3BucketOwner", "123456789012", "12345678901", "12-digit AWS account id"),
    # The oldest minor EKS still creates is 1.32, but this app ships kubectl layers for 1.35 and
    # 1.36 only: the oldest accepted is 1.35, and 1.34 is refused for the missing layer.
    Edge("kubernetesVersion", "1.35", "1.34", "this app has no kubectl layer for it", why="min"),
    Edge("kubernetesVersion", "1.36", "1.37", "EKS does not offer it yet", why="max"),
    # -- nodes ---------------------------------------------------------------------------------
    Edge("gpuNodeCount", 2, 1, "at least 2", base={"prefillReplicas": 1}, why="min"),
    Edge("gpuNodeCount", 64, 65, "at most 64 nodes in one group", why="max"),
    Edge("prefillReplicas", 1, 0, "must be at least 1", why="min"),
    Edge("decodeReplicas", 1, 0, "must be at least 1", why="min"),
    Edge(
        "prefillReplicas",
        2,
        3,
        "prefillReplicas + decodeReplicas = 4 exceeds gpuNodeCount 3",
        base={"gpuNodeCount": 3},
        named="decodeReplicas",
        why="sum-vs-nodes",
    ),
    Edge("tensorParallelSize", 1, 0, "must be at least 1", why="min"),
    Edge(
        "tensorParallelSize",
        8,
        16,
        "which has 8 GPU(s)",
        base={"gpuNodeType": "p5.48xlarge"},
        why="max-gpus-per-node",
    ),
    Edge(
        "tensorParallelSize",
        4,
        3,
        "use one of 1, 2, 4",
        base={"gpuNodeType": "g6.12xlarge"},
        why="divides-gpus",
    ),
    # -- scaling out ---------------------------------------------------------------------------
    Edge("decodeMinReplicas", 1, 2, "or 1..decodeReplicas (1)", why="max"),
    Edge("decodeMinReplicas", 0, -1, "or 1..decodeReplicas (1)", why="min"),
    Edge(
        "decodeMinReplicas",
        1,
        2,
        "prefillReplicas + decodeMinReplicas = 3 exceeds gpuNodeMinCount 2",
        base={"decodeReplicas": 2, "decodeMaxReplicas": 2, "gpuNodeCount": 3, "gpuNodeMinCount": 2},
        why="vs-node-min",
    ),
    Edge(
        "decodeMaxReplicas",
        2,
        1,
        "at least decodeReplicas (2)",
        base={"decodeReplicas": 2, "gpuNodeCount": 3},
        why="min",
    ),
    Edge(
        "decodeMaxReplicas",
        3,
        4,
        "prefillReplicas + decodeMaxReplicas = 5 exceeds gpuNodeMaxCount 4",
        base={"gpuNodeMaxCount": 4},
        why="vs-node-max",
    ),
    Edge("decodeTargetOngoingRequests", 1, 0, "must be 1..1024", why="min"),
    Edge("decodeTargetOngoingRequests", 1024, 1025, "must be 1..1024", why="max"),
    Edge("decodeUpscaleDelaySeconds", 0, -1, "must be 0..3600 seconds", why="min"),
    Edge("decodeUpscaleDelaySeconds", 3600, 3601, "must be 0..3600 seconds", why="max"),
    Edge("decodeDownscaleDelaySeconds", 0, -1, "must be 0..86400 seconds", why="min"),
    Edge("decodeDownscaleDelaySeconds", 86400, 86401, "must be 0..86400 seconds", why="max"),
    Edge("gracefulShutdownSeconds", 0, -1, "or 1..3600 seconds", why="min"),
    Edge("gracefulShutdownSeconds", 3600, 3601, "or 1..3600 seconds", why="max"),
    Edge("gpuNodeMinCount", 2, 1, "or 2..gpuNodeCount (2)", why="min"),
    Edge("gpuNodeMinCount", 3, 4, "or 2..gpuNodeCount (3)", base={"gpuNodeCount": 3}, why="max"),
    Edge("gpuNodeMaxCount", 3, 2, "gpuNodeCount (3)..64", base={"gpuNodeCount": 3}, why="min"),
    Edge("gpuNodeMaxCount", 64, 65, "gpuNodeCount (2)..64", why="max"),
    Edge("gpuWarmSpareNodes", 0, -1, "must be 0 (no spare)", why="min"),
    Edge(
        "gpuWarmSpareNodes",
        2,
        3,
        "prefillReplicas + decodeMinReplicas + gpuWarmSpareNodes = 5 exceeds gpuNodeMaxCount 4",
        base={"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4},
        why="max",
    ),
    Edge("systemNodeCount", 1, 0, "must be 1..20", why="min"),
    Edge("systemNodeCount", 20, 21, "must be 1..20", why="max"),
    Edge("systemNodeType", "m7i.xlarge", "m7i.large", "at least 4 vCPU and 16 GiB", why="4vcpu"),
    Edge("systemRootVolumeGib", 80, 79, "must be 80..16384 GiB", why="min"),
    Edge("systemRootVolumeGib", 16384, 16385, "must be 80..16384 GiB", why="max"),
    Edge("systemRootVolumeIops", 3000, 2999, "gp3 allows 3000..80000 IOPS", why="min"),
    Edge(
        "systemRootVolumeIops",
        50000,
        50001,
        "at most 500 IOPS per GiB: raise systemRootVolumeGib to 101",
        why="per-gib",
    ),
    Edge(
        "systemRootVolumeIops",
        80000,
        80001,
        "gp3 allows 3000..80000 IOPS",
        base={"systemRootVolumeGib": 160},
        why="max",
    ),
    Edge(
        "systemRootVolumeThroughput",
        125,
        124,
        "gp3 allows 125..2000 MiB/s",
        why="min",
    ),
    Edge(
        "systemRootVolumeThroughput",
        750,
        751,
        "0.25 MiB/s per IOPS: raise systemRootVolumeIops to 3004",
        why="per-iops",
    ),
    Edge(
        "systemRootVolumeThroughput",
        2000,
        2001,
        "gp3 allows 125..2000 MiB/s",
        base={"systemRootVolumeIops": 8000},
        why="max",
    ),
    # -- GPU storage ---------------------------------------------------------------------------
    Edge("gpuRootVolumeGib", 30, 29, "0 (automatic) or 30..16384 GiB", why="min-nvme"),
    Edge("gpuRootVolumeGib", 16384, 16385, "0 (automatic) or 30..16384", why="max-nvme"),
    Edge("gpuRootVolumeGib", 100, 99, "or 100..16384 GiB", base=NVME_OFF, why="min-ebs"),
    Edge("gpuRootVolumeIops", 3000, 2999, "gp3 allows 3000..80000 IOPS", base=GP3_ROOT, why="min"),
    Edge(
        "gpuRootVolumeIops", 80000, 80001, "gp3 allows 3000..80000 IOPS", base=NVME_OFF, why="max"
    ),
    Edge(
        "gpuRootVolumeIops",
        50000,
        50001,
        "at most 500 IOPS per GiB: raise gpuRootVolumeGib to 101",
        base={**NVME_OFF, "gpuRootVolumeGib": 100},
        why="per-gib",
    ),
    Edge(
        "gpuRootVolumeThroughput",
        125,
        124,
        "gp3 allows 125..2000 MiB/s",
        base=NVME_OFF,
        why="min",
    ),
    Edge(
        "gpuRootVolumeThroughput",
        2000,
        2001,
        "gp3 allows 125..2000 MiB/s",
        base=NVME_OFF,
        why="max",
    ),
    Edge(
        "gpuRootVolumeThroughput",
        1000,
        1001,
        "0.25 MiB/s per IOPS: raise gpuRootVolumeIops to 4004",
        base={**NVME_OFF, "gpuRootVolumeIops": 4000},
        why="per-iops",
    ),
    # -- capacity ------------------------------------------------------------------------------
    Edge("gpuCapacityWaitMinutes", 1, 0, "must be 1..35", why="min"),
    Edge("gpuCapacityWaitMinutes", 35, 36, "must be 1..35", why="max"),
    Edge("gpuPlacementGroupName", "p" * 255, "p" * 256, "existing cluster placement group"),
    Edge(
        "gpuCapacityReservationId",
        "cr-" + "0" * 17,
        "cr-" + "0" * 18,
        "On-Demand Capacity Reservation id",
    ),
    # -- serving -------------------------------------------------------------------------------
    Edge("maxModelLen", 3548, 3547, "KV integrity probe", why="min"),
    Edge(
        "maxModelLen",
        1_048_576,
        1_048_577,
        "must be 3548..1048576 tokens",
        base={"modelSource": "Qwen/Qwen3-0.6B", "modelRevision": "main"},  # its KV fits
        why="max",
    ),
    # One sequence must fit the KV cache the default model leaves on an L4 (about 2.0 GiB),
    # even at the floor of 1 KiB per token per billion parameters.
    Edge("maxModelLen", 231_408, 231_409, "does not fit the KV cache", why="kv"),
    Edge("readinessTimeoutMinutes", 10, 9, "must be 10..55", why="min"),
    Edge("readinessTimeoutMinutes", 55, 56, "before that", why="max"),
    Edge("kuberayVersion", "1.7.0", "1.5.99", "must be 1.6.0 or newer", why="min"),
    Edge("kuberayVersion", "1.7.0", "1.7.1", "no vendored chart", why="vendored"),
    Edge("rayVersion", "2.52.0", "2.51.99", "must be 2.52.0 or newer", why="min"),
    Edge(
        "vpcCniAddonVersion",
        "v1.14.0-eksbuild.1",
        "v1.13.99-eksbuild.1",
        "v1.14.0 or newer",
        why="min",
    ),
    # -- model access --------------------------------------------------------------------------
    Edge("modelS3Uri", "s3://abc/m", "s3://ab/m", "s3://<bucket>/<prefix>", why="bucket-3"),
    Edge(
        "modelS3Uri", f"s3://{'b' * 63}/m", f"s3://{'b' * 64}/m", "s3://<bucket>", why="bucket-63"
    ),
    # -- network and access --------------------------------------------------------------------
    Edge("vpcCidr", "10.0.0.0/16", "10.0.0.0/15", "from /16 to /18", why="widest"),
    Edge("vpcCidr", "10.0.0.0/18", "10.0.0.0/19", "from /16 to /18", why="narrowest"),
    Edge("endpointPublicCidrs", ["1.0.0.0/8"], ["0.0.0.0/7"], "to the internet", why="prefix-8"),
    Edge("account", "1" * 12, "1" * 13, "12-digit AWS account id"),
    # -- application endpoint ------------------------------------------------------------------
    Edge("endpointIdleTimeoutSeconds", 300, 299, "must be 300..4000 seconds", why="min"),
    Edge("endpointIdleTimeoutSeconds", 4000, 4001, "must be 300..4000 seconds", why="max"),
    Edge("endpointRateLimitPer5Min", 10, 9, "must be 0 (no AWS WAF web ACL) or 10..", why="min"),
    Edge(
        "endpointRateLimitPer5Min",
        2_000_000_000,
        2_000_000_001,
        "must be 0 (no AWS WAF web ACL) or 10..2000000000",
        why="max",
    ),
    Edge("endpointRateLimitPer5Min", 0, -1, "must be 0 (no AWS WAF web ACL)", why="off"),
    Edge(
        "endpointAllowedCidrs",
        ["10.0.0.0/8"],
        ["10.0.0.0/7"],
        "the internet in effect",
        base={**ENDPOINT, "endpointAuth": "none"},
        why="prefix-8",
    ),
    Edge("endpointJwtAudience", "a" * 256, "a" * 257, "is 257 characters", base=IDP, why="max"),
    Edge("endpointJwtScope", "s" * 256, "s" * 257, "is 257 characters", base=IDP, why="max"),
    # -- teardown ------------------------------------------------------------------------------
    Edge("logRetentionDays", 1827, 1828, "CloudWatch Logs retention", why="max"),
    Edge("logRetentionDays", 1, 2, "CloudWatch Logs retention", why="min"),
    # -- observability -------------------------------------------------------------------------
    Edge("alarmTtftP95Seconds", 0.05, 0.049, "must be 0.05..600 s", why="min"),
    Edge("alarmTtftP95Seconds", 600, 600.1, "must be 0.05..600 s", why="max"),
    Edge("alarmInterTokenP95Seconds", 0.001, 0.0009, "must be 0.001..60 s", why="min"),
    Edge("alarmInterTokenP95Seconds", 60, 60.01, "must be 0.001..60 s", why="max"),
    Edge("alarmErrorPercent", 0.1, 0.09, "must be 0.1..100 %", why="min"),
    Edge("alarmErrorPercent", 100, 100.1, "must be 0.1..100 %", why="max"),
    Edge("alarmKvCachePercent", 1, 0.99, "must be 1..100 %", why="min"),
    Edge("alarmKvCachePercent", 100, 100.5, "must be 1..100 %", why="max"),
    Edge(
        "cloudwatchAddonVersion",
        "v8.0.0-eksbuild.1",
        "v7.99.99-eksbuild.9",
        "must be v8.0.0 or newer",
        why="min-major",
    ),
]

# Numeric settings whose every value is accepted by design (none today). Key -> why.
UNBOUNDED: dict[str, str] = {}


def _context(edge: Edge, value: Any) -> dict[str, Any]:
    return {**edge.base, edge.key: value}


def _parsed(edge: Edge, value: Any) -> Any:
    """``value`` as the field holds it: -c strings parsed to the field's type; a list's entry."""
    if isinstance(value, list):
        return value[0]
    ftype = str(AppConfig.__dataclass_fields__[AppConfig.context_keys()[edge.key]].type)
    return {"int": int, "float": float}.get(ftype, lambda v: v)(value)


@pytest.mark.parametrize("edge", LIMITS, ids=[e.id for e in LIMITS])
def test_value_at_the_limit_is_accepted(edge: Edge) -> None:
    config = AppConfig.from_context(_context(edge, edge.at_limit))
    value = getattr(config, AppConfig.context_keys()[edge.key])
    if isinstance(edge.at_limit, list):
        assert value == tuple(edge.at_limit)
    else:
        assert value == _parsed(edge, edge.at_limit)


@pytest.mark.parametrize("edge", LIMITS, ids=[e.id for e in LIMITS])
def test_value_one_past_the_limit_is_rejected_naming_the_key(edge: Edge) -> None:
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(_context(edge, edge.past_limit))
    named = edge.named or edge.key
    lines = [
        line for line in str(err.value).splitlines() if line.startswith(f"context key '{named}'")
    ]
    assert lines, f"no line names {named}: {err.value}"
    assert any(edge.text in line for line in lines), lines
    if not edge.named:  # the line shows the bad value as parsed (one entry of a list)
        assert any(f"= {json.dumps(_parsed(edge, edge.past_limit))}:" in line for line in lines)
    assert all(
        line.endswith(
            f"(fix it with `ray-pd-eks settings --set {named}=...`, or -c {named}=... for one "
            "command)"
        )
        for line in lines
    )


def test_every_numeric_setting_has_its_edges() -> None:
    numeric = {
        key
        for key, name in AppConfig.context_keys().items()
        if str(AppConfig.__dataclass_fields__[name].type) in ("int", "float")
    }
    covered = {edge.key for edge in LIMITS} | set(UNBOUNDED)
    missing = sorted(numeric - covered)
    assert not missing, (
        f"numeric settings without an at-limit/past-limit pair: {missing}; add an Edge row to "
        "LIMITS in tests/test_limits.py (or a reason to UNBOUNDED)"
    )


def test_kubernetes_version_messages_change_where_eks_stops_creating_clusters() -> None:
    # 1.31 left extended support: EKS refuses it. 1.32 is the oldest EKS still creates.
    def why(version: str) -> str:
        with pytest.raises(ConfigError) as err:
            AppConfig.from_context({"kubernetesVersion": version})
        return str(err.value)

    assert "EKS no longer supports it" in why("1.31")
    assert "EKS no longer supports it" not in why("1.32")
    assert "this app has no kubectl layer for it; use 1.35 or 1.36" in why("1.32")


@pytest.mark.parametrize(
    ("iops", "throughput", "problem_keys"),
    [
        (3000, 750, []),  # exactly 0.25 MiB/s per IOPS at the minimum IOPS
        (3000, 751, ["gpuRootVolumeThroughput"]),
        (2999, 750, ["gpuRootVolumeIops"]),  # IOPS out of range: no ratio judgement on top
    ],
)
def test_gp3_ratio_is_judged_only_for_valid_iops(
    iops: int, throughput: int, problem_keys: list[str]
) -> None:
    context = {**NVME_OFF, "gpuRootVolumeIops": iops, "gpuRootVolumeThroughput": throughput}
    if not problem_keys:
        AppConfig.from_context(context)
        return
    with pytest.raises(ConfigError) as err:
        AppConfig.from_context(context)
    keys = [line.split("'")[1] for line in str(err.value).splitlines()]
    assert keys == problem_keys


def test_every_capacity_watch_ends_by_the_waiter_deadline() -> None:
    """gpuCapacityWaitMinutes at its most still ends the capacity watch, with its own message,
    by 55 minutes, inside CloudFormation's hour; one more minute is refused at synth."""
    from aws_cdk import Duration

    from pd_constructs.lifecycle.waiter import MAX_TIMEOUT  # the bound of every waiter construct
    from ray_pd_eks.config import DEFAULTS, WAITER_DEADLINE_MINUTES
    from ray_pd_eks.config.limits import MAX_CAPACITY_WAIT_MINUTES, MAX_READINESS_MINUTES

    assert WAITER_DEADLINE_MINUTES == 55 == MAX_READINESS_MINUTES
    deadline = Duration.minutes(WAITER_DEADLINE_MINUTES).to_seconds()
    assert MAX_TIMEOUT.to_seconds() == deadline
    at_max = DEFAULTS.with_overrides({"gpuCapacityWaitMinutes": MAX_CAPACITY_WAIT_MINUTES})
    assert at_max.gpu_capacity_watch_minutes == WAITER_DEADLINE_MINUTES
