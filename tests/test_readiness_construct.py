"""The readiness custom resource in the readiness stack: Provider, Lambdas, access, RBAC."""

from __future__ import annotations

import json
from typing import Any

from pd_constructs.readiness.readiness import READINESS_GROUP, config_hash, readiness_rbac
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.config import DEFAULTS
from tests.synth import Synthesized, resolve


def _res(app: Synthesized) -> dict[str, Any]:
    return dict(app.templates["Readiness"]["Resources"])


def _readiness(app: Synthesized) -> tuple[str, dict[str, Any]]:
    (item,) = [(k, v) for k, v in _res(app).items() if v["Type"] == "Custom::RayServiceReadiness"]
    return item


# The check's functions, access entry and Provider are created in the cluster stack, beside
# the control plane (docs/deploy-timeline.md); the custom resource and its RBAC stay here.
PROVIDERS = "Cluster"


def _functions(app: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        v["Properties"]["Handler"]: v["Properties"]
        for k, v in app.resources(PROVIDERS, "AWS::Lambda::Function").items()
        if v["Properties"]["Handler"].startswith("handler.") and k.startswith("ProvidersReadiness")
    }


def _readiness_resources(app: Synthesized, rtype: str) -> dict[str, dict[str, Any]]:
    return {
        k: v
        for k, v in app.resources(PROVIDERS, rtype).items()
        if k.startswith("ProvidersReadiness")
    }


def test_resource_properties_carry_the_whole_contract(default_app: Synthesized) -> None:
    _, cr = _readiness(default_app)
    props = cr["Properties"]
    assert {k: v for k, v in props.items() if isinstance(v, str)} == {
        "Namespace": "inference",
        "RayServiceName": "ray-llm",
        "ApplicationName": "qwen",
        "ModelId": "qwen3.5-9b",
        "KvBackend": "LIBFABRIC",
        "ServingMode": "pd",
        "RayAuthSecret": "ray-llm-ray-token",
        "ExpectedGpuNodes": "2",
        "GpusPerWorker": "1",
        "MetricsPort": "8080",
        # Qwen3.5-9B in bfloat16: 8 full-attention layers x 4 KV heads x 256 x K,V x 2 bytes.
        "KvBytesPerToken": "32768",
        "GpuWorkersPrivileged": "true",
        "TimeoutSeconds": "3300",
        "QueryIntervalSeconds": "30",
        "ConfigHash": props["ConfigHash"],
    }
    assert len(props["ConfigHash"]) == 16
    for key, attribute in (
        ("ClusterName", "ExportsOutputRefCluster"),
        ("ClusterEndpoint", "Endpoint"),
        ("ClusterCertificateAuthorityData", "CertificateAuthorityData"),
    ):
        assert attribute in props[key]["Fn::ImportValue"], key


def test_config_hash_changes_with_the_rayservice_and_only_then() -> None:
    from tests.synth import synth as _unused  # noqa: F401  (keeps import cost out of this test)

    def fingerprint(overrides: dict[str, Any]) -> str:
        c = DEFAULTS.with_overrides(overrides)
        return config_hash(render_rayservice(c, image=c.image_uri("-")))

    assert fingerprint({}) == fingerprint({"readinessTimeoutMinutes": 30})
    assert fingerprint({}) != fingerprint({"maxModelLen": 8192})


def test_check_runs_after_the_rayservice_with_its_access_in_place(default_app: Synthesized) -> None:
    resources = _res(default_app)
    _, cr = _readiness(default_app)
    depends = set(cr["DependsOn"])
    rbac = next(k for k in resources if k.startswith("ReadinessRbac"))
    assert rbac in depends
    # The access entry is in the cluster stack, which this one deploys after.
    (access_entry,) = _readiness_resources(default_app, "AWS::EKS::AccessEntry")
    assert access_entry.startswith("ProvidersReadinessAccessEntry")
    assert default_app.stage.cluster in default_app.stage.readiness.dependencies
    # The RayService (and its namespace) and the GPU nodes are in stacks deployed before.
    stage = default_app.stage
    assert {stage.workload, stage.gpu_nodes} <= set(stage.readiness.dependencies)
    assert ("RayService", "ray-llm") in {
        (o["kind"], o["metadata"]["name"])
        for r in default_app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource").values()
        for o in json.loads(resolve(r["Properties"]["Manifest"]))
    }


def test_provider_polls_every_30s_up_to_the_configured_timeout(
    default_app: Synthesized,
) -> None:
    (machine,) = [
        v["Properties"]
        for v in _readiness_resources(default_app, "AWS::StepFunctions::StateMachine").values()
    ]
    definition = "".join(
        p for p in machine["DefinitionString"]["Fn::Join"][1] if isinstance(p, str)
    )
    # The Provider's hard stop: readinessTimeoutMinutes (55) + 3 minutes of grace, so the
    # check's own message comes first and CloudFormation's hour (60) last.
    assert '"IntervalSeconds":30,"MaxAttempts":116' in definition  # 58 min / 30 s
    assert machine["LoggingConfiguration"]["Level"] == "ALL"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is False


def test_lambdas_current_runtime_timeouts_and_vpc(default_app: Synthesized) -> None:
    fns = _functions(default_app)
    # The scheduled KV probe (kvProbeIntervalMinutes, default 15) runs in the Readiness stack
    # (tests/test_kv_probe.py); the check's own functions are the cluster stack's providers.
    assert set(fns) == {"handler.on_event", "handler.is_complete"}
    for fn in fns.values():
        assert fn["Runtime"] == "python3.14"
    # Only the poll talks to the API server; on_event (rollback detection) stays outside.
    subnets = fns["handler.is_complete"]["VpcConfig"]["SubnetIds"]
    assert len(subnets) == 2
    assert all("PrivateSubnet" in s["Fn::ImportValue"] for s in subnets)
    assert "VpcConfig" not in fns["handler.on_event"]
    # One poll must end well under Lambda's 15 minutes.
    assert fns["handler.is_complete"]["Timeout"] == 300
    assert fns["handler.on_event"]["Timeout"] == 30
    assert fns["handler.is_complete"]["Environment"]["Variables"] == {"POLL_BUDGET_SECONDS": "180"}


def test_security_group_reaches_only_the_api_server(default_app: Synthesized) -> None:
    (sg_id,) = [
        k
        for k in _readiness_resources(default_app, "AWS::EC2::SecurityGroup")
        if k.startswith("ProvidersReadinessSecurityGroup")
    ]
    egress = default_app.egress_rules(PROVIDERS, sg_id)
    # No 0.0.0.0/0: the EKS token is presigned locally (tests/test_security_infra.py proves
    # it opens no connection), and DescribeStacks runs in the on-event function, outside the VPC.
    assert [(e["FromPort"], e["ToPort"], e["IpProtocol"]) for e in egress] == [(443, 443, "tcp")]
    assert "CidrIp" not in egress[0]
    # The control plane's own group (on its interfaces only), not the cluster security group
    # that every node carries: the rule opens the API server and no node or pod.
    control_plane = "ControlPlaneSecurityGroup"
    assert control_plane in json.dumps(egress[0]["DestinationSecurityGroupId"])
    assert "ClusterSecurityGroupId" not in json.dumps(egress[0]["DestinationSecurityGroupId"])
    (ingress,) = [
        v["Properties"]
        for v in _readiness_resources(default_app, "AWS::EC2::SecurityGroupIngress").values()
    ]
    assert (ingress["FromPort"], ingress["ToPort"]) == (443, 443)
    assert control_plane in json.dumps(ingress["GroupId"])
    assert "ClusterSecurityGroupId" not in json.dumps(ingress["GroupId"])


def test_access_entry_maps_the_poller_role_to_one_group_without_policies(
    default_app: Synthesized,
) -> None:
    ((_, entry),) = [
        (k, v["Properties"])
        for k, v in _readiness_resources(default_app, "AWS::EKS::AccessEntry").items()
    ]
    assert entry["KubernetesGroups"] == [READINESS_GROUP]
    assert entry["Type"] == "STANDARD"
    assert "AccessPolicies" not in entry  # not cluster admin, not AmazonEKSViewPolicy
    role_id = entry["PrincipalArn"]["Fn::GetAtt"][0]
    assert role_id == _functions(default_app)["handler.is_complete"]["Role"]["Fn::GetAtt"][0]


def test_rbac_is_read_only_except_posting_to_the_serve_service() -> None:
    objects = {o["kind"]: o for o in readiness_rbac(namespace="inference", ray_service="ray-llm")}
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    ]
    role = objects["Role"]
    assert role["metadata"]["namespace"] == "inference"
    rules = {(r["apiGroups"][0], tuple(r["resources"])): r for r in role["rules"]}
    assert rules[("ray.io", ("rayservices",))]["resourceNames"] == ["ray-llm"]
    assert rules[("ray.io", ("rayservices",))]["verbs"] == ["get"]
    proxies = [r for r in role["rules"] if r["resources"] == ["services/proxy"]]
    assert {tuple(r["resourceNames"]): tuple(r["verbs"]) for r in proxies} == {
        ("ray-llm-serve-svc:8000",): ("get", "create"),
        ("ray-llm-head-svc:8265",): ("get",),
    }
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    for rule in objects["ClusterRole"]["rules"] + role["rules"]:
        if rule["resources"] != ["services/proxy"]:
            assert not writes & set(rule["verbs"]), rule
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert objects[binding]["subjects"] == [
            {"kind": "Group", "name": READINESS_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
        ]
    assert ("", ("secrets",)) not in rules  # no token Secret given: no Secret at all


def test_rbac_reads_exactly_the_ray_token_secret(default_app: Synthesized) -> None:
    (rbac,) = [v for k, v in _res(default_app).items() if k.startswith("ReadinessRbac")]
    (role,) = [o for o in json.loads(rbac["Properties"]["Manifest"]) if o["kind"] == "Role"]
    secrets = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert secrets == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [default_app.config.ray_auth_secret_name],
            "verbs": ["get"],
        }
    ]


def test_rbac_manifest_is_deployed_in_the_readiness_stack(default_app: Synthesized) -> None:
    (rbac,) = [v for k, v in _res(default_app).items() if k.startswith("ReadinessRbac")]
    kinds = [o["kind"] for o in json.loads(rbac["Properties"]["Manifest"])]
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]


def test_readiness_facts_are_stack_outputs(default_app: Synthesized) -> None:
    outputs = default_app.templates["Readiness"]["Outputs"]
    cr_id, _ = _readiness(default_app)
    for fact in ("AppStatus", "GpuNodes", "PrefillNode", "DecodeNode", "KvBackend", "Models"):
        assert outputs[f"Readiness{fact}"]["Value"] == {"Fn::GetAtt": [cr_id, fact]}
    assert default_app.templates["Workload"]["Outputs"]["PortForwardCommand"]["Value"] == (
        "kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000"
    )


def test_variant_settings_reach_the_check(variant_app: Synthesized) -> None:
    _, cr = _readiness(variant_app)
    assert cr["Properties"]["KvBackend"] == "UCX"
    assert cr["Properties"]["ExpectedGpuNodes"] == "3"


def test_aggregated_mode_reaches_the_check(token_app: Synthesized) -> None:
    _, cr = _readiness(token_app)
    assert cr["Properties"]["ServingMode"] == "aggregated"


def test_check_runs_again_when_the_gpu_nodes_move(default_app: Synthesized) -> None:
    """A new gpuAz or reservation replaces the GPU nodes: the check must prove the endpoint
    again, without importing the AZ from the GPU stack (that export could never change)."""
    from stacks.readiness_stack import gpu_placement

    moved = default_app.config.with_overrides({"gpuAz": "us-west-2c"})
    assert gpu_placement(moved) != gpu_placement(default_app.config)
    assert gpu_placement(
        default_app.config.with_overrides({"readinessTimeoutMinutes": 30})
    ) == gpu_placement(default_app.config)
    assert "RayPdEks-GpuNodes:" not in json.dumps(default_app.templates["Readiness"])
