"""``preflight`` against botocore Stubbers: each AWS answer and the line it produces."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber

from ray_pd_eks.config import AppConfig
from ray_pd_eks.monitoring import fixed_log_group_names
from tests.cli_fixtures import (
    ACCOUNT,
    REGION,
    ROLE_ARN,
    SSO_PATH,
    SSO_ROLE,
    SSO_ROLE_ARN,
    SSO_SESSION_ARN,
    USER_ARN,
    Harness,
    Run,
    stub_get_role,
    write_cdk_json,
)
from tests.lambda_handlers import RESERVATION_ID, capacity_reservation

G6: dict[str, Any] = {
    "InstanceType": "g6.8xlarge",
    "VCpuInfo": {"DefaultVCpus": 32},
    "GpuInfo": {"Gpus": [{"Name": "L4", "Manufacturer": "NVIDIA", "Count": 1}]},
    "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 1}},
    "InstanceStorageSupported": True,
    "InstanceStorageInfo": {
        "TotalSizeInGB": 900,
        "Disks": [{"SizeInGB": 450, "Count": 2, "Type": "ssd"}],
        "NvmeSupport": "required",
    },
}
RES = f"gpuCapacityReservationId={RESERVATION_ID}"  # how the problems name the setting
PG_ARN = f"arn:aws:ec2:{REGION}:{ACCOUNT}:placement-group/"
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:hf-token-AbCdEf"
GIB = 1024**3
ADDON = "amazon-cloudwatch-observability"
ADDON_VERSION = "v8.0.0-eksbuild.1"
# A schema shaped like the add-on's (closed objects listing their keys), accepting the stack's.
ADDON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "agent": {
            "type": "object",
            "properties": {"config": {"type": "object"}, "tolerations": {"type": "array"}},
        },
        "tolerations": {"type": "array"},
        "containerLogs": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "fluentBit": {
                    "type": "object",
                    "properties": {"tolerations": {"type": "array"}},
                },
            },
        },
        "containerInsights": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
        "applicationSignals": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
        "otelContainerInsights": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "logs": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
            },
        },
        "dcgmExporter": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
        "kubeStateMetrics": {
            "type": "object",
            "properties": {"nodeSelector": {"type": "object"}, "tolerations": {"type": "array"}},
        },
        "manager": {
            "type": "object",
            "properties": {"nodeSelector": {"type": "object"}, "tolerations": {"type": "array"}},
        },
    },
}


def addon_versions(*versions: str, token: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "addons": [
            {
                "addonName": ADDON,
                "addonVersions": [{"addonVersion": v} for v in versions],
            }
        ]
    }
    if token:
        page["nextToken"] = token
    return page


AGENT_IDENTITY = [
    {
        "serviceAccount": "cloudwatch-agent",
        "recommendedManagedPolicies": [
            "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
            "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
        ],
    }
]


def stub_addon(
    h: Harness,
    versions: tuple[str, ...] = (ADDON_VERSION, "v7.4.0-eksbuild.1"),
    schema: dict[str, Any] | None = ADDON_SCHEMA,
    kubernetes: str = "1.36",
    identity: list[dict[str, Any]] | None = None,
) -> None:
    """EKS's answers for the add-on: the versions for the cluster's Kubernetes version, then
    (when ``schema`` is not None and the configured version is offered) its schema."""
    eks = h.session.stub("eks")
    eks.add_response(
        "describe_addon_versions",
        addon_versions(*versions),
        {"addonName": ADDON, "kubernetesVersion": kubernetes},
    )
    if schema is not None:
        eks.add_response(
            "describe_addon_configuration",
            {
                "addonName": ADDON,
                "addonVersion": ADDON_VERSION,
                "configurationSchema": json.dumps(schema),
                "podIdentityConfiguration": AGENT_IDENTITY if identity is None else identity,
            },
            {"addonName": ADDON, "addonVersion": ADDON_VERSION},
        )


def offering(az: str, itype: str = "g6.8xlarge") -> dict[str, str]:
    return {"InstanceType": itype, "LocationType": "availability-zone", "Location": az}


def instance(vcpus: int, cluster: str | None = None) -> dict[str, Any]:
    tags = [{"Key": "eks:cluster-name", "Value": cluster}] if cluster else []
    return {
        "InstanceId": "i-0123456789abcdef0",
        "InstanceType": "g6.8xlarge",
        "CpuOptions": {"CoreCount": vcpus // 2, "ThreadsPerCore": 2},
        "Tags": tags,
    }


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    """Someone else (ROLE_ARN) administers: an empty adminPrincipalArns is a FAIL of its own."""
    return Harness(write_cdk_json(tmp_path, region=REGION, adminPrincipalArns=[ROLE_ARN]))


def stub_all(
    h: Harness,
    *,
    arn: str = USER_ARN,
    itype: dict[str, Any] | None = None,
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2c"),
    quota_code: str = "L-DB2E81BA",
    quota: float | str = 128.0,
    running: list[dict[str, Any]] | None = None,
    bootstrap: str | None = "28",
    reservation: dict[str, Any] | str | None = None,
    held: int | str = 0,
    addon: bool = True,
    log_groups: bool = True,
) -> None:
    """Queue the happy-path answers; keyword arguments change one answer each.

    ``reservation``: the capacity reservation EC2 describes (a dict), or the error code it
    answers with (a str); None when no reservation is configured (no call). ``held``: how many
    of this cluster's GPU nodes run in the reservation (when it is found), or the error code
    listing them answers with (a str). ``quota``: the quota's value, or the error code Service
    Quotas answers with (a str). ``addon``: queue
    the observability check's happy answers (off when a test queues its own).
    """
    spec = itype or G6
    name = str(spec["InstanceType"])
    h.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": arn}
    )
    ec2 = h.session.stub("ec2")
    ec2.add_response(
        "describe_instance_types", {"InstanceTypes": [spec]}, {"InstanceTypes": [name]}
    )
    ec2.add_response(
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": [offering(z, name) for z in zones]},
        {
            "LocationType": "availability-zone",
            "Filters": [{"Name": "instance-type", "Values": [name]}],
        },
    )
    if isinstance(reservation, str):
        ec2.add_client_error("describe_capacity_reservations", reservation, http_status_code=400)
    elif reservation is not None:
        ec2.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [reservation]},
            {"CapacityReservationIds": [RESERVATION_ID]},
        )
        if isinstance(held, str):
            ec2.add_client_error("describe_instances", held, http_status_code=400)
        else:
            nodes = [
                {
                    "InstanceId": f"i-0{i:016x}",
                    "InstanceType": name,
                    "CapacityReservationId": RESERVATION_ID,
                }
                for i in range(held)
            ]
            ec2.add_response(
                "describe_instances",
                {"Reservations": [{"Instances": nodes}] if nodes else []},
                {
                    "Filters": [
                        {"Name": "capacity-reservation-id", "Values": [RESERVATION_ID]},
                        {"Name": "instance-state-name", "Values": ["pending", "running"]},
                        {"Name": "tag:eks:cluster-name", "Values": ["ray-llm-multinode"]},
                    ]
                },
            )
    if isinstance(quota, str):
        h.session.stub("service-quotas").add_client_error(
            "get_service_quota", quota, http_status_code=400
        )
    else:
        h.session.stub("service-quotas").add_response(
            "get_service_quota",
            {"Quota": {"QuotaCode": quota_code, "Value": quota}},
            {"ServiceCode": "ec2", "QuotaCode": quota_code},
        )
    if running is not None:
        ec2.add_response(
            "describe_instances", {"Reservations": [{"Instances": running}] if running else []}
        )
    ssm = h.session.stub("ssm")
    if bootstrap is None:
        ssm.add_client_error("get_parameter", "ParameterNotFound", http_status_code=400)
    elif bootstrap == "denied":
        ssm.add_client_error("get_parameter", "AccessDeniedException", http_status_code=400)
    else:
        ssm.add_response(
            "get_parameter",
            {"Parameter": {"Name": "/cdk-bootstrap/hnb659fds/version", "Value": bootstrap}},
            {"Name": "/cdk-bootstrap/hnb659fds/version"},
        )
    if addon:
        stub_addon(h)
    if log_groups:
        stub_log_groups(h)


def stub_log_groups(
    h: Harness, leftover: dict[str, str | None] | None = None, **overrides: Any
) -> None:
    """Queue the leftover-log-group check's answers: every fixed-name group is absent unless
    ``leftover`` maps its name to the stack that owns it (None: no stack does). ``overrides``:
    settings the test passes with ``-c``."""
    context = json.loads(h.cdk_json.read_text())["context"]
    config = AppConfig.from_context({**context, **overrides})
    logs = h.session.stub("logs")
    cloudformation = h.session.stub("cloudformation")
    for name in fixed_log_group_names(config):
        found = (leftover or {}).get(name, "absent")
        groups = [] if found == "absent" else [{"logGroupName": name}]
        logs.add_response(
            "describe_log_groups", {"logGroups": groups}, {"logGroupNamePrefix": name}
        )
        if found == "absent":
            continue
        if found is None:
            cloudformation.add_client_error(
                "describe_stack_resources",
                "ValidationError",
                f"Stack for {name} does not exist",
                http_status_code=400,
                expected_params={"PhysicalResourceId": name},
            )
        else:
            cloudformation.add_response(
                "describe_stack_resources",
                {
                    "StackResources": [
                        {
                            "StackName": found,
                            "LogicalResourceId": "Logs",
                            "PhysicalResourceId": name,
                            "ResourceType": "AWS::Logs::LogGroup",
                            "Timestamp": datetime(2026, 11, 1, tzinfo=UTC),
                            "ResourceStatus": "CREATE_COMPLETE",
                        }
                    ]
                },
                {"PhysicalResourceId": name},
            )


def lines_of(out: str, check: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if f"  {check}  " in line]


def check_line(harness: Harness, check: str, *args: str, code: int) -> str:
    """``preflight`` with ``args``, which must exit ``code``: the one line of ``check``."""
    result = harness.run("preflight", *args)
    assert result.code == code, result.out
    (line,) = lines_of(result.out, check)
    return line


def all_in_place(harness: Harness) -> Run:
    """``preflight`` against an account where everything the deploy needs is in place (and
    nothing runs): it must exit 0."""
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert result.code == 0, result.out + result.err
    return result


def test_happy_path_is_all_ok_and_recommends_a_pinned_az(harness: Harness) -> None:
    result = all_in_place(harness)
    assert lines_of(result.out, "credentials") == [
        f"OK    credentials   {USER_ARN} (account {ACCOUNT})"
    ]
    assert f"OK    region        {REGION} (from context key 'region')" in result.out
    assert (
        "OK    gpu type      g6.8xlarge: EFA supported (max 1 interfaces), 32 vCPUs, "
        "1 GPU (NVIDIA L4)" in result.out
    )
    assert "us-west-2a, us-west-2c; the deploy picks one" in result.out
    assert "ray-pd-eks settings --set gpuAz=us-west-2a" in result.out
    assert "OK    vCPU quota    'Running On-Demand G and VT instances' is 128 vCPUs" in result.out
    assert "needs 2 x g6.8xlarge = 64 vCPUs" in result.out
    assert "OK    bootstrap     CDK bootstrap version 28" in result.out
    assert (
        "OK    gpu storage   g6.8xlarge: 900 GB of instance-store NVMe (2 x 450 GB ssd); "
        "containerd, kubelet and the model cache go to its RAID0 at /mnt/k8s-disks/0, the "
        "50 GiB root volume holds the OS" in result.out
    )
    assert lines_of(result.out, "capacity reservation") == [
        "OK    capacity reservation  none (On-Demand capacity; the deploy fails after "
        "gpuCapacityWaitMinutes=10 if the AZ has none)"
    ]
    # Without modelS3Uri / hfTokenSecretArn there is nothing to check (and no S3/SM call).
    assert "model in S3" not in result.out and "hugging face token" not in result.out
    # Not an admin principal, private endpoint: warnings, which do not fail the run.
    assert f"WARN  access        {USER_ARN} is not in adminPrincipalArns" in result.out
    assert "WARN  api endpoint  private only: status/smoke/efa-check and kubectl work" in result.out
    assert result.out.rstrip().endswith(
        "0 FAIL, 2 WARN: ready to deploy: npx cdk deploy 'RayPdEks/*' --concurrency 4"
    )
    harness.session.assert_no_pending_responses()


def test_quota_below_the_gpu_nodes_fails_with_the_increase_command(harness: Harness) -> None:
    stub_all(harness, quota=32.0)
    result = harness.run("preflight")
    assert result.code == 1
    (line,) = lines_of(result.out, "vCPU quota")
    assert line.startswith("FAIL  vCPU quota    'Running On-Demand G and VT instances' is 32 vCPUs")
    assert "below 2 x g6.8xlarge = 64 vCPUs" in line
    assert (
        "aws service-quotas request-service-quota-increase --service-code ec2 "
        f"--quota-code L-DB2E81BA --desired-value 64 --region {REGION}" in line
    )
    assert "1 FAIL" in result.out and "not ready to deploy" in result.out


def test_quota_used_by_other_instances_warns_but_not_this_clusters_nodes(
    harness: Harness,
) -> None:
    # 96 quota; this cluster's own 32-vCPU node is not counted; another 48 vCPUs are in use.
    stub_all(
        harness, quota=96.0, running=[instance(32, "ray-llm-multinode"), instance(48, "other")]
    )
    line = check_line(harness, "vCPU quota", code=0)
    assert line.startswith("WARN  vCPU quota")
    assert "other instances already use 48" in line
    assert "--desired-value 112" in line


def test_quota_that_fits_beside_other_instances_says_what_they_use(harness: Harness) -> None:
    stub_all(harness, quota=128.0, running=[instance(48, "other")])
    result = harness.run("preflight")
    assert lines_of(result.out, "vCPU quota") == [
        "OK    vCPU quota    'Running On-Demand G and VT instances' is 128 vCPUs, 48 in use "
        "elsewhere; needs 2 x g6.8xlarge = 64 vCPUs"
    ]
    assert result.code == 0


def test_quota_with_nothing_else_running_says_only_what_it_needs(harness: Harness) -> None:
    stub_all(harness, quota=128.0, running=[])
    result = harness.run("preflight")
    assert lines_of(result.out, "vCPU quota") == [
        "OK    vCPU quota    'Running On-Demand G and VT instances' is 128 vCPUs; "
        "needs 2 x g6.8xlarge = 64 vCPUs"
    ]


def test_quota_unreadable_warns_and_names_the_quota(harness: Harness) -> None:
    stub_all(harness, quota="AccessDeniedException")  # no instances queued: none may be listed
    line = check_line(harness, "vCPU quota", code=0)
    assert line.startswith(
        "WARN  vCPU quota    cannot read 'Running On-Demand G and VT instances' (access denied "
        "for servicequotas:GetServiceQuota"
    ), line
    harness.session.assert_no_pending_responses()


def test_quota_without_live_vcpus_sizes_from_the_offline_table(harness: Harness) -> None:
    # DescribeInstanceTypes without VCpuInfo: the table's 32 vCPUs of a g6.8xlarge count.
    spec = {k: v for k, v in G6.items() if k != "VCpuInfo"}
    stub_all(harness, itype=spec, quota=63.0)
    line = check_line(harness, "vCPU quota", code=1)
    assert "is 63 vCPUs, below 2 x g6.8xlarge = 64 vCPUs" in line


def test_quota_of_a_family_without_a_known_quota_warns() -> None:
    # The table holds only G and P types today; a new family must warn, not pass or crash.
    from types import SimpleNamespace

    from ray_pd_eks.cli.preflight import Preflight

    check = Preflight(aws=None, config=SimpleNamespace(gpu_node_type="trn1.32xlarge"))  # type: ignore[arg-type]
    findings = list(check.quota())
    assert [(f.level, f.check, f.text) for f in findings] == [
        ("WARN", "vCPU quota", "no known on-demand quota for trn1.32xlarge; check it")
    ]


def test_p_family_uses_the_p_instance_quota(tmp_path: Path) -> None:
    harness = Harness(
        write_cdk_json(
            tmp_path, region=REGION, adminPrincipalArns=[ROLE_ARN], gpuNodeType="p4d.24xlarge"
        )
    )
    p4d = {
        "InstanceType": "p4d.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8}]},
        "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 4}},
        "InstanceStorageInfo": {"TotalSizeInGB": 8000},
    }
    stub_all(harness, itype=p4d, quota_code="L-417A185B", quota=96.0)
    line = check_line(harness, "vCPU quota", code=1)
    assert "'Running On-Demand P instances' is 96 vCPUs, below 2 x p4d.24xlarge = 192" in line
    assert "--quota-code L-417A185B --desired-value 192" in line
    harness.session.assert_no_pending_responses()  # the P quota code was the one asked for


def test_configured_az_that_does_not_offer_the_type_fails(tmp_path: Path) -> None:
    harness = Harness(
        write_cdk_json(tmp_path, region=REGION, adminPrincipalArns=[ROLE_ARN], gpuAz="us-west-2d")
    )
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert (
        "FAIL  gpu AZ        gpuAz us-west-2d does not offer g6.8xlarge "
        "(offered in us-west-2a, us-west-2c): use ray-pd-eks settings --set gpuAz=us-west-2a"
        in result.out
    )


def test_configured_az_that_offers_the_type_passes(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run("preflight", "-c", "gpuAz=us-west-2c")
    assert "OK    gpu AZ        gpuAz us-west-2c offers g6.8xlarge" in result.out
    assert result.code == 0


def test_no_az_offering_the_type_fails(harness: Harness) -> None:
    stub_all(harness, zones=(), running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert f"FAIL  gpu AZ        no Availability Zone of {REGION} offers g6.8xlarge" in result.out


def test_type_without_efa_fails(harness: Harness) -> None:
    no_efa = {**G6, "NetworkInfo": {"EfaSupported": False}}
    stub_all(harness, itype=no_efa, running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert "FAIL  gpu type      g6.8xlarge does not support EFA" in result.out


def test_not_bootstrapped_fails_with_the_bootstrap_command(harness: Harness) -> None:
    stub_all(harness, bootstrap=None, running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert (
        f"FAIL  bootstrap     not CDK-bootstrapped: run `npx cdk bootstrap "
        f"aws://{ACCOUNT}/{REGION}`" in result.out
    )


def test_ssm_denied_falls_back_to_the_cdktoolkit_stack(harness: Harness) -> None:
    stub_all(harness, running=[], bootstrap="denied")
    harness.session.stub("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "CDKToolkit",
                    "CreationTime": "2026-01-01T00:00:00Z",
                    "StackStatus": "UPDATE_COMPLETE",
                }
            ]
        },
        {"StackName": "CDKToolkit"},
    )
    result = harness.run("preflight")
    assert "OK    bootstrap     CDKToolkit stack is UPDATE_COMPLETE" in result.out
    assert result.code == 0


def test_ssm_denied_and_no_cdktoolkit_stack_fails_with_the_bootstrap_command(
    harness: Harness,
) -> None:
    stub_all(harness, running=[], bootstrap="denied")
    harness.session.stub("cloudformation").add_client_error(
        "describe_stacks",
        "ValidationError",
        "Stack with id CDKToolkit does not exist",
        http_status_code=400,
        expected_params={"StackName": "CDKToolkit"},
    )
    result = harness.run("preflight")
    assert lines_of(result.out, "bootstrap") == [
        f"FAIL  bootstrap     no CDKToolkit stack: run `npx cdk bootstrap aws://{ACCOUNT}/{REGION}`"
    ]
    assert result.code == 1


def test_admin_principal_from_an_assumed_role_is_recognised(harness: Harness) -> None:
    stub_all(harness, arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice", running=[])
    stub_get_role(harness.session, "Admin")
    result = harness.run(
        "preflight",
        "-c",
        f"adminPrincipalArns={ROLE_ARN}",
        "-c",
        "endpointPublicCidrs=203.0.113.7/32",
    )
    assert f"OK    access        {ROLE_ARN} is in adminPrincipalArns" in result.out
    assert "OK    api endpoint  public for 203.0.113.7/32, and private" in result.out
    assert "0 FAIL, 0 WARN" in result.out


def test_an_identity_center_admin_with_the_full_arn_is_recognised(harness: Harness) -> None:
    """The session ARN has no path; IAM's GetRole gives it, and the whole ARN matches."""
    stub_all(harness, arn=SSO_SESSION_ARN, running=[])
    stub_get_role(harness.session, SSO_ROLE, SSO_PATH)
    result = harness.run("preflight", "-c", f"adminPrincipalArns={SSO_ROLE_ARN}")
    assert lines_of(result.out, "access") == [
        f"OK    access        {SSO_ROLE_ARN} is in adminPrincipalArns"
    ]


def test_the_same_role_name_under_another_path_fails(harness: Harness) -> None:
    """`role/Admin` listed, the caller is `role/team/Admin`: EKS would refuse the entry."""
    stub_all(harness, arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice", running=[])
    stub_get_role(harness.session, "Admin", "/team/")
    result = harness.run("preflight", "-c", f"adminPrincipalArns={ROLE_ARN}")
    assert lines_of(result.out, "access") == [
        f"FAIL  access        adminPrincipalArns has {ROLE_ARN}, but your role is "
        f"arn:aws:iam::{ACCOUNT}:role/team/Admin: that path names no role, and EKS refuses its "
        "access entry (the Cluster stack fails); `ray-pd-eks settings --remove "
        f"adminPrincipalArns={ROLE_ARN} --add-admin-me`"
    ]
    assert result.code == 1


def test_a_denied_get_role_compares_by_name_and_says_the_path_is_unchecked(
    harness: Harness,
) -> None:
    stub_all(harness, arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice", running=[])
    harness.session.stub("iam").add_client_error("get_role", "AccessDenied", "no", 403)
    result = harness.run("preflight", "-c", f"adminPrincipalArns={ROLE_ARN}")
    # The pathless ARN is the listed one: it is the best guess, and it says so.
    (line,) = lines_of(result.out, "access")
    assert line.startswith(f"OK    access        {ROLE_ARN} is in adminPrincipalArns")


def test_no_admin_at_all_is_a_failure_saying_nobody_can_administer(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert lines_of(result.out, "access") == [
        "FAIL  access        adminPrincipalArns is empty: NOBODY can administer this cluster "
        "(no access entry: status/smoke/efa-check and kubectl are denied, for you too); add "
        "yourself with `ray-pd-eks settings --add-admin-me`; the deploy is refused until then"
    ]
    assert result.code == 1


def test_no_admin_by_choice_is_a_warning(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION))
    stub_all(harness, running=[])
    result = harness.run("preflight", "-c", "allowNoAdmins=true")
    (line,) = lines_of(result.out, "access")
    assert line.startswith("WARN  access        adminPrincipalArns is empty: NOBODY")
    assert line.endswith("`ray-pd-eks settings --add-admin-me`")


def test_account_mismatch_fails(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run("preflight", "-c", "account=999999999999")
    assert result.code == 1
    assert (
        "FAIL  account       context account 999999999999 differs from your credentials' "
        f"account {ACCOUNT}" in result.out
    )


def test_no_credentials_is_one_line_exit_3(tmp_path: Path) -> None:
    from tests.cli_fixtures import StubbedSession

    harness = Harness(
        write_cdk_json(tmp_path, region=REGION, adminPrincipalArns=[ROLE_ARN]),
        StubbedSession(credentials=False),
    )
    result = harness.run("preflight", "--profile", "dev")
    assert result.code == 3
    assert result.err == (
        "error: no AWS credentials found in profile 'dev': run `aws configure` or "
        "`aws sso login`, or pass --profile NAME\n"
    )
    assert harness.profiles == ["dev"]


def test_expired_credentials_are_exit_3_without_traceback(harness: Harness) -> None:
    harness.session.stub("sts").add_client_error(
        "get_caller_identity", "ExpiredToken", "The security token included has expired", 403
    )
    result = harness.run("preflight")
    assert result.code == 3
    assert result.err.startswith(
        "error: AWS rejected the credentials (ExpiredToken) for sts:GetCallerIdentity"
    )
    assert "Traceback" not in result.err


def test_debug_prints_the_traceback(harness: Harness) -> None:
    harness.session.stub("sts").add_client_error("get_caller_identity", "ExpiredToken", "x", 403)
    result = harness.run("--debug", "preflight")
    assert "Traceback" in result.err
    assert result.err.rstrip().splitlines()[-1].startswith("error: AWS rejected the credentials")


def test_denied_instance_type_lookup_is_access_error(harness: Harness) -> None:
    harness.session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AIDA", "Account": ACCOUNT, "Arn": USER_ARN}
    )
    harness.session.stub("ec2").add_client_error(
        "describe_instance_types", "UnauthorizedOperation", "not allowed", 403
    )
    result = harness.run("preflight")
    assert result.code == 3
    assert "error: access denied for ec2:DescribeInstanceTypes: not allowed" in result.err


def test_region_flag_wins_over_context(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run("preflight", "--region", "us-east-2")
    assert "OK    region        us-east-2 (from --region)" in result.out


@pytest.mark.parametrize(
    ("region", "verdict"), [("ap-southeast-5", "OK"), ("us-iso-east-1", "FAIL")]
)
def test_region_needs_an_eks_image_registry(harness: Harness, region: str, verdict: str) -> None:
    """An environment-agnostic deploy's region is known only here: the last region added to
    the table passes, a well-formed one without a registry fails."""
    stub_all(harness, running=[])
    result = harness.run("preflight", "--region", region)
    (line,) = lines_of(result.out, "region")
    assert line.startswith(f"{verdict:<6}region        {region} (from --region)"), line
    assert result.code == (1 if verdict == "FAIL" else 0)
    if verdict == "FAIL":
        assert "no Amazon EKS image registry known to this app" in line
        assert "https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html" in line


@pytest.mark.parametrize(
    ("region", "dlc_image", "verdict"),
    [
        ("af-south-1", "", "OK"),  # its own DLC account (626614931356)
        ("us-gov-west-1", "", "FAIL"),  # EKS has a registry there, the DLC table none
        ("us-gov-west-1", "111122223333.dkr.ecr.us-gov-west-1.amazonaws.com/ray:v1", "OK"),
    ],
)
def test_region_needs_a_dlc_registry_unless_dlc_image_is_set(
    tmp_path: Path, region: str, dlc_image: str, verdict: str
) -> None:
    harness = Harness(write_cdk_json(tmp_path, dlcImage=dlc_image))
    stub_all(harness, running=[])
    result = harness.run("preflight", "--region", region)
    assert lines_of(result.out, "region")[0].startswith(f"OK    region        {region}")
    image_lines = lines_of(result.out, "ray image")
    if verdict == "FAIL":
        (line,) = image_lines
        assert line.startswith(
            f"FAIL  ray image     no AWS Deep Learning Containers registry in {region}"
        )
        assert (
            "set `ray-pd-eks settings --set dlcImage=...`" in line
            and "region_availability.md" in line
        )
        assert result.code == 1
    else:
        assert image_lines == []


def test_a_leftover_fixed_name_log_group_fails_with_the_command_that_clears_it(
    tmp_path: Path,
) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION, retainLogs=True))
    control_plane = "/aws/eks/ray-llm-multinode/cluster"
    application = "/aws/containerinsights/ray-llm-multinode/application"
    stub_all(harness, running=[], log_groups=False)
    # The control-plane group is left over (no stack owns it); the application group belongs
    # to the deployed workload stack (an update, not a clash).
    stub_log_groups(harness, {control_plane: None, application: "RayPdEks-Workload"})
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "log groups")
    assert line.startswith(f"FAIL  log groups    {control_plane} exists but belongs to no stack")
    assert line.endswith(
        f"aws logs delete-log-group --log-group-name {control_plane} --region {REGION}"
    )
    assert application not in result.out
    assert result.code == 1
    harness.session.assert_no_pending_responses()


def test_no_leftover_log_group_is_ok(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert lines_of(result.out, "log groups") == [
        "OK    log groups    no leftover log group blocks the deploy"
    ]
    harness.session.assert_no_pending_responses()


def test_no_region_anywhere_is_a_usage_error(tmp_path: Path) -> None:
    from tests.cli_fixtures import StubbedSession

    harness = Harness(write_cdk_json(tmp_path), StubbedSession(region=None))
    result = harness.run("preflight")
    assert result.code == 2
    assert result.err == (
        "error: no AWS region: pass --region, set ray-pd-eks settings --set region=..., or "
        "export AWS_REGION\n"
    )


# gpu storage -------------------------------------------------------------------------------


def test_live_nvme_size_differing_from_the_table_warns_with_both_sizes(harness: Harness) -> None:
    bigger = {**G6, "InstanceStorageInfo": {"TotalSizeInGB": 1000}}
    stub_all(harness, itype=bigger, running=[])
    line = check_line(harness, "gpu storage", code=0)
    assert line.startswith(
        "WARN  gpu storage   EC2 reports 1000 GB of instance store for g6.8xlarge"
    )
    assert "the offline table (ray_pd_eks/instance_types.py) 900 GB" in line
    assert "still go to its RAID0" in line


def test_auto_storage_without_live_nvme_fails_pointing_at_the_root_volume(
    harness: Harness,
) -> None:
    no_store = {k: v for k, v in G6.items() if k != "InstanceStorageInfo"}
    stub_all(harness, itype=no_store, running=[])
    line = check_line(harness, "gpu storage", code=1)
    assert line.startswith("FAIL  gpu storage   EC2 reports 0 GB of instance store for g6.8xlarge")
    assert "900 GB" in line
    assert "50 GiB root volume: set ray-pd-eks settings --set gpuLocalStorage=none" in line


def test_raid0_without_live_instance_store_fails(harness: Harness) -> None:
    no_store = {k: v for k, v in G6.items() if k != "InstanceStorageInfo"}
    stub_all(harness, itype=no_store, running=[])
    line = check_line(harness, "gpu storage", "-c", "gpuLocalStorage=raid0", code=1)
    assert line == (
        "FAIL  gpu storage   gpuLocalStorage=raid0 but EC2 reports no instance store for "
        f"g6.8xlarge in {REGION} (the offline table says 900 GB): use ray-pd-eks settings --set "
        f"gpuLocalStorage=none "
        "(the root volume then holds images and caches) or a type with NVMe"
    )


def test_raid0_with_the_tables_nvme_passes(harness: Harness) -> None:
    stub_all(harness, running=[])
    line = check_line(harness, "gpu storage", "-c", "gpuLocalStorage=raid0", code=0)
    assert line.startswith("OK    gpu storage   g6.8xlarge: 900 GB of instance-store NVMe")


def test_no_local_storage_names_the_root_volume_settings(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run(
        "preflight", "-c", "gpuLocalStorage=none", "-c", "gpuRootVolumeThroughput=800"
    )
    (line,) = lines_of(result.out, "gpu storage")
    assert line == (
        "OK    gpu storage   gpuLocalStorage=none: the 200 GiB gp3 root volume holds images and "
        "caches (gpuRootVolumeIops=16000, gpuRootVolumeThroughput=800 MiB/s); its 900 GB of "
        "instance-store NVMe (2 x 450 GB ssd) stays unused"
    )
    assert result.code == 0


def test_storage_is_reported_even_when_the_type_lacks_efa(harness: Harness) -> None:
    no_efa = {**G6, "NetworkInfo": {"EfaSupported": False}}
    stub_all(harness, itype=no_efa, running=[])
    result = harness.run("preflight")
    assert "FAIL  gpu type" in result.out
    assert "OK    gpu storage   g6.8xlarge: 900 GB" in result.out


# capacity reservation ----------------------------------------------------------------------


def reservation(**changes: Any) -> dict[str, Any]:
    """An active, targeted reservation that fits the default settings (2 x g6.8xlarge), 2 of
    its 4 instances free."""
    return capacity_reservation(
        **{"TotalInstanceCount": 4, "InstanceMatchCriteria": "targeted", **changes}
    )


def reserved_harness(tmp_path: Path, **context: Any) -> Harness:
    return Harness(
        write_cdk_json(
            tmp_path,
            region=REGION,
            adminPrincipalArns=[ROLE_ARN],
            gpuCapacityReservationId=RESERVATION_ID,
            **context,
        )
    )


def test_fitting_reservation_passes_and_sets_the_gpu_az(tmp_path: Path) -> None:
    harness = reserved_harness(tmp_path)
    stub_all(harness, reservation=reservation(), running=[])
    result = harness.run("preflight")
    assert result.code == 0, result.out
    assert lines_of(result.out, "capacity reservation") == [
        f"OK    capacity reservation  {RESERVATION_ID}: g6.8xlarge in us-west-2c, 2 of 4 "
        "instances free for gpuNodeCount=2; the GPU AZ will be us-west-2c, the reservation's"
    ]
    # The AZ check no longer recommends pinning an AZ the reservation would override.
    (az,) = lines_of(result.out, "gpu AZ")
    assert az.endswith("the deploy uses the capacity reservation's AZ")
    harness.session.assert_no_pending_responses()


def test_reservation_in_the_configured_placement_group_passes(tmp_path: Path) -> None:
    harness = reserved_harness(tmp_path, gpuPlacementGroupName="gpu-pg")
    stub_all(harness, reservation=reservation(PlacementGroupArn=PG_ARN + "gpu-pg"), running=[])
    line = check_line(harness, "capacity reservation", code=0)
    assert line.startswith("OK    capacity reservation")
    assert "in us-west-2c in placement group gpu-pg, 2 of 4 instances free" in line


@pytest.mark.parametrize(
    ("changes", "context", "expected"),
    [
        (
            {"State": "expired"},
            {},
            f"{RES} is in state 'expired', not 'active'",
        ),
        (
            {"InstanceType": "g6.12xlarge"},
            {},
            f"{RES} reserves g6.12xlarge, but gpuNodeType=g6.8xlarge; "
            "set `ray-pd-eks settings --set gpuNodeType=g6.12xlarge`",
        ),
        (
            {"InstancePlatform": "Windows"},
            {},
            f"{RES} is for platform 'Windows', but the EKS AL2023 GPU nodes are 'Linux/UNIX'",
        ),
        (
            {"Tenancy": "dedicated"},
            {},
            f"{RES} has tenancy 'dedicated'",
        ),
        (
            {},
            {"gpuAz": "us-west-2a"},
            f"gpuAz=us-west-2a but {RES} is in us-west-2c; set "
            "`ray-pd-eks settings --set gpuAz=us-west-2c`",
        ),
        (
            {"AvailableInstanceCount": 1},
            {},
            f"{RES} has 1 of 4 instances free, but gpuNodeCount=2 nodes need 2",
        ),
        (
            {"PlacementGroupArn": PG_ARN + "reserved-pg"},
            {},
            f"{RES} was created in cluster placement group reserved-pg, but "
            "gpuPlacementGroupName is empty (the stack creates its own placement group); only "
            "instances launched into that group can use it: "
            "set `ray-pd-eks settings --set gpuPlacementGroupName=reserved-pg`",
        ),
        (
            {"PlacementGroupArn": PG_ARN + "reserved-pg"},
            {"gpuPlacementGroupName": "other-pg"},
            f"{RES} was created in cluster placement group reserved-pg, but "
            "gpuPlacementGroupName=other-pg; only instances launched into that group can use "
            "it: set `ray-pd-eks settings --set gpuPlacementGroupName=reserved-pg`",
        ),
        (
            {},
            {"gpuPlacementGroupName": "gpu-pg"},
            f"gpuPlacementGroupName=gpu-pg but {RES} is not in a placement group",
        ),
    ],
)
def test_reservation_the_nodes_cannot_use_fails(
    tmp_path: Path, changes: dict[str, Any], context: dict[str, Any], expected: str
) -> None:
    harness = reserved_harness(tmp_path, **context)
    stub_all(harness, reservation=reservation(**changes), running=[])
    result = harness.run("preflight")
    assert result.code == 1
    (line,) = lines_of(result.out, "capacity reservation")
    assert line.startswith(f"FAIL  capacity reservation  {expected}")
    # The other checks still ran.
    assert "OK    vCPU quota" in result.out and "OK    bootstrap" in result.out


def test_each_reservation_problem_is_its_own_line(tmp_path: Path) -> None:
    harness = reserved_harness(tmp_path)
    stub_all(
        harness,
        reservation=reservation(State="cancelled", AvailableInstanceCount=0),
        running=[],
    )
    result = harness.run("preflight")
    lines = lines_of(result.out, "capacity reservation")
    assert len(lines) == 2
    assert "is in state 'cancelled'" in lines[0] and "has 0 of 4 instances free" in lines[1]
    assert "2 FAIL" in result.out


def test_unknown_reservation_fails(tmp_path: Path) -> None:
    harness = reserved_harness(tmp_path)
    stub_all(harness, reservation="InvalidCapacityReservationId.NotFound", running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert (
        f"FAIL  capacity reservation  {RESERVATION_ID} not found in this account and {REGION}: "
        "check the id and the region, or leave gpuCapacityReservationId empty" in result.out
    )


def test_denied_reservation_lookup_warns(tmp_path: Path) -> None:
    harness = reserved_harness(tmp_path)
    stub_all(harness, reservation="UnauthorizedOperation", running=[])
    line = check_line(harness, "capacity reservation", code=0)
    assert line.startswith(f"WARN  capacity reservation  cannot check {RESERVATION_ID} (")
    assert "ec2:DescribeCapacityReservations" in line


# model in S3 -------------------------------------------------------------------------------

MODEL_URI = "s3://models-bucket/qwen/Qwen3.5-9B"
PREFIX = "qwen/Qwen3.5-9B/"


def s3_object(name: str, size: int) -> dict[str, Any]:
    return {"Key": PREFIX + name, "Size": size}


MODEL_FILES = [
    s3_object("config.json", 1_000),
    s3_object("model-00001-of-00002.safetensors", 5 * GIB),
    s3_object("model-00002-of-00002.safetensors", 4 * GIB + GIB // 2),
    s3_object("tokenizer.json", 10_000),
]


@functools.cache
def _s3_botocore() -> Any:
    """A botocore session of its own for S3: boto3 sessions sharing the fixtures' botocore
    session each register boto3's S3 class injection, which then fails on the second one."""
    return botocore.session.get_session()


def s3_stubber(h: Harness) -> Stubber:
    """The S3 Stubber of the harness's session (a plain botocore client: no boto3 helpers)."""
    if "s3" not in h.session.stubbers:
        client = _s3_botocore().create_client(
            "s3",
            region_name=REGION,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret/for/tests/only",
        )
        stubber = Stubber(client)
        stubber.activate()
        h.session.clients["s3"] = client
        h.session.stubbers["s3"] = stubber
    return h.session.stubbers["s3"]


def stub_s3(
    h: Harness,
    location: str | None = REGION,
    objects: list[dict[str, Any]] | None = None,
    *,
    location_error: str = "",
    list_error: str = "",
) -> None:
    s3 = s3_stubber(h)
    bucket = {"Bucket": "models-bucket"}
    if location_error:
        s3.add_client_error("get_bucket_location", location_error, http_status_code=403)
        return
    s3.add_response(
        "get_bucket_location", {"LocationConstraint": location} if location else {}, bucket
    )
    if location != REGION:  # a region mismatch ends the check before listing
        return
    params = {**bucket, "Prefix": PREFIX, "MaxKeys": 1000}
    if list_error:
        s3.add_client_error("list_objects_v2", list_error, http_status_code=403)
    else:
        contents = MODEL_FILES if objects is None else objects
        s3.add_response(
            "list_objects_v2", {"Contents": contents, "KeyCount": len(contents)}, params
        )


def test_staged_model_with_config_and_weights_passes(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_s3(harness)
    result = harness.run("preflight", "-c", f"modelS3Uri={MODEL_URI}")
    assert lines_of(result.out, "model in S3") == [
        f"OK    model in S3   {MODEL_URI}/: 4 objects, 9.5 GiB (config.json, 2 *.safetensors), "
        f"bucket in {REGION}"
    ]
    assert result.code == 0
    harness.session.assert_no_pending_responses()


def test_trailing_slash_in_the_uri_lists_the_same_prefix(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_s3(harness)
    result = harness.run("preflight", "-c", f"modelS3Uri={MODEL_URI}/")
    assert "OK    model in S3" in result.out
    harness.session.assert_no_pending_responses()


@pytest.mark.parametrize(("location", "region"), [(None, "us-east-1"), ("EU", "eu-west-1")])
def test_bucket_in_another_region_fails_naming_both(
    harness: Harness, location: str | None, region: str
) -> None:
    stub_all(harness, running=[])
    stub_s3(harness, location=location)
    line = check_line(harness, "model in S3", "-c", f"modelS3Uri={MODEL_URI}", code=1)
    assert line.startswith(
        f"FAIL  model in S3   bucket models-bucket is in {region}, the deployment in {REGION}: "
        "staging must be same-region"
    )
    harness.session.assert_no_pending_responses()  # no listing after the region failed


def test_prefix_without_config_json_fails_saying_what_is_there(harness: Harness) -> None:
    stub_all(harness, running=[])
    nested = [s3_object("Qwen3.5-9B/config.json", 1_000), s3_object("Qwen3.5-9B/m.safetensors", 9)]
    stub_s3(harness, objects=nested)
    line = check_line(harness, "model in S3", "-c", f"modelS3Uri={MODEL_URI}", code=1)
    assert line.startswith(
        f"FAIL  model in S3   {MODEL_URI}/ has no config.json and no *.safetensors directly "
        "under it (found 2 objects: Qwen3.5-9B/config.json, Qwen3.5-9B/m.safetensors)"
    )


def test_prefix_without_safetensors_fails(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_s3(harness, objects=[s3_object("config.json", 1), s3_object("pytorch_model.bin", 9)])
    line = check_line(harness, "model in S3", "-c", f"modelS3Uri={MODEL_URI}", code=1)
    assert "has no *.safetensors directly under it (found 2 objects: config.json, " in line


def test_empty_prefix_fails(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_s3(harness, objects=[])
    result = harness.run("preflight", "-c", f"modelS3Uri={MODEL_URI}")
    (line,) = lines_of(result.out, "model in S3")
    assert "has no config.json and no *.safetensors directly under it (it is empty)" in line


def test_missing_bucket_fails(harness: Harness) -> None:
    stub_all(harness, running=[])
    s3_stubber(harness).add_client_error("get_bucket_location", "NoSuchBucket", "", 404)
    result = harness.run("preflight", "-c", f"modelS3Uri={MODEL_URI}")
    assert result.code == 1
    assert "FAIL  model in S3   bucket models-bucket does not exist" in result.out


@pytest.mark.parametrize(
    ("where", "action"),
    [("location", "s3:GetBucketLocation"), ("list", "s3:ListObjectsV2")],
)
def test_denied_s3_access_warns(harness: Harness, where: str, action: str) -> None:
    stub_all(harness, running=[])
    if where == "location":
        stub_s3(harness, location_error="AccessDenied")
    else:
        stub_s3(harness, list_error="AccessDenied")
    line = check_line(harness, "model in S3", "-c", f"modelS3Uri={MODEL_URI}", code=0)
    assert line.startswith(f"WARN  model in S3   cannot verify {MODEL_URI}/ (access denied")
    assert action in line
    assert "the deploy's role is read-only on that prefix anyway" in line


# hugging face token ------------------------------------------------------------------------


def stub_secret(h: Harness, **fields: Any) -> None:
    answer = {
        "ARN": SECRET_ARN,
        "Name": "hf-token",
        "VersionIdsToStages": {"EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE": ["AWSCURRENT"]},
        "Tags": [{"Key": "ray-pd-eks:model-access", "Value": "true"}],
        **fields,
    }
    h.session.stub("secretsmanager").add_response(
        "describe_secret",
        {k: v for k, v in answer.items() if v is not None},
        {"SecretId": SECRET_ARN},
    )


def run_with_secret(h: Harness, *argv: str) -> Any:
    return h.run("preflight", "-c", f"hfTokenSecretArn={SECRET_ARN}", *argv)


def test_token_secret_with_the_managed_key_passes_without_reading_it(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_secret(harness)
    result = run_with_secret(harness)
    assert lines_of(result.out, "hugging face token") == [
        "OK    hugging face token  hf-token exists, encrypted with the AWS managed key; the "
        "pods read it, preflight only described it"
    ]
    assert result.code == 0
    harness.session.assert_no_pending_responses()  # an unstubbed GetSecretValue would raise


@pytest.mark.parametrize("tags", [None, [], [{"Key": "ray-pd-eks:model-access", "Value": "no"}]])
def test_token_secret_without_the_model_access_tag_fails_with_the_tag_command(
    harness: Harness, tags: Any
) -> None:
    stub_all(harness, running=[])
    stub_secret(harness, Tags=tags)
    result = run_with_secret(harness)
    (line,) = lines_of(result.out, "hugging face token")
    assert line.startswith(
        "FAIL  hugging face token  hf-token lacks the tag ray-pd-eks:model-access=true"
    ), line
    assert (
        f"`aws secretsmanager tag-resource --secret-id {SECRET_ARN} "
        "--tags Key=ray-pd-eks:model-access,Value=true`" in line
    )
    assert result.code != 0


def test_preflight_never_asks_for_a_secret_value() -> None:
    from ray_pd_eks.cli import preflight

    modules = sorted(Path(preflight.__file__).parent.glob("*.py"))
    assert len(modules) > 1
    assert [m.name for m in modules if "get_secret_value" in m.read_text()] == []


def test_explicit_managed_key_alias_passes(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_secret(harness, KmsKeyId="alias/aws/secretsmanager")
    result = run_with_secret(harness)
    assert "OK    hugging face token  hf-token exists" in result.out


def test_customer_managed_key_warns_about_decrypt(harness: Harness) -> None:
    key = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    stub_all(harness, running=[])
    stub_secret(harness, KmsKeyId=key)
    result = run_with_secret(harness)
    (line,) = lines_of(result.out, "hugging face token")
    assert line.startswith(
        f"WARN  hugging face token  hf-token is encrypted with the customer managed KMS key {key}: "
        "the pods' role gets no kms:Decrypt on it"
    )
    assert result.code == 0


def test_secret_scheduled_for_deletion_fails(harness: Harness) -> None:
    import datetime

    stub_all(harness, running=[])
    stub_secret(harness, DeletedDate=datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC))
    result = run_with_secret(harness)
    assert result.code == 1
    (line,) = lines_of(result.out, "hugging face token")
    assert line.startswith(
        "FAIL  hugging face token  hf-token is scheduled for deletion (2026-05-01): restore it "
        f"with `aws secretsmanager restore-secret --secret-id {SECRET_ARN}`"
    )


def test_missing_secret_fails(harness: Harness) -> None:
    stub_all(harness, running=[])
    harness.session.stub("secretsmanager").add_client_error(
        "describe_secret", "ResourceNotFoundException", "not found", 400
    )
    result = run_with_secret(harness)
    assert result.code == 1
    assert f"FAIL  hugging face token  {SECRET_ARN} not found in {REGION}" in result.out


def test_secret_without_a_current_value_warns(harness: Harness) -> None:
    stub_all(harness, running=[])
    stub_secret(harness, VersionIdsToStages=None)
    result = run_with_secret(harness)
    (line,) = lines_of(result.out, "hugging face token")
    assert line.startswith("WARN  hugging face token  hf-token lists no current value (AWSCURRENT)")


def test_denied_secret_lookup_warns(harness: Harness) -> None:
    stub_all(harness, running=[])
    harness.session.stub("secretsmanager").add_client_error(
        "describe_secret", "AccessDeniedException", "no", 400
    )
    result = run_with_secret(harness)
    (line,) = lines_of(result.out, "hugging face token")
    assert line.startswith(f"WARN  hugging face token  cannot check {SECRET_ARN} (access denied")
    assert result.code == 0


def test_secret_in_another_region_fails_without_a_call(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = run_with_secret(harness, "--region", "us-east-2")
    assert result.code == 1
    assert (
        f"FAIL  hugging face token  the secret is in {REGION}, the deployment in us-east-2: use "
        "a secret in us-east-2" in result.out
    )
    assert "secretsmanager" not in harness.session.stubbers


def test_every_new_check_runs_even_when_others_fail(tmp_path: Path) -> None:
    """A failing reservation and a failing S3 prefix: each still reports, exit 1."""
    harness = reserved_harness(tmp_path, modelS3Uri=MODEL_URI)
    stub_all(harness, reservation=reservation(State="expired"), running=[])
    stub_s3(harness, objects=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert "FAIL  capacity reservation" in result.out
    assert "FAIL  model in S3" in result.out
    assert "OK    gpu storage" in result.out
    assert "2 FAIL" in result.out
    harness.session.assert_no_pending_responses()


# edges: each numeric decision at its limit and one past it ----------------------------------


def _cpus(vcpus: int, cluster: str = "other") -> dict[str, Any]:
    """A running instance of another cluster using exactly ``vcpus`` (odd counts too)."""
    return {**instance(2, cluster), "CpuOptions": {"CoreCount": vcpus, "ThreadsPerCore": 1}}


@pytest.mark.parametrize(
    ("quota", "in_use", "verdict"),
    [
        (64.0, 0, "OK"),  # exactly the 2 x 32 vCPUs the GPU nodes need
        (63.0, None, "FAIL"),  # one vCPU short
        (128.0, 64, "OK"),  # what others use leaves exactly enough
        (128.0, 65, "WARN"),  # ...and one vCPU more does not
    ],
    ids=["quota-equal", "quota-one-short", "free-equal", "free-one-short"],
)
def test_vcpu_quota_edges(harness: Harness, quota: float, in_use: int | None, verdict: str) -> None:
    running = None if in_use is None else ([_cpus(in_use)] if in_use else [])
    stub_all(harness, quota=quota, running=running)
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "vCPU quota")
    assert line.startswith(f"{verdict:<6}vCPU quota"), line
    assert result.code == (1 if verdict == "FAIL" else 0)
    harness.session.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("quota", "in_use", "max_count", "verdict"),
    [
        (128.0, 0, 2, "OK"),  # 2 nodes + the update's 2 extra, x 32 vCPUs
        (127.0, 0, 2, "WARN"),  # one vCPU short of the surge (the nodes alone fit)
        (192.0, 64, 2, "OK"),  # what others use leaves exactly the 128
        (192.0, 65, 2, "WARN"),
        (192.0, 0, 4, "OK"),  # gpuNodeMaxCount=4: 4 + 2 nodes
        (191.0, 0, 4, "WARN"),
    ],
    ids=["equal", "one-short", "free-equal", "free-one-short", "max4-equal", "max4-one-short"],
)
def test_node_update_headroom_edge(
    tmp_path: Path, quota: float, in_use: int, max_count: int, verdict: str
) -> None:
    """Without a capacity reservation an EKS node update launches 2 extra GPU nodes (twice
    the group's one AZ) before it drains the old ones: a WARN when the quota lacks room."""
    harness = Harness(
        write_cdk_json(
            tmp_path, region=REGION, adminPrincipalArns=[ROLE_ARN], gpuNodeMaxCount=max_count
        )
    )
    stub_all(harness, quota=quota, running=[_cpus(in_use)] if in_use else [])
    result = harness.run("preflight")
    assert lines_of(result.out, "vCPU quota")[0].startswith("OK    vCPU quota")
    (line,) = lines_of(result.out, "node updates")
    assert line.startswith(f"{verdict:<6}node updates"), line
    assert result.code == 0  # a WARN does not fail preflight
    total = (max_count + 2) * 32
    if verdict == "OK":
        assert f"{max_count} + 2 x g6.8xlarge = {total} vCPUs" in line
    else:
        free = int(quota) - in_use
        assert line == (
            f"WARN  node updates  'Running On-Demand G and VT instances' leaves {free} vCPUs "
            "for the GPU nodes: a node update (new AMI, launch template or Kubernetes version) "
            "launches 2 more g6.8xlarge before draining the old ones, "
            f"{max_count} + 2 x g6.8xlarge = {total} vCPUs, so it would fail with "
            "NodeCreationFailure; request more with `aws service-quotas "
            "request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
            f"--desired-value {total + in_use} --region {REGION}`, or use a capacity "
            "reservation (ray-pd-eks settings --set gpuCapacityReservationId=..., updates then "
            "replace nodes one at "
            "a time)"
        )


def test_node_update_headroom_is_not_needed_with_a_capacity_reservation(tmp_path: Path) -> None:
    """The group updates with MINIMAL (terminate first): the group's own vCPUs suffice."""
    harness = reserved_harness(tmp_path)
    stub_all(harness, reservation=reservation(), quota=64.0, running=[])
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "node updates")
    assert line.startswith("OK    node updates  gpuCapacityReservationId set"), line


def test_node_update_headroom_is_not_judged_when_the_nodes_do_not_fit(harness: Harness) -> None:
    stub_all(harness, quota=63.0, running=None)
    result = harness.run("preflight")
    assert lines_of(result.out, "node updates") == []
    assert result.code == 1


@pytest.mark.parametrize(("version", "verdict"), [("6", "OK"), ("5", "FAIL")])
def test_bootstrap_version_edge(harness: Harness, version: str, verdict: str) -> None:
    stub_all(harness, bootstrap=version, running=[])
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "bootstrap")
    assert line.startswith(f"{verdict:<6}bootstrap"), line
    assert result.code == (1 if verdict == "FAIL" else 0)


@pytest.mark.parametrize(("free", "verdict"), [(2, "OK"), (1, "FAIL")])
def test_reservation_free_instances_edge(tmp_path: Path, free: int, verdict: str) -> None:
    harness = reserved_harness(tmp_path)
    stub_all(harness, reservation=reservation(AvailableInstanceCount=free), running=[])
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "capacity reservation")
    assert line.startswith(f"{verdict:<6}capacity reservation"), line
    if verdict == "FAIL":
        assert f"has {free} of 4 instances free, but gpuNodeCount=2 nodes need 2" in line


@pytest.mark.parametrize(
    ("free", "verdicts"),
    [(4, ["OK"]), (3, ["OK", "WARN"]), (2, ["OK", "WARN"]), (1, ["FAIL"])],
)
def test_reservation_free_instances_edge_with_autoscaling(
    tmp_path: Path, free: int, verdicts: list[str]
) -> None:
    """gpuNodeCount=2, gpuNodeMaxCount=4: fewer than 2 free fails the deploy; 2 or 3 free let
    it deploy but the autoscaler's scale-ups past them cannot launch (a WARN); 4 is enough."""
    harness = reserved_harness(tmp_path, gpuNodeMaxCount=4)
    stub_all(
        harness,
        reservation=reservation(AvailableInstanceCount=free, TotalInstanceCount=5),
        running=[],
    )
    result = harness.run("preflight")
    lines = lines_of(result.out, "capacity reservation")
    assert [line.split()[0] for line in lines] == verdicts, lines
    assert result.code == (1 if "FAIL" in verdicts else 0)
    if "WARN" in verdicts:
        assert lines[1] == (
            f"WARN  capacity reservation  {RESERVATION_ID} has {free} instances free but "
            "gpuNodeMaxCount=4: the launch template targets only this reservation, so the "
            f"Cluster Autoscaler's scale-ups beyond {free} nodes fail to launch and decode "
            "cannot grow past them; enlarge it (`aws ec2 modify-capacity-reservation "
            f"--capacity-reservation-id {RESERVATION_ID} --instance-count {5 + 4 - free}`) or "
            f"lower ray-pd-eks settings --set gpuNodeMaxCount={free} (and decodeMaxReplicas to fit)"
        )
    if "FAIL" in verdicts:
        assert f"has {free} of 5 instances free, but gpuNodeCount=2 nodes need 2" in lines[0]


@pytest.mark.parametrize(
    ("free", "held", "verdicts"),
    [(0, 2, ["OK"]), (0, 1, ["FAIL"]), (2, 2, ["OK"]), (1, 2, ["OK", "WARN"])],
)
def test_running_deployment_counts_the_instances_its_nodes_hold(
    tmp_path: Path, free: int, held: int, verdicts: list[str]
) -> None:
    """On a running deployment the GPU nodes already use the reservation: a full reservation
    held by this cluster's 2 nodes is no FAIL, and a scale-up to 4 needs 2 more free."""
    maximum = {"gpuNodeMaxCount": 4} if free else {}
    harness = reserved_harness(tmp_path, **maximum)
    stub_all(
        harness,
        reservation=reservation(AvailableInstanceCount=free, TotalInstanceCount=free + held),
        held=held,
        running=[],
    )
    result = harness.run("preflight")
    lines = lines_of(result.out, "capacity reservation")
    assert [line.split()[0] for line in lines] == verdicts, lines
    holding = f"{free} of {free + held} instances free and this cluster's GPU nodes hold {held}"
    assert holding in lines[0]
    if verdicts == ["FAIL"]:
        assert lines[0].endswith(
            f"{holding}, but gpuNodeCount=2 nodes need 2; stop the "
            "instances that use it or enlarge the reservation, or lower gpuNodeCount "
            "(`ray-pd-eks settings --set gpuNodeCount=...`)"
        )
    if "WARN" in verdicts:
        assert lines[1].startswith(
            f"WARN  capacity reservation  {RESERVATION_ID} has 1 instances free and this "
            "cluster's GPU nodes hold 2 but gpuNodeMaxCount=4: the launch template targets "
            "only this reservation, so the Cluster Autoscaler's scale-ups beyond 3 nodes fail"
        )
        assert (
            "--instance-count 4`) or lower ray-pd-eks settings --set gpuNodeMaxCount=3" in lines[1]
        )
    harness.session.assert_no_pending_responses()


def test_nodes_that_cannot_be_listed_count_as_none(tmp_path: Path) -> None:
    """Without ec2:DescribeInstances the free count stands alone, as on a first deploy."""
    harness = reserved_harness(tmp_path)
    stub_all(
        harness,
        reservation=reservation(AvailableInstanceCount=1, TotalInstanceCount=2),
        held="UnauthorizedOperation",
        running=[],
    )
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "capacity reservation")
    assert line.startswith(
        f"FAIL  capacity reservation  {RES} has 1 of 2 instances free, but gpuNodeCount=2"
    )
    harness.session.assert_no_pending_responses()


# -- observability: the add-on version and its configuration ----------------------------------


def test_addon_version_offered_and_schema_accepts_the_values(harness: Harness) -> None:
    result = all_in_place(harness)
    assert lines_of(result.out, "observability") == [
        f"OK    observability  {ADDON} {ADDON_VERSION} offered for Kubernetes 1.36"
    ]
    assert lines_of(result.out, "addon config") == [
        "OK    addon config  the version's schema accepts the stack's values"
    ]
    assert lines_of(result.out, "addon identity") == [
        "OK    addon identity  cloudwatch-agent with CloudWatchAgentServerPolicy, as EKS recommends"
    ]
    harness.session.assert_no_pending_responses()


def test_addon_identity_for_another_service_account_fails(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    stub_addon(harness, identity=[{"serviceAccount": "cw-agent-v9"}])
    line = check_line(harness, "addon identity", code=1)
    assert line == (
        f"FAIL  addon identity  {ADDON_VERSION} expects Pod Identity for cw-agent-v9, not "
        "cloudwatch-agent: pick a version that uses it"
    )


def test_addon_identity_other_policy_warns(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    other = "arn:aws:iam::aws:policy/CloudWatchAgentAdminPolicy"
    stub_addon(
        harness,
        identity=[{"serviceAccount": "cloudwatch-agent", "recommendedManagedPolicies": [other]}],
    )
    line = check_line(harness, "addon identity", code=0)
    assert line.startswith(f"WARN  addon identity  EKS recommends {other} for cloudwatch-agent")


def test_addon_version_not_offered_names_the_newest_usable_one(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    stub_addon(
        harness,
        versions=("v8.2.1-eksbuild.1", "v8.10.0-eksbuild.2", "v7.9.0-eksbuild.1"),
        schema=None,
    )
    result = harness.run("preflight")
    assert result.code == 1
    (line,) = lines_of(result.out, "observability")
    assert line.startswith(
        f"FAIL  observability  {ADDON} {ADDON_VERSION} is not offered for Kubernetes 1.36 in "
        f"{REGION}; offered: v8.2.1-eksbuild.1, v8.10.0-eksbuild.2;"
    )
    assert line.endswith("set ray-pd-eks settings --set cloudwatchAddonVersion=v8.10.0-eksbuild.2")
    assert "addon config" not in result.out  # no schema to read for a version EKS lacks
    harness.session.assert_no_pending_responses()


def test_no_addon_version_8_here_suggests_turning_observability_off(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    stub_addon(harness, versions=("v7.9.0-eksbuild.1",), schema=None)
    line = check_line(harness, "observability", code=1)
    assert line.endswith(
        "none >= v8 is offered here; set ray-pd-eks settings --set observability=none or use "
        "another region"
    )


def test_addon_versions_are_read_across_pages(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    eks = harness.session.stub("eks")
    request = {"addonName": ADDON, "kubernetesVersion": "1.36"}
    eks.add_response(
        "describe_addon_versions", addon_versions("v7.0.0-eksbuild.1", token="t2"), request
    )
    eks.add_response(
        "describe_addon_versions", addon_versions(ADDON_VERSION), {**request, "nextToken": "t2"}
    )
    eks.add_response(
        "describe_addon_configuration",
        {"configurationSchema": json.dumps(ADDON_SCHEMA)},
        {"addonName": ADDON, "addonVersion": ADDON_VERSION},
    )
    result = harness.run("preflight")
    assert result.code == 0, result.out
    assert lines_of(result.out, "observability")[0].startswith("OK")
    harness.session.assert_no_pending_responses()


def test_schema_without_a_key_the_stack_sets_fails_naming_it(harness: Harness) -> None:
    schema = json.loads(json.dumps(ADDON_SCHEMA))
    del schema["properties"]["otelContainerInsights"]["properties"]["logs"]
    del schema["properties"]["dcgmExporter"]
    stub_all(harness, running=[], addon=False)
    stub_addon(harness, schema=schema)
    line = check_line(harness, "addon config", code=1)
    assert line.startswith(
        f"FAIL  addon config  {ADDON_VERSION} does not accept otelContainerInsights.logs, "
        "dcgmExporter (assets/addons/cloudwatch-observability.yaml)"
    )


def test_addon_lookup_denied_is_a_warning(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False)
    harness.session.stub("eks").add_client_error(
        "describe_addon_versions", "AccessDeniedException", "no", http_status_code=403
    )
    line = check_line(harness, "observability", code=0)
    assert line.startswith(
        "WARN  observability  cannot tell (access denied for eks:DescribeAddonVersions"
    )


def test_observability_none_asks_eks_nothing(harness: Harness) -> None:
    stub_all(harness, running=[], addon=False, log_groups=False)
    stub_log_groups(harness, observability="none")  # the control-plane group only
    result = harness.run("preflight", "-c", "observability=none")
    assert result.code == 0
    assert lines_of(result.out, "observability") == [
        "OK    observability  none: no add-on, dashboard or alarms to check"
    ]
    harness.session.assert_no_pending_responses()
