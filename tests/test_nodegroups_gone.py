"""The two halves that keep a Cluster stack from ending ROLLBACK_FAILED / DELETE_FAILED beside
the GPU node group, in the synthesized templates: the Cluster stack's delete guard
(``Custom::NodegroupsGone``: after the cluster, before it on delete, nothing waits for it, its
policy names this cluster's node groups only) and the capacity watch's view of the Cluster
stack (handlers: tests/test_nodegroups_gone_handler.py, tests/test_capacity_handler.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_logs as logs

from pd_constructs.lifecycle.capacity import GpuCapacityWatch
from pd_constructs.lifecycle.nodegroups_gone import NodegroupsGone
from ray_pd_eks.logs import LogPolicy
from tests.arns import own_arn
from tests.synth import Synthesized

LOG_POLICY = LogPolicy(logs.RetentionDays.ONE_MONTH, cdk.RemovalPolicy.DESTROY)


def _guard(app: Synthesized) -> tuple[str, dict[str, Any]]:
    ((logical_id, guard),) = app.resources("Cluster", "Custom::NodegroupsGone").items()
    return logical_id, guard


def test_the_guard_refers_to_the_cluster_and_names_the_gpu_nodes_stack(
    default_app: Synthesized,
) -> None:
    (cluster_id,) = default_app.resources("Cluster", "AWS::EKS::Cluster")
    _, guard = _guard(default_app)
    props = guard["Properties"]
    # The Ref: created after the cluster, deleted before it.
    assert props["ClusterName"] == {"Ref": cluster_id}
    assert props["WaitSeconds"] == "2400"  # 40 minutes (pd_constructs/lifecycle/nodegroups_gone.py)
    assert props["GraceSeconds"] == "300"
    assert props["GpuNodesStack"] == default_app.stage.gpu_nodes.node.path == "RayPdEks/GpuNodes"


def test_nothing_waits_for_the_guard(default_app: Synthesized) -> None:
    """Off the deploy's critical path: no resource of any stack refers to it or depends on it
    (scripts/critical_path.py models the rest)."""
    logical_id, _ = _guard(default_app)
    for stack, template in default_app.templates.items():
        for other_id, resource in template["Resources"].items():
            if other_id == logical_id:
                continue
            text = json.dumps({k: v for k, v in resource.items() if k != "Metadata"})
            assert f'"{logical_id}"' not in text, (stack, other_id)


def _statements(app: Synthesized, role_path: str) -> list[dict[str, Any]]:
    found = []
    for resource in app.resources("Cluster", "AWS::IAM::Policy").values():
        roles = json.dumps(resource["Properties"]["Roles"])
        if role_path in roles:
            found += resource["Properties"]["PolicyDocument"]["Statement"]
    return found


def test_the_guard_may_read_this_clusters_node_groups_only(default_app: Synthesized) -> None:
    name = default_app.config.cluster_name
    functions = default_app.resources("Cluster", "AWS::Lambda::Function")
    (poller,) = [
        f
        for f in functions.values()
        if f["Properties"].get("Description", "").startswith("Holds the cluster's delete")
        and f["Properties"]["Handler"] == "handler.is_complete"
    ]
    role = poller["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = _statements(default_app, role)

    assert sorted(
        (s["Action"], json.dumps(s["Resource"])) for s in statements if s["Effect"] == "Allow"
    ) == sorted(
        [
            ("eks:DescribeNodegroup", json.dumps(own_arn("eks", f"nodegroup/{name}/*"))),
            ("eks:ListNodegroups", json.dumps(own_arn("eks", f"cluster/{name}"))),
        ]
    )


def test_the_capacity_watch_watches_the_cluster_stack(default_app: Synthesized) -> None:
    watch = default_app.only("GpuNodes", "Custom::GpuCapacityWatch")
    assert watch["Properties"]["ClusterStackName"] == default_app.stage.cluster.stack_name


def _stack() -> tuple[cdk.Stack, eks.ICluster]:
    stack = cdk.Stack(cdk.App(), "S")
    return stack, eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")


def _builds_or_refuses(build: Callable[[], object], error: str | None) -> None:
    """``build()`` succeeds when ``error`` is None, else raises a ValueError matching it."""
    if error is None:
        build()
    else:
        with pytest.raises(ValueError, match=error):
            build()


@pytest.mark.parametrize(
    ("wait_minutes", "grace_seconds", "error"),
    [
        (52, 300, None),  # with the 3-minute margin: the app's 55-minute waiter deadline
        (53, 300, "use at most 52 minutes"),
        (40, 30, None),  # one poll
        (40, 29, "must be at least one poll"),
        (40, 40 * 60 - 1, None),
        (40, 40 * 60, "shorter than wait"),
    ],
)
def test_the_guard_validates_its_bounds(
    wait_minutes: int, grace_seconds: int, error: str | None
) -> None:
    stack, cluster = _stack()
    _builds_or_refuses(
        lambda: NodegroupsGone(
            stack,
            "Guard",
            cluster=cluster,
            cluster_name="c",
            gpu_nodes_stack_path="RayPdEks/GpuNodes",
            log_policy=LOG_POLICY,
            wait=cdk.Duration.minutes(wait_minutes),
            grace=cdk.Duration.seconds(grace_seconds),
        ),
        error,
    )


@pytest.mark.parametrize(("minutes", "error"), [(55, None), (56, "every waiter ends")])
def test_the_capacity_watch_refuses_a_timeout_past_the_waiter_deadline(
    minutes: int, error: str | None
) -> None:
    stack, _ = _stack()
    _builds_or_refuses(
        lambda: GpuCapacityWatch(
            stack,
            "Watch",
            cluster_name="c",
            nodegroup_name="gpu-workers",
            instance_type="g6.8xlarge",
            desired_size=2,
            availability_zone="us-west-2a",
            capacity_reservation_id="",
            capacity_wait=cdk.Duration.minutes(35),
            timeout=cdk.Duration.minutes(minutes),
            fingerprint="1",
            log_policy=LOG_POLICY,
        ),
        error,
    )
