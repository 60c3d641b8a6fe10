"""Synthesizing the app for tests: the same Stage as app.py, with cdk-nag AwsSolutions checks
as a policy-validation plugin, so a finding without an acknowledgment fails synthesis."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from ray_pd_eks.config import AppConfig
from stacks.stage import RayPdEksStage

ROOT = Path(__file__).resolve().parent.parent

# Every synthesized cloud assembly (about 60 MB each) goes under one folder that is removed when
# the test process ends, so repeated runs do not fill the disk. Only the process that made it
# removes it: a forked child (a mutation run's) exiting must not delete its parent's assemblies.
_OUTDIRS = Path(tempfile.mkdtemp(prefix="ray-pd-eks-tests-"))
_OWNER = os.getpid()


@atexit.register
def _remove_outdirs() -> None:
    if os.getpid() == _OWNER:
        shutil.rmtree(_OUTDIRS, ignore_errors=True)


def outdir(prefix: str) -> str:
    """A fresh folder for one synthesized assembly, removed with the others at exit."""
    return tempfile.mkdtemp(prefix=prefix, dir=_OUTDIRS)


def cdk_json_context() -> dict[str, Any]:
    return dict(json.loads((ROOT / "cdk.json").read_text())["context"])


@dataclass
class Synthesized:
    """One synthesized Stage: its config, the Stage object and each stack's template JSON."""

    config: AppConfig
    stage: RayPdEksStage
    templates: dict[str, dict[str, Any]]
    outdir: Path

    def resources(self, stack: str, rtype: str) -> dict[str, dict[str, Any]]:
        """Resources of one CloudFormation type in one stack, by logical id."""
        return {k: v for k, v in self.templates[stack]["Resources"].items() if v["Type"] == rtype}

    def egress_rules(self, stack: str, group: str) -> list[dict[str, Any]]:
        """Every egress rule of the security group ``group`` (a logical id): inline ones but
        CDK's placeholder ("Disallow all traffic", what a group with no rule carries) and the
        ``AWS::EC2::SecurityGroupEgress`` resources of the group."""
        resources = self.templates[stack]["Resources"]
        inline = [
            rule
            for rule in resources[group]["Properties"].get("SecurityGroupEgress", [])
            if rule.get("Description") != "Disallow all traffic"
        ]
        separate = [
            {k: v for k, v in r["Properties"].items() if k != "GroupId"}
            for r in resources.values()
            if r["Type"] == "AWS::EC2::SecurityGroupEgress"
            and r["Properties"].get("GroupId") == {"Fn::GetAtt": [group, "GroupId"]}
        ]
        return inline + separate

    def metadata(self, entry_type: str) -> list[tuple[str, Any]]:
        """(construct path, data) of each metadata entry of ``entry_type`` (``aws:cdk:warning``,
        ``aws:cdk:acknowledged-rules``, ...) that synthesis wrote for the stage's stacks into the
        cloud assembly (``<stack>.metadata.json``, where the CDK CLI reads warnings): files read
        once, not a jsii round trip per construct (about 1 ms each, 600 constructs an app).
        Paths start with a slash (``/RayPdEks/Workload/...``). A Stage's own metadata is in no
        stack's: ask ``stage.node.metadata`` for that."""
        top = json.loads((self.outdir / "manifest.json").read_text())
        (nested,) = [
            a["properties"]["directoryName"]
            for a in top["artifacts"].values()
            if a["type"] == "cdk:cloud-assembly"
        ]
        directory = self.outdir / nested
        manifest = json.loads((directory / "manifest.json").read_text())
        found: list[tuple[str, Any]] = []
        for artifact in manifest["artifacts"].values():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            by_path: dict[str, list[dict[str, Any]]] = {}
            for source in (
                artifact.get("metadata") or {},
                json.loads((directory / artifact["additionalMetadataFile"]).read_text())
                if "additionalMetadataFile" in artifact
                else {},
            ):
                for path, entries in source.items():
                    by_path.setdefault(path, []).extend(entries)
            found += [
                (path, entry.get("data"))
                for path, entries in by_path.items()
                for entry in entries
                if entry["type"] == entry_type
            ]
        return found

    def only(self, stack: str, rtype: str) -> dict[str, Any]:
        found = list(self.resources(stack, rtype).values())
        assert len(found) == 1, f"expected one {rtype} in {stack}, found {len(found)}"
        return found[0]


# Assets are not copied into the tests' assemblies (`cdk synth --no-staging` does the same):
# each would otherwise hold the kubectl and Helm layers' zips again (57 MB) and the Lambda
# folders, written by every synth and removed at exit. The templates are the same (an asset's
# hash, its S3 key, comes from its source either way); the metadata then names the source path
# instead of `asset.<hash>`. `test_render` synthesizes through app.py with staging, as
# `cdk synth` does.
NO_STAGING = {"aws:cdk:disable-asset-staging": True}


def synth(overrides: Mapping[str, Any] | None = None, *, nag: bool = True) -> Synthesized:
    context = {**cdk_json_context(), **(overrides or {})}
    out = Path(outdir("synth-"))
    app = cdk.App(context={**context, **NO_STAGING}, outdir=str(out))
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    config = AppConfig.from_context(context)
    stage = RayPdEksStage(app, config.stage_id, config=config)
    assembly = app.synth()
    templates = {}
    for stack in stage.stacks:
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        templates[stack.node.id] = json.loads(Path(artifact.template_full_path).read_text())
    return Synthesized(config, stage, templates, out)


# The region the tests read synthesized manifests in (CloudFormation fills it at deploy time).
TEST_REGION = "us-west-2"


def resolve(value: Any) -> str:
    """A manifest as KubernetesManifest leaves it (a JSON string joined with the few intrinsics
    it holds: the deploy region, the URL suffix, a service account's role ARN, other resources'
    references) as plain text."""
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(resolve(p) for p in parts)
    if value == {"Ref": "AWS::Region"}:
        return TEST_REGION
    if isinstance(value, dict) and value.get("Ref") == "AWS::URLSuffix":
        return "amazonaws.com"
    if isinstance(value, dict) and "Fn::FindInMap" in value:
        mapping, key, attribute = value["Fn::FindInMap"]
        assert mapping == "DlcRegistries" and key == {"Ref": "AWS::Region"}, value
        from ray_pd_eks.dlc_images import DLC_ACCOUNTS, dlc_registry

        found = {"account": DLC_ACCOUNTS[TEST_REGION], "host": dlc_registry(TEST_REGION)}
        return str(found[attribute])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and "Ref" in value:  # e.g. a target group's ARN
        return "<{}>".format(value["Ref"])
    if isinstance(value, dict) and "Fn::ImportValue" in value:  # e.g. the VPC id
        return "<import:{}>".format(value["Fn::ImportValue"])
    assert isinstance(value, str), value
    return value


def image_refs(app: Synthesized) -> dict[str, str]:
    """How the synthesized manifests name each pinned image (``resolve`` renders the deploy-time
    digest as ``<ImageDigests logical id>.<key>``): key (``Ray``, ``AwsCli``, ``Prefetch``) ->
    that text."""
    ((logical_id, resource),) = app.resources("Workload", "Custom::ImageDigests").items()
    return {k: f"<{logical_id}.{k}>" for k in resource["Properties"] if k != "ServiceToken"}
