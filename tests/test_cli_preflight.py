"""``preflight`` against botocore Stubbers: each AWS answer and the line it produces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_fixtures import ACCOUNT, REGION, ROLE_ARN, USER_ARN, Harness, write_cdk_json

G6: dict[str, Any] = {
    "InstanceType": "g6.8xlarge",
    "VCpuInfo": {"DefaultVCpus": 32},
    "GpuInfo": {"Gpus": [{"Name": "L4", "Manufacturer": "NVIDIA", "Count": 1}]},
    "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 1}},
}


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
    return Harness(write_cdk_json(tmp_path, region=REGION))


def stub_all(
    h: Harness,
    *,
    arn: str = USER_ARN,
    itype: dict[str, Any] | None = None,
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2c"),
    quota_code: str = "L-DB2E81BA",
    quota: float = 128.0,
    running: list[dict[str, Any]] | None = None,
    bootstrap: str | None = "28",
) -> None:
    """Queue the happy-path answers; keyword arguments change one answer each."""
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


def lines_of(out: str, check: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if f"  {check}  " in line]


def test_happy_path_is_all_ok_and_recommends_a_pinned_az(harness: Harness) -> None:
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert result.code == 0, result.err
    assert lines_of(result.out, "credentials") == [
        f"OK    credentials   {USER_ARN} (account {ACCOUNT})"
    ]
    assert f"OK    region        {REGION} (from context key 'region')" in result.out
    assert (
        "OK    gpu type      g6.8xlarge: EFA supported (max 1 interfaces), 32 vCPUs, "
        "1 GPU (NVIDIA L4)" in result.out
    )
    assert "us-west-2a, us-west-2c; the deploy picks one" in result.out
    assert "-c gpuAz=us-west-2a" in result.out
    assert "OK    vCPU quota    'Running On-Demand G and VT instances' is 128 vCPUs" in result.out
    assert "needs 2 x g6.8xlarge = 64 vCPUs" in result.out
    assert "OK    bootstrap     CDK bootstrap version 28" in result.out
    # Not an admin principal, private endpoint: warnings, which do not fail the run.
    assert f"WARN  access        {USER_ARN} is not in adminPrincipalArns" in result.out
    assert "WARN  api endpoint  private only: status/smoke/efa-check and kubectl work" in result.out
    assert result.out.rstrip().endswith(
        "0 FAIL, 2 WARN: ready to deploy: npx cdk deploy 'RayPdEks/*'"
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
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "vCPU quota")
    assert line.startswith("WARN  vCPU quota")
    assert "other instances already use 48" in line
    assert "--desired-value 112" in line
    assert result.code == 0


def test_p_family_uses_the_p_instance_quota(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION, gpuNodeType="p4d.24xlarge"))
    p4d = {
        "InstanceType": "p4d.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8}]},
        "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 4}},
    }
    stub_all(harness, itype=p4d, quota_code="L-417A185B", quota=96.0)
    result = harness.run("preflight")
    (line,) = lines_of(result.out, "vCPU quota")
    assert "'Running On-Demand P instances' is 96 vCPUs, below 2 x p4d.24xlarge = 192" in line
    assert "--quota-code L-417A185B --desired-value 192" in line
    assert result.code == 1
    harness.session.assert_no_pending_responses()  # the P quota code was the one asked for


def test_configured_az_that_does_not_offer_the_type_fails(tmp_path: Path) -> None:
    harness = Harness(write_cdk_json(tmp_path, region=REGION, gpuAz="us-west-2d"))
    stub_all(harness, running=[])
    result = harness.run("preflight")
    assert result.code == 1
    assert (
        "FAIL  gpu AZ        gpuAz us-west-2d does not offer g6.8xlarge "
        "(offered in us-west-2a, us-west-2c): use -c gpuAz=us-west-2a" in result.out
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


def test_admin_principal_from_an_assumed_role_is_recognised(harness: Harness) -> None:
    stub_all(harness, arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice", running=[])
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

    harness = Harness(write_cdk_json(tmp_path, region=REGION), StubbedSession(credentials=False))
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


def test_no_region_anywhere_is_a_usage_error(tmp_path: Path) -> None:
    from tests.cli_fixtures import StubbedSession

    harness = Harness(write_cdk_json(tmp_path), StubbedSession(region=None))
    result = harness.run("preflight")
    assert result.code == 2
    assert result.err == (
        "error: no AWS region: pass --region, set -c region=..., or export AWS_REGION\n"
    )
