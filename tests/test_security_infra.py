"""Least privilege around the cluster: security groups of the functions that call the
Kubernetes API, the VPC's default security group, the control-plane log group, and the proof
that the EKS token costs no network call."""

from __future__ import annotations

import importlib
import json
import socket
from typing import Any

import pytest

from ray_pd_eks import lambda_code
from tests.fakes.kube_api import FAKE_ACCESS_KEY_ID
from tests.synth import Synthesized

kube = lambda_code.kube()


def _function(app: Synthesized, stack: str, handler: str) -> dict[str, Any]:
    """The function running ``handler``; ``handler.*`` names the readiness check's (the GPU AZ
    chooser and the capacity watch, in the same stack, run a ``handler.on_event`` too)."""
    (fn,) = [
        v["Properties"]
        for v in app.resources(stack, "AWS::Lambda::Function").values()
        if v["Properties"].get("Handler") == handler
        and (
            not handler.startswith("handler.")
            or v["Properties"].get("Description", "").startswith("Readiness check")
        )
    ]
    return dict(fn)


def test_eks_token_is_presigned_without_any_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the API-server-only security groups suffice: no STS call is made."""
    attempts: list[Any] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise AssertionError("the EKS token must not open a connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    session = importlib.import_module("botocore.session").Session()
    session.set_credentials(FAKE_ACCESS_KEY_ID, "secret/for/tests/only")
    token = kube.eks_token("ray-llm-multinode", session=session, region="us-west-2")
    assert token.startswith("k8s-aws-v1.") and attempts == []


@pytest.mark.parametrize(
    ("stack", "handler"),
    [
        # The waiters' functions are created in the cluster stack (docs/deploy-timeline.md).
        ("Cluster", "handler.is_complete"),
        ("Cluster", "recreate.is_complete"),
        ("Workload", "ray_token.on_event"),
    ],
)
def test_functions_in_the_vpc_reach_only_the_api_server(
    default_app: Synthesized, stack: str, handler: str
) -> None:
    fn = _function(default_app, stack, handler)
    (sg_ref,) = fn["VpcConfig"]["SecurityGroupIds"]
    (egress,) = default_app.egress_rules(stack, sg_ref["Fn::GetAtt"][0])
    assert "CidrIp" not in egress and "CidrIpv6" not in egress
    assert (egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == ("tcp", 443, 443)
    # The control plane's own group, which EKS attaches to its interfaces only.
    assert "ClusterControlPlaneSecurityGroup" in json.dumps(egress["DestinationSecurityGroupId"])
    assert "ClusterSecurityGroupId" not in json.dumps(egress["DestinationSecurityGroupId"])


@pytest.mark.parametrize(("stack", "handler"), [("Cluster", "handler.on_event")])
def test_describe_stacks_runs_outside_the_vpc(
    default_app: Synthesized, stack: str, handler: str
) -> None:
    assert "VpcConfig" not in _function(default_app, stack, handler)


def test_kubectl_provider_has_its_own_security_group(default_app: Synthesized) -> None:
    resources = default_app.templates["Cluster"]["Resources"]
    (handler,) = [
        v["Properties"]
        for k, v in resources.items()
        if v["Type"] == "AWS::Lambda::Function" and k.startswith("ClusterKubectlProviderHandler")
    ]
    (sg_ref,) = handler["VpcConfig"]["SecurityGroupIds"]
    # Its own group, not the cluster security group (whose members reach every node).
    assert sg_ref == {"Fn::GetAtt": ["ClusterKubectlSecurityGroup638B9A72", "GroupId"]}
    sg = resources["ClusterKubectlSecurityGroup638B9A72"]["Properties"]
    assert "SecurityGroupIngress" not in sg
    assert sg["SecurityGroupEgress"] == [
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "HTTPS: EKS API, Helm chart repositories, S3",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    (ingress,) = [
        v["Properties"]
        for v in resources.values()
        if v["Type"] == "AWS::EC2::SecurityGroupIngress"
        and v["Properties"].get("SourceSecurityGroupId")
        == {"Fn::GetAtt": ["ClusterKubectlSecurityGroup638B9A72", "GroupId"]}
    ]
    assert (ingress["IpProtocol"], ingress["FromPort"], ingress["ToPort"]) == ("tcp", 443, 443)
    # On the control plane's own group (its interfaces only), not the cluster security group.
    (group_id,) = ingress["GroupId"]["Fn::GetAtt"][:1]
    assert group_id.startswith("ClusterControlPlaneSecurityGroup")
    assert ingress["GroupId"]["Fn::GetAtt"][1] == "GroupId"
    cluster = default_app.only("Cluster", "AWS::EKS::Cluster")["Properties"]
    assert cluster["ResourcesVpcConfig"]["SecurityGroupIds"] == [
        {"Fn::GetAtt": [group_id, "GroupId"]}
    ]


def test_vpc_default_security_group_is_restricted_from_the_cluster_stack(
    default_app: Synthesized,
) -> None:
    """The restriction is the cluster stack's (beside the control plane, docs/deploy-timeline.md):
    it names the network's VPC's own default group, and its function may revoke rules of that
    group only. aws-cdk-lib's own custom resource is off, so the network stack has none."""
    assert default_app.resources("Network", "Custom::VpcRestrictDefaultSG") == {}
    vpc_id = next(iter(default_app.resources("Network", "AWS::EC2::VPC")))
    (export,) = [
        o["Export"]["Name"]
        for o in default_app.templates["Network"]["Outputs"].values()
        if o["Value"] == {"Fn::GetAtt": [vpc_id, "DefaultSecurityGroup"]}
    ]
    restrict = default_app.only("Cluster", "Custom::DefaultSecurityGroupRestriction")
    assert restrict["Properties"]["DefaultSecurityGroupId"] == {"Fn::ImportValue": export}
    assert restrict["Properties"]["Account"] == {"Ref": "AWS::AccountId"}
    (statement,) = [
        st
        for p in default_app.resources("Cluster", "AWS::IAM::Policy").values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if any(str(a).startswith("ec2:Revoke") for a in st["Action"])
    ]
    assert statement["Action"] == [
        "ec2:RevokeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
    ]
    sep, parts = statement["Resource"]["Fn::Join"]
    assert sep == "" and parts[-2:] == [":security-group/", {"Fn::ImportValue": export}]


@pytest.mark.parametrize(
    ("app_name", "retention", "policy"),
    [("default_app", 30, "Delete"), ("variant_app", 365, "Retain")],
)
def test_control_plane_log_group_is_the_stacks_and_exists_before_the_cluster(
    app_name: str, retention: int, policy: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    resources = app.templates["Cluster"]["Resources"]
    (log_id, log_group) = next(
        (k, v)
        for k, v in resources.items()
        if v["Type"] == "AWS::Logs::LogGroup"
        and v["Properties"].get("LogGroupName") == f"/aws/eks/{app.config.cluster_name}/cluster"
    )
    assert log_group["Properties"]["RetentionInDays"] == retention
    assert log_group["DeletionPolicy"] == policy
    (cluster,) = [v for v in resources.values() if v["Type"] == "AWS::EKS::Cluster"]
    assert log_id in cluster["DependsOn"]
    logging = cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert len(logging) == 5  # every control-plane log type writes into it


def test_the_control_plane_group_is_on_the_control_planes_interfaces_only(
    default_app: Synthesized,
) -> None:
    """Rules on it open the API server alone: no launch template or node group carries it."""
    for stack, template in default_app.templates.items():
        for logical_id, r in template["Resources"].items():
            if r["Type"] in ("AWS::EC2::LaunchTemplate", "AWS::EKS::Nodegroup"):
                assert "ControlPlaneSecurityGroup" not in json.dumps(r), (stack, logical_id)
