"""Ray token authentication in the synthesized app: the RayService asks for it, the Secret is
applied without data, and a least-privileged custom resource fills it before the Ray pods start."""

from __future__ import annotations

import json
from typing import Any

from pd_constructs.serving.ray_auth import TOKEN_WRITER_GROUP
from tests.synth import Synthesized, resolve


def _objects(app: Synthesized, stack: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for logical_id, r in app.resources(stack, "Custom::AWSCDK-EKS-KubernetesResource").items():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            out.append((logical_id, obj))
    return out


def _find(app: Synthesized, kind: str, name: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, o)
        for lid, o in _objects(app, "Workload")
        if o["kind"] == kind and o["metadata"]["name"] == name
    ]
    return found


def test_rayservice_turns_token_authentication_on_with_the_stack_secret(
    default_app: Synthesized,
) -> None:
    _, rs = _find(default_app, "RayService", "ray-llm")
    assert rs["spec"]["rayClusterConfig"]["authOptions"] == {
        "mode": "token",
        "secretName": "ray-llm-ray-token",
    }


def test_secret_is_applied_without_any_token(default_app: Synthesized) -> None:
    _, secret = _find(default_app, "Secret", "ray-llm-ray-token")
    assert secret["metadata"]["namespace"] == "inference"
    assert secret["type"] == "Opaque"
    assert "data" not in secret and "stringData" not in secret


def test_token_writer_runs_after_secret_rbac_and_access_entry_and_before_the_rayservice(
    default_app: Synthesized,
) -> None:
    resources = default_app.templates["Workload"]["Resources"]
    (writer_id, writer) = next(
        (k, v) for k, v in resources.items() if v["Type"] == "Custom::RayAuthToken"
    )
    props = writer["Properties"]
    assert {k: v for k, v in props.items() if isinstance(v, str)} == {
        "Namespace": "inference",
        "SecretName": "ray-llm-ray-token",
    }
    assert set(props) == {
        "ServiceToken",
        "ClusterName",
        "ClusterEndpoint",
        "ClusterCertificateAuthorityData",
        "Namespace",
        "SecretName",
    }
    secret_id, _ = _find(default_app, "Secret", "ray-llm-ray-token")
    rbac_id, _ = _find(default_app, "Role", "ray-pd-eks-ray-token-writer")
    (entry_id,) = [
        k
        for k, v in resources.items()
        if v["Type"] == "AWS::EKS::AccessEntry"
        and v["Properties"]["KubernetesGroups"] == [TOKEN_WRITER_GROUP]
    ]
    assert {secret_id, rbac_id, entry_id} <= set(writer["DependsOn"])
    rs_id, _ = _find(default_app, "RayService", "ray-llm")
    assert writer_id in resources[rs_id]["DependsOn"]
    namespace_id, _ = _find(default_app, "Namespace", "inference")
    assert namespace_id in resources[secret_id]["DependsOn"]


def test_token_writer_may_only_read_and_patch_that_one_secret(default_app: Synthesized) -> None:
    resources = default_app.templates["Workload"]["Resources"]
    _, role = _find(default_app, "Role", "ray-pd-eks-ray-token-writer")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["ray-llm-ray-token"],
            "verbs": ["get", "patch"],
        }
    ]
    _, binding = _find(default_app, "RoleBinding", "ray-pd-eks-ray-token-writer")
    assert binding["subjects"] == [
        {"kind": "Group", "name": TOKEN_WRITER_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    (entry,) = [
        v["Properties"]
        for v in resources.values()
        if v["Type"] == "AWS::EKS::AccessEntry"
        and v["Properties"]["KubernetesGroups"] == [TOKEN_WRITER_GROUP]
    ]
    assert entry["Type"] == "STANDARD" and "AccessPolicies" not in entry
    (fn,) = [
        v["Properties"]
        for v in resources.values()
        if v["Type"] == "AWS::Lambda::Function"
        and v["Properties"].get("Handler") == "ray_token.on_event"
    ]
    assert entry["PrincipalArn"] == {"Fn::GetAtt": [fn["Role"]["Fn::GetAtt"][0], "Arn"]}
    # The role holds no AWS permission beyond its logs and network interfaces.
    role_id = fn["Role"]["Fn::GetAtt"][0]
    inline = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"].get("Roles", [])
    ]
    assert inline == []


def test_token_writer_reaches_only_the_api_server(default_app: Synthesized) -> None:
    resources = default_app.templates["Workload"]["Resources"]
    (fn,) = [
        v["Properties"]
        for v in resources.values()
        if v["Type"] == "AWS::Lambda::Function"
        and v["Properties"].get("Handler") == "ray_token.on_event"
    ]
    (sg_ref,) = fn["VpcConfig"]["SecurityGroupIds"]
    (egress,) = default_app.egress_rules("Workload", sg_ref["Fn::GetAtt"][0])
    assert (egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == ("tcp", 443, 443)
    assert "DestinationSecurityGroupId" in egress and "CidrIp" not in egress
