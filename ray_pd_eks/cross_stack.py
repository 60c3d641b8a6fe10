"""Cross-stack references that only some settings create, in one table (STYLE 19).

CDK turns a value one stack passes to another into an export of the first and an
``Fn::ImportValue`` in the second. CloudFormation refuses to delete an export while another
stack imports it, and ``cdk deploy`` updates the exporting stack first (it is a dependency of
the importing one). So a change that removes such a reference (turning observability or the
endpoint off, an internet-facing endpoint made internal, ...) fails once on a deployed stage:
the exporter's update stops at "Export ... cannot be deleted as it is in use by ...", and rolls
back. ``stack.export_value`` cannot carry the export over, because the exported resource goes
too. The way through is to update the importing stacks first (``--exclusively``), then the rest:
:func:`ordered_deploy` says how, and ``ray-pd-eks settings`` prints it when a change needs it
(docs/lifecycle.md, "Turning a feature off on a deployed stack").

Every export the stacks create is either in this table or made by every configuration;
tests/test_cross_stack.py checks that two ways against the synthesized templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ray_pd_eks.config import AppConfig

STAGE_ID = "RayPdEks"  # app.py's Stage; its stacks are selected as 'RayPdEks/<stack>'
# Every stack, in deploy order (stacks/stage.py RayPdEksStage.stacks).
STACKS = ("Network", "Cluster", "GpuNodes", "Workload", "GpuAddons", "Readiness")
DEPLOY_ALL = f"npx cdk deploy '{STAGE_ID}/*' --concurrency 4"


def _endpoint_probe(c: AppConfig) -> bool:
    """The deploy's chat completion through the load balancer
    (pd_constructs/readiness/endpoint_probe.py probe_skip_reason): with an endpoint, unless
    tokens come from an existing identity provider."""
    return c.endpoint_exposed and not (c.endpoint_auth == "jwt" and not c.endpoint_uses_cognito)


CONDITIONS: dict[str, Callable[[AppConfig], bool]] = {
    "observability=cloudwatch, KV probe on": lambda c: (
        c.observability_enabled and c.kv_probe_interval_minutes > 0
    ),
    "endpoint probe": _endpoint_probe,
    "endpoint probe, internal": lambda c: _endpoint_probe(c) and c.endpoint_exposure == "internal",
    "endpoint probe, internet-facing": lambda c: (
        _endpoint_probe(c) and c.endpoint_exposure == "internet-facing"
    ),
    "endpoint probe, Cognito": lambda c: _endpoint_probe(c) and c.endpoint_uses_cognito,
    "endpointExposure=internet-facing": lambda c: c.endpoint_exposure == "internet-facing",
    "endpointExposure=internal": lambda c: c.endpoint_exposure == "internal",
}


@dataclass(frozen=True)
class Reference:
    """Exports of ``exporter`` that ``importer`` imports under ``when``. ``resource`` is the
    start of the exported resource's logical id (an export is named
    ``ExportsOutput<Ref|FnGetAtt><logical id>...``)."""

    exporter: str
    importer: str
    resource: str
    what: str
    when: str

    def __post_init__(self) -> None:
        if self.when not in CONDITIONS:
            raise ValueError(f"reference {self.resource}: condition {self.when!r} unknown")
        if STACKS.index(self.exporter) >= STACKS.index(self.importer):
            raise ValueError(
                f"reference {self.resource}: {self.exporter} deploys after its importer"
            )

    def applies(self, config: AppConfig) -> bool:
        return CONDITIONS[self.when](config)


REFERENCES: tuple[Reference, ...] = (
    Reference(
        "Workload",
        "Readiness",
        "ObservabilityAlarmTopic",
        "the alarm topic, for the KV probe's alarms",
        "observability=cloudwatch, KV probe on",
    ),
    Reference(
        "Cluster",
        "Workload",
        "ProvidersEndpointProbeFunctionServiceRole",
        "the endpoint probe's role, for its Cognito read",
        "endpoint probe",
    ),
    Reference(
        "Cluster",
        "Workload",
        "ProvidersEndpointProbeSecurityGroup",
        "the endpoint probe's security group, admitted by the ALB",
        "endpoint probe, internal",
    ),
    Reference(
        "Cluster",
        "Workload",
        "EgressEip",
        "the NAT gateway's address, admitted by the ALB",
        "endpoint probe, internet-facing",
    ),
    Reference(
        "Cluster",
        "Readiness",
        "ProvidersEndpointProbeProviderframeworkonEvent",
        "the endpoint probe's Provider",
        "endpoint probe",
    ),
    Reference(
        "Workload",
        "Readiness",
        "ApplicationEndpointLoadBalancer",
        "the ALB's DNS name, that the probe calls",
        "endpoint probe",
    ),
    Reference(
        "Workload",
        "Readiness",
        "ApplicationEndpointTokenIssuerUserPool",
        "the Cognito pool, client and domain the probe gets its token from",
        "endpoint probe, Cognito",
    ),
    Reference(
        "Network",
        "Workload",
        "NetworkVpcPublicSubnet2",
        "the second public subnet, for the internet-facing ALB",
        "endpointExposure=internet-facing",
    ),
    Reference(
        "Network",
        "Workload",
        "NetworkVpcLoadBalancerSubnet1Subnet",
        "the internal ALB's first subnet of its own",
        "endpointExposure=internal",
    ),
    Reference(
        "Network",
        "Workload",
        "NetworkVpcLoadBalancerSubnet2Subnet",
        "the internal ALB's second subnet of its own",
        "endpointExposure=internal",
    ),
)

# Rows no configuration of the tests' session synthesizes (with why); the others are checked
# two ways on every test run.
NOT_SYNTHESIZED_IN_TESTS: dict[str, str] = {}


def removed_references(before: AppConfig, after: AppConfig) -> list[Reference]:
    """The references ``before`` makes and ``after`` does not: what a deploy of ``after``
    over a stage deployed with ``before`` cannot remove in the usual order."""
    return [r for r in REFERENCES if r.applies(before) and not r.applies(after)]


def ordered_deploy(removed: list[Reference], stage_id: str = STAGE_ID) -> list[str]:
    """The commands that deploy such a change: each importing stack alone, the last to deploy
    first, so that it stops importing before its exporter drops the export; then every stack.
    Empty when nothing is removed. ``stage_id``: the Stage's (``<deploymentName>-RayPdEks``)."""
    if not removed:
        return []
    importers = sorted({r.importer for r in removed}, key=STACKS.index, reverse=True)
    return [
        *(f"npx cdk deploy '{stage_id}/{stack}' --exclusively" for stack in importers),
        DEPLOY_ALL.replace(f"'{STAGE_ID}/*'", f"'{stage_id}/*'"),
    ]


def markdown() -> str:
    """The table as docs/lifecycle.md shows it."""
    lines = ["| exported by | imported by | what | while |", "|---|---|---|---|"]
    lines += [f"| {r.exporter} | {r.importer} | {r.what} | {r.when} |" for r in REFERENCES]
    return "\n".join(lines) + "\n"


# -- kept for the upgrade, remove in the next release ----------------------------------------
#
# The previous release's GpuNodes stack imported from the Cluster stack; this one imports
# nothing from it, and the two deploy side by side. The Cluster stack keeps, for one release,
# what that old GpuNodes stack used (stacks/cluster_stack.py ``_keep_for_upgrade``):
#
# * its exports: CloudFormation refuses to delete an export that another stack still imports,
#   and the old GpuNodes stack imports them until its own update is done;
# * the Providers of its two custom resources whose Providers moved into GpuNodes (a custom
#   resource cannot change its ServiceToken, so the new ones have new logical ids, and the
#   old ones' Delete, at the end of the GpuNodes update, must still reach their Provider).
#
# tests/test_cross_stack.py checks every row against the synthesized Cluster stack, and that
# docs/lifecycle.md lists them. The next release removes this table and what it names.


@dataclass(frozen=True)
class Kept:
    """One thing the Cluster stack keeps for the upgrade: an export (``name`` after
    ``<stack>:``) or a Provider (``name``: the construct path under the Cluster stack)."""

    kind: str  # "export" or "provider"
    name: str
    what: str


KEPT_FOR_UPGRADE: tuple[Kept, ...] = (
    Kept("export", "ExportsOutputRefCluster9EE0221C4853B4C3", "the cluster's name"),
    Kept("export", "ExportsOutputFnGetAttCluster9EE0221CArn9E0B683E", "the cluster's ARN"),
    Kept(
        "export",
        "ExportsOutputFnGetAttCluster9EE0221CClusterSecurityGroupIdC9685297",
        "the cluster security group",
    ),
    Kept(
        "export",
        "ExportsOutputFnGetAttClusterKubectlProviderframeworkonEvent7915A232Arn81113105",
        "the kubectl provider (the old device-plugin and autoscaler releases' Delete)",
    ),
    Kept(
        "export",
        "ExportsOutputFnGetAttGpuAzChooserProviderframeworkonEventC4F5C3F9Arn602EF012",
        "the GPU AZ chooser's Provider",
    ),
    Kept(
        "export",
        "ExportsOutputFnGetAttProvidersGpuCapacityWatchProviderframeworkonEvent60047BB8ArnBBFEB054",
        "the capacity watch's Provider",
    ),
    Kept("export", "ExportsOutputRefVpcCniRole0E3ED76EEF50D054", "the VPC CNI's role"),
    Kept("provider", "GpuAzChooser", "the GPU AZ choice's Provider (old GpuAzE036B77A)"),
    Kept(
        "provider",
        "Providers/GpuCapacityWatch",
        "the capacity watch's Provider (old GpuCapacityWatchCheckFFD5439C)",
    ),
)


def kept_markdown() -> str:
    """The kept items as docs/lifecycle.md lists them."""
    lines = ["| kept in the Cluster stack | what | for |", "|---|---|---|"]
    for k in KEPT_FOR_UPGRADE:
        use = (
            "the old GpuNodes stack imports it until its update is done"
            if k.kind == "export"
            else "the Delete of the old GpuNodes stack's custom resource"
        )
        lines.append(f"| {k.kind} `{k.name}` | {k.what} | {use} |")
    return "\n".join(lines) + "\n"
