"""`cdk destroy` removes what the app created: nothing is retained unless a setting asks for it
(or it is on the allow-list below, with the reason), log groups expire, keys are scheduled for
deletion, and the order of removal is the reverse of the walkthrough's, through dependencies."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from aws_cdk import CfnElement, Stack
from constructs import IConstruct

from ray_pd_eks.config import AppConfig
from ray_pd_eks.timeline import template_text
from tests.synth import ROOT, Synthesized
from tests.test_pipeline import SynthesizedPipeline, synth_pipeline

RETAINING = frozenset({"Retain", "RetainExceptOnCreate", "Snapshot"})
PIPELINE_KEEPS = "pipeline"


@pytest.fixture(scope="module")
def pipeline() -> SynthesizedPipeline:
    return synth_pipeline()


def _stage_stacks(
    name: str, config: AppConfig, templates: dict[str, dict[str, Any]]
) -> Iterator[tuple[str, AppConfig | None, dict[str, Any]]]:
    for stack_id, template in templates.items():
        yield f"{name}/{stack_id}", config, template


def all_stacks(
    default_app: Synthesized, variant_app: Synthesized, pipeline: SynthesizedPipeline
) -> list[tuple[str, AppConfig | None, dict[str, Any]]]:
    """Every synthesized stack: (label, the Stage's config or None for the pipeline's own
    stacks, template)."""
    stacks = [
        *_stage_stacks("default", default_app.config, default_app.templates),
        *_stage_stacks("variant", variant_app.config, variant_app.templates),
        ("pipeline/RayPdEksPipeline", None, pipeline.template),
    ]
    stacks += [(f"pipeline/{n}", None, t) for n, t in pipeline.support_templates.items()]
    for name, templates in pipeline.stage_templates.items():
        stage_config = pipeline.stack.stages[name].config
        stacks += _stage_stacks(f"pipeline/{name}", stage_config, templates)
    return stacks


# Logical-id prefixes of the failure-evidence log groups: the readiness check's and the GPU
# capacity watch's (function and waiter logs), kept even without retainLogs.
# The readiness check's are created in the cluster stack, beside the control plane (the
# waiters' machinery, docs/deploy-timeline.md), under its "Providers" scope; the capacity
# watch's in the GPU node stack, which deploys beside the cluster stack. (The previous
# release's capacity watch, kept under "Providers" for the upgrade, follows retainLogs.)
EVIDENCE_LOG_PREFIXES: tuple[str, ...] = (
    "ProvidersReadinessLogs",
    "ProvidersReadinessWaiterLogs",
    "GpuCapacityWatchLogs",
    "GpuCapacityWatchWaiterLogs",
)
EVIDENCE = "failure evidence"


def allowed_to_survive(config: AppConfig | None, rtype: str, logical_id: str = "") -> str | None:
    """Why a retained resource of ``rtype`` may outlive `cdk destroy`, or None if it may not.

    The allow-list, in full:
    - CloudWatch log groups of a Stage when ``retainLogs`` is on: the setting exists so that a
      production environment keeps its logs for audit after the stacks are gone; likewise the
      application endpoint's ALB access-log bucket.
    - The readiness check's and the GPU capacity watch's log groups, always: a failed first
      deploy rolls back by deleting its stack, and they hold the only record of why
      (docs/lifecycle.md). They expire after ``logRetentionDays`` like every other log group.
    - The pipeline's artifact buckets (its own, and the replication bucket of each other region's
      support stack): CDK Pipelines retains them because CloudFormation cannot delete a
      non-empty bucket. They hold build artifacts only; empty and delete them by hand after
      destroying the pipeline (README, "What survives, and why").
    - The keys of those log groups when ``retainLogs`` is on (the workload's ``LogsKey``, the
      cluster's ``SecretsKey`` that also encrypts the control-plane logs): a retained log
      group whose key is deleted cannot be read any more.
    Nothing else: not the VPC, the cluster, its secrets key, the kubectl layer or the node
    groups.
    """
    if config is not None and config.retain_logs and rtype == "AWS::Logs::LogGroup":
        return "retainLogs"
    logs_key = "LogsKey" in logical_id or logical_id.startswith("ClusterSecretsKey")
    if config is not None and config.retain_logs and rtype == "AWS::KMS::Key" and logs_key:
        return "retainLogs"
    access_logs = logical_id.startswith("ApplicationEndpointAccessLogs")
    if config is not None and config.retain_logs and rtype == "AWS::S3::Bucket" and access_logs:
        return "retainLogs"
    evidence = logical_id.startswith(EVIDENCE_LOG_PREFIXES)
    if config is not None and rtype == "AWS::Logs::LogGroup" and evidence:
        return EVIDENCE
    if config is None and rtype == "AWS::S3::Bucket":
        return PIPELINE_KEEPS
    return None


def retained(
    stacks: list[tuple[str, AppConfig | None, dict[str, Any]]],
) -> list[tuple[str, str, str, str | None]]:
    """(stack, logical id, type, why) for every resource that a delete or replacement keeps."""
    found = []
    for label, config, template in stacks:
        for logical_id, resource in template.get("Resources", {}).items():
            policies = {resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")}
            if policies & RETAINING:
                why = allowed_to_survive(config, resource["Type"], logical_id)
                found.append((label, logical_id, resource["Type"], why))
    return found


def test_nothing_is_retained_unless_allowed(
    default_app: Synthesized, variant_app: Synthesized, pipeline: SynthesizedPipeline
) -> None:
    found = retained(all_stacks(default_app, variant_app, pipeline))
    not_allowed = [f for f in found if f[3] is None]
    assert not_allowed == []


def test_the_allow_list_is_exactly_what_we_expect(
    default_app: Synthesized, variant_app: Synthesized, pipeline: SynthesizedPipeline
) -> None:
    """Pins the survivors, so the documented list cannot drift: from a Stage without retainLogs
    only the four failure-evidence log groups (readiness and capacity watch, each a function and
    a waiter log group); with it, every log group of the Stage and the endpoint's access-log
    bucket, and nothing else; the pipeline's
    two artifact buckets (its own and the us-east-1 replication bucket)."""
    stacks = all_stacks(default_app, variant_app, pipeline)
    found = retained(stacks)
    for label, config, template in stacks:
        kept = sorted(rtype for stack, _, rtype, _ in found if stack == label)
        if config is None:
            expected = ["AWS::S3::Bucket"] if "Pipeline" in label else []
        elif config.retain_logs:
            expected = sorted(
                r["Type"]
                for logical_id, r in template["Resources"].items()
                if r["Type"] == "AWS::Logs::LogGroup"
                or (
                    r["Type"] == "AWS::S3::Bucket"
                    and logical_id.startswith("ApplicationEndpointAccessLogs")
                )
                or (
                    r["Type"] == "AWS::KMS::Key"
                    and ("LogsKey" in logical_id or logical_id.startswith("ClusterSecretsKey"))
                )
            )
        else:
            expected = [
                r["Type"]
                for logical_id, r in template["Resources"].items()
                if r["Type"] == "AWS::Logs::LogGroup"
                and logical_id.startswith(EVIDENCE_LOG_PREFIXES)
            ]
        assert kept == expected, label
    assert sum(1 for f in found if f[3] == PIPELINE_KEEPS) == 2
    # Each Stage without retainLogs keeps exactly its four evidence log groups.
    evidence = sorted(f[1] for f in found if f[0].startswith("default/") and f[3] == EVIDENCE)
    assert len(evidence) == 4
    assert all(any(e.startswith(p) for p in EVIDENCE_LOG_PREFIXES) for e in evidence)
    assert sum(1 for f in found if f[3] == "retainLogs") >= 8  # variant and prod: 4+ each


def test_every_log_group_expires(
    default_app: Synthesized, variant_app: Synthesized, pipeline: SynthesizedPipeline
) -> None:
    for label, config, template in all_stacks(default_app, variant_app, pipeline):
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == "AWS::Logs::LogGroup":
                days = resource["Properties"].get("RetentionInDays")
                expected = config.log_retention_days if config else days
                assert days is not None and days == expected, (label, logical_id, days)


def test_keys_are_deleted_with_a_pending_window(
    default_app: Synthesized, variant_app: Synthesized, pipeline: SynthesizedPipeline
) -> None:
    keys = 0
    for label, config, template in all_stacks(default_app, variant_app, pipeline):
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] != "AWS::KMS::Key":
                continue
            keys += 1
            logs_key = "LogsKey" in logical_id or logical_id.startswith("ClusterSecretsKey")
            kept = config is not None and config.retain_logs and logs_key
            expected = "Retain" if kept else "Delete"
            assert resource.get("DeletionPolicy") == expected, (label, logical_id)
            if config is not None:  # the app's own key: 7 days; the pipeline's: KMS's 30
                assert resource["Properties"]["PendingWindowInDays"] == 7, (label, logical_id)
    assert keys >= 4  # default, variant, two stages, and the pipeline's own


def _depends_on(template: dict[str, Any], logical_id: str) -> set[str]:
    value = template["Resources"][logical_id].get("DependsOn", [])
    return {value} if isinstance(value, str) else set(value)


def _logical_id(construct: IConstruct) -> str:
    """The logical id of an L2 construct's CloudFormation resource."""
    child: IConstruct | None = construct
    while child is not None and not isinstance(child, CfnElement):
        child = child.node.default_child
    assert isinstance(child, CfnElement), construct.node.path
    return Stack.of(child).get_logical_id(child)


def test_stacks_go_readiness_then_nodes_then_cluster_then_network(
    default_app: Synthesized,
) -> None:
    """Stack dependencies make `cdk destroy` delete the readiness check first, then the GPU
    add-ons (before the GPU nodes) and the workload, then the cluster, network last. The GPU
    node stack has no dependency on the cluster stack (they deploy side by side): the CLI's
    order puts it before the cluster (test_the_cli_destroys_the_gpu_nodes_before_the_cluster)."""
    stage = default_app.stage
    assert stage.network.dependencies == []
    assert stage.cluster.dependencies == [stage.network]
    assert stage.gpu_nodes.dependencies == [stage.network]
    assert stage.cluster in stage.workload.dependencies
    assert {stage.cluster, stage.gpu_nodes} <= set(stage.gpu_addons.dependencies)
    for stack in (stage.workload, stage.gpu_nodes, stage.gpu_addons):
        assert stack in stage.readiness.dependencies


def test_device_plugins_go_before_the_gpu_nodes(default_app: Synthesized) -> None:
    """Their stack depends on the GPU node stack, so destroy removes it first."""
    stage = default_app.stage
    assert stage.gpu_nodes in stage.gpu_addons.dependencies
    template = default_app.templates["GpuAddons"]
    charts = {
        r["Properties"]["Release"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }
    assert charts == {"aws-efa-k8s-device-plugin", "nvidia-device-plugin"}


def test_rayservice_goes_before_kuberay_which_goes_before_the_namespace(
    default_app: Synthesized,
) -> None:
    workload = default_app.stage.workload.workload
    template = default_app.templates["Workload"]
    namespace = _logical_id(workload.namespace)
    operator = _logical_id(workload.operator.chart)
    rayservice = _logical_id(workload.rayservice)
    assert namespace in _depends_on(template, operator)
    assert operator in _depends_on(template, rayservice)


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from _objects(child)
    elif isinstance(node, list):
        for child in node:
            yield from _objects(child)


def test_nothing_creates_aws_resources_behind_cloudformations_back(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    """A LoadBalancer Service, an Ingress or a PVC would leave an ELB or EBS volume after the
    cluster goes. (The endpoint's ALB is a CloudFormation resource; Kubernetes only binds to it.)"""
    for app in (default_app, variant_app):
        for template in app.templates.values():
            for resource in template["Resources"].values():
                props = resource.get("Properties", {})
                if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
                    document = json.loads(template_text(props["Manifest"]))
                elif resource["Type"] == "Custom::AWSCDK-EKS-HelmChart":
                    document = json.loads(template_text(props.get("Values", "{}")))
                else:
                    continue
                for obj in _objects(document):
                    assert obj.get("kind") not in ("Ingress", "PersistentVolumeClaim"), obj
                    assert obj.get("type") != "LoadBalancer", obj
                    assert "volumeClaimTemplates" not in obj, obj


# -- the documented destroy commands, checked against the synthesized assemblies -------------

DOCS = ROOT / "docs"


# What EKS needs beyond the stack dependencies: a cluster with node groups cannot be deleted
# ("Cluster has nodegroups attached"), and the GPU node stack does not depend on the cluster
# stack (they deploy side by side), so only the order of the CLI's destroy keeps them apart.
DELETE_BEFORE = {("GpuNodes", "Cluster"): "EKS deletes no cluster that has node groups"}


def _cli_destroy_sequence(stacks: Sequence[Stack]) -> list[str]:
    """The stacks' ids in the order CDK CLI 2.1148.1's `cdk destroy` deletes them at its
    default concurrency (1), from node_modules/aws-cdk/lib/index.js: the cloud assembly lists
    a stage's stacks by `topologicalSort` (dependencies first, each wave sorted by artifact
    id), `buildDestroyWorkGraph` makes each stack wait for the selected stacks that depend on
    it, and `WorkGraph.processStacks` deletes one stack at a time, taking the ready stacks in
    the order they became ready (the assembly's order within one update)."""
    remaining = {s.artifact_id: s for s in stacks}
    order: list[Stack] = []
    while remaining:
        wave = sorted(
            k
            for k, s in remaining.items()
            if not any(d.artifact_id in remaining for d in s.dependencies)
        )
        order += [remaining.pop(k) for k in wave]
    dependents = {s.artifact_id: [o for o in order if s in o.dependencies] for s in order}
    done: list[Stack] = []
    pool: list[Stack] = []
    while len(done) < len(order):
        for s in order:
            ready = all(o in done for o in dependents[s.artifact_id])
            if ready and s not in done and s not in pool:
                pool.append(s)
        done.append(pool.pop(0))
    return [s.node.id for s in done]


def _destroy_order(stacks: Sequence[Stack]) -> list[list[str]]:
    """The stacks' ids in the order a destroy may delete them: each group after every stack
    that depends on it (dependents first), as the CDK CLI's destroy work graph orders them."""
    left = list(reversed(stacks))
    groups: list[list[str]] = []
    while left:
        ready = [s for s in left if not any(s in other.dependencies for other in left)]
        assert ready, "dependency cycle"
        groups.append([s.node.id for s in ready])
        left = [s for s in left if s not in ready]
    return groups


def _respects_the_delete_order(order: Sequence[str], stacks: Sequence[Stack]) -> bool:
    position = {s: i for i, s in enumerate(order)}
    for stack in stacks:
        for dependency in stack.dependencies:
            if position[dependency.node.id] < position[stack.node.id]:
                return False
    return all(position[first] < position[then] for first, then in DELETE_BEFORE)


def test_the_cli_destroys_the_gpu_nodes_before_the_cluster(default_app: Synthesized) -> None:
    """One stack at a time (the CLI's default), the GPU node stack's turn comes before the
    cluster stack's: it becomes ready when the GPU add-ons are gone, the cluster stack only
    when the workload is gone too, and the add-ons' artifact id sorts before the workload's."""
    stacks = default_app.stage.stacks
    sequence = _cli_destroy_sequence(stacks)
    assert sequence == ["Readiness", "GpuAddons", "Workload", "GpuNodes", "Cluster", "Network"]
    assert _respects_the_delete_order(sequence, stacks)
    # The order rests on the add-ons going before the workload: the other way round, the
    # GPU nodes and the cluster would become ready together, and the cluster sorts first.
    assert default_app.stage.gpu_addons.artifact_id < default_app.stage.workload.artifact_id
    swapped = ["Readiness", "Workload", "GpuAddons", "Cluster", "GpuNodes", "Network"]
    assert not _respects_the_delete_order(swapped, stacks)


def _cli_pattern_matches(pattern: str, hierarchical_id: str) -> bool:
    """The CDK CLI's stack selection: a glob over the hierarchical id where `*` stays within
    one path segment (minimatch), e.g. 'RayPdEksPipeline/RayPdEks-dev/*'."""
    regex = "".join("[^/]*" if c == "*" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, hierarchical_id) is not None


def test_the_documented_destroy_order_is_the_assemblys(default_app: Synthesized) -> None:
    """README, operations.md and teardown.md name all six stacks in the order destroy uses."""
    text = ", then ".join(_cli_destroy_sequence(default_app.stage.stacks))
    for doc in (ROOT / "README.md", DOCS / "operations.md", DOCS / "teardown.md"):
        assert text in " ".join(doc.read_text().split()), doc.name


def test_one_command_destroys_a_pipeline_environment(pipeline: SynthesizedPipeline) -> None:
    """The documented `cdk destroy` pattern selects exactly the stage's stacks, all six, and
    the stage named in the disable-stage-transition line is a stage of the pipeline."""
    teardown = (DOCS / "teardown.md").read_text()
    (pattern,) = set(re.findall(r"npx cdk destroy '(RayPdEksPipeline/[^']+)' --force", teardown))
    root = pipeline.stack.node.root
    every_stack = [c for c in root.node.find_all() if isinstance(c, Stack)]
    selected = {s.node.path for s in every_stack if _cli_pattern_matches(pattern, s.node.path)}
    (name,) = [n for n in pipeline.stack.stages if pattern == f"RayPdEksPipeline/RayPdEks-{n}/*"]
    stage = pipeline.stack.stages[name]
    assert selected == {s.node.path for s in stage.stacks}
    assert len(selected) == 6
    (stage_name,) = re.findall(r"--stage-name (\S+) --transition-type Inbound", teardown)
    assert stage_name in [s["Name"] for s in pipeline.pipeline_stages()]
    assert f"--pipeline-name {pipeline.stack.node.id} " in teardown


def test_the_aws_cli_loops_delete_every_stack_dependents_first(
    pipeline: SynthesizedPipeline,
) -> None:
    stage = next(iter(pipeline.stack.stages.values()))
    groups = _destroy_order(stage.stacks)
    loops = [
        loop.split()
        for doc in DOCS.glob("*.md")
        for loop in re.findall(r"for s in ([A-Za-z ]+); do", doc.read_text())
    ]
    assert loops, "no AWS CLI teardown loop in docs/"
    for order in loops:
        assert sorted(order) == sorted(s.node.id for s in stage.stacks), order
        position = {s: i for i, s in enumerate(order)}
        for before, after in itertools.pairwise(groups):
            assert max(position[s] for s in before) < min(position[s] for s in after), order
        assert _respects_the_delete_order(order, stage.stacks), order
    assert _cli_destroy_sequence(stage.stacks) in loops


def test_pipeline_docs_name_every_stack_of_a_stage(pipeline: SynthesizedPipeline) -> None:
    text = (DOCS / "pipeline.md").read_text()
    (row,) = re.findall(r"Stacks are named (`RayPdEks-<name>-\w+`(?: / `-\w+`)*)", text)
    named = set(re.findall(r"-(\w+)`", row))
    stage = next(iter(pipeline.stack.stages.values()))
    assert named == {s.node.id for s in stage.stacks}


def test_the_teardown_table_gives_a_sandbox_beside_a_pipeline_pipeline_off() -> None:
    """With a pipeline declared, 'RayPdEks/*' selects nothing ("does not exist", exit 0): the
    table's sandbox rows differ by `-c pipeline=`, and the app's warning gives that command."""
    import app as app_module

    teardown = (DOCS / "teardown.md").read_text()
    rows = dict(re.findall(r"^\| a sandbox[^|]*\| (no|yes) \| `([^`]+)` \|$", teardown, flags=re.M))
    assert rows == {
        "no": "npx cdk destroy 'RayPdEks/*' --concurrency 1",
        "yes": "npx cdk destroy 'RayPdEks/*' --concurrency 1 -c pipeline=",
    }
    assert rows["yes"] in app_module.PIPELINE_ONLY_NOTE
