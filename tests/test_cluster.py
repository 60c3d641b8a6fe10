"""Cluster stack: EKS control plane, node groups, launch templates and device plugins."""

from __future__ import annotations

import json
from typing import Any

from tests.synth import Synthesized
from tests.test_eks_images import deployed_in

NODE_STACKS = {"system": "Workload", "gpu": "GpuNodes"}


def _nodegroup(app: Synthesized, role: str) -> dict[str, Any]:
    """The properties of the system or the GPU node group (found by its stack and label)."""
    for ng in app.resources(NODE_STACKS[role], "AWS::EKS::Nodegroup").values():
        if ng["Properties"]["Labels"]["role"] in (role, f"{role}-worker"):
            return dict(ng["Properties"], Stack=NODE_STACKS[role])
    raise AssertionError(f"no {role} node group")


def _launch_template(app: Synthesized, nodegroup: dict[str, Any]) -> dict[str, Any]:
    ref = nodegroup["LaunchTemplate"]["Id"]["Ref"]
    resources = app.templates[nodegroup["Stack"]]["Resources"]
    return dict(resources[ref]["Properties"]["LaunchTemplateData"])


def _helm(app: Synthesized, chart: str) -> dict[str, Any]:
    for stack in app.templates:
        for r in app.resources(stack, "Custom::AWSCDK-EKS-HelmChart").values():
            if r["Properties"]["Release"] == chart:
                return dict(r, Stack=stack)
    raise AssertionError(f"no chart {chart}")


def test_cluster_version_logging_encryption_and_private_endpoint(default_app: Synthesized) -> None:
    c = default_app.only("Cluster", "AWS::EKS::Cluster")["Properties"]
    assert c["Name"] == "ray-llm-multinode" and c["Version"] == "1.36"
    assert [t["Type"] for t in c["Logging"]["ClusterLogging"]["EnabledTypes"]] == [
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    ]
    assert c["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert c["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    assert c["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert c["AccessConfig"] == {
        "AuthenticationMode": "API",
        "BootstrapClusterCreatorAdminPermissions": False,
    }
    assert c["ComputeConfig"] == {"Enabled": False}  # no Auto Mode


def test_secrets_key_rotates_and_is_scheduled_for_deletion(default_app: Synthesized) -> None:
    (key,) = [
        k
        for i, k in default_app.resources("Cluster", "AWS::KMS::Key").items()
        if i.startswith("ClusterSecretsKey")
    ]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["Properties"]["PendingWindowInDays"] == 7
    assert key["DeletionPolicy"] == "Delete"


def test_public_endpoint_only_for_the_given_cidrs(variant_app: Synthesized) -> None:
    c = variant_app.only("Cluster", "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert c["EndpointPublicAccess"] is True and c["EndpointPrivateAccess"] is True
    assert c["PublicAccessCidrs"] == ["203.0.113.7/32"]


def test_admins_get_cluster_admin_through_access_entries(variant_app: Synthesized) -> None:
    entries = [
        e["Properties"]
        for e in variant_app.resources("Cluster", "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == "arn:aws:iam::123456789012:role/Admin"
    ]
    assert len(entries) == 1
    policy = entries[0]["AccessPolicies"][0]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert ":cluster-access-policy/AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


def test_default_has_no_human_admin(default_app: Synthesized) -> None:
    principals = [
        json.dumps(e["Properties"]["PrincipalArn"])
        for e in default_app.resources("Cluster", "AWS::EKS::AccessEntry").values()
    ]
    # The kubectl provider's, and the waiters' functions created in this stack (their own
    # Kubernetes groups, no access policy): no person.
    assert all("Kubectl" in p or '"Providers' in p for p in principals), principals
    for entry in default_app.resources("Cluster", "AWS::EKS::AccessEntry").values():
        if '"Providers' in json.dumps(entry["Properties"]["PrincipalArn"]):
            assert "AccessPolicies" not in entry["Properties"]


def test_kubectl_layer_matches_the_kubernetes_version(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    def kubectl_layer(app: Synthesized) -> str:
        (layer,) = [
            lv["Properties"]["Description"]
            for k, lv in app.resources("Cluster", "AWS::Lambda::LayerVersion").items()
            if k.startswith("ClusterKubectlLayer")
        ]
        return str(layer)

    assert kubectl_layer(default_app).startswith("/opt/kubectl/kubectl 1.36.")
    assert kubectl_layer(variant_app).startswith("/opt/kubectl/kubectl 1.35.")
    assert variant_app.only("Cluster", "AWS::EKS::Cluster")["Properties"]["Version"] == "1.35"


def test_system_node_group(default_app: Synthesized) -> None:
    ng = _nodegroup(default_app, "system")
    assert ng["NodegroupName"] == "system"
    assert ng["AmiType"] == "AL2023_x86_64_STANDARD"
    assert ng["InstanceTypes"] == ["m7i.xlarge"]
    assert ng["ScalingConfig"] == {"DesiredSize": 1, "MaxSize": 1, "MinSize": 1}
    assert ng["Labels"] == {"role": "system"}
    assert "Taints" not in ng
    lt = _launch_template(default_app, ng)
    assert lt["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    assert lt["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert "NetworkInterfaces" not in lt  # EKS adds the cluster security group itself


def test_gpu_node_group_is_fixed_size_nvidia_labelled_and_tainted(default_app: Synthesized) -> None:
    ng = _nodegroup(default_app, "gpu")
    assert ng["AmiType"] == "AL2023_x86_64_NVIDIA"
    # The configured name, a literal: the same value as the cluster's Ref (no replacement on
    # the upgrade from the import), and no reference to the Cluster stack.
    (cluster,) = default_app.resources("Cluster", "AWS::EKS::Cluster").values()
    assert ng["ClusterName"] == cluster["Properties"]["Name"] == default_app.config.cluster_name
    assert ng["InstanceTypes"] == ["g6.8xlarge"]
    assert ng["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 2, "MinSize": 2}
    assert ng["Labels"] == {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
    assert ng["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}]


def test_gpu_node_group_uses_exactly_the_gpu_subnet(default_app: Synthesized) -> None:
    ng = _nodegroup(default_app, "gpu")
    # The subnet lives in the node group's own stack: a reference, not an import.
    (subnet,) = ng["Subnets"]
    resources = default_app.templates["GpuNodes"]["Resources"]
    assert resources[subnet["Ref"]]["Type"] == "AWS::EC2::Subnet"


def test_gpu_launch_template_efa_interface_placement_imds_and_volume(
    default_app: Synthesized,
) -> None:
    resources = default_app.templates["GpuNodes"]["Resources"]
    lt = _launch_template(default_app, _nodegroup(default_app, "gpu"))
    (nic,) = lt["NetworkInterfaces"]
    assert nic["InterfaceType"] == "efa" and nic["DeviceIndex"] == 0
    cluster_sg, efa_sg = nic["Groups"]
    # From the control-plane waiter of the same stack (DescribeCluster's
    # resourcesVpcConfig.clusterSecurityGroupId: the group AWS::EKS::Cluster's
    # ClusterSecurityGroupId attribute names, which the launch template imported before).
    waiter, attribute = cluster_sg["Fn::GetAtt"]
    assert resources[waiter]["Type"] == "Custom::ClusterActive"
    assert attribute == "ClusterSecurityGroupId"
    (tags,) = lt["TagSpecifications"]
    assert tags["Tags"] == [
        {"Key": "cluster.k8s.amazonaws.com/name", "Value": default_app.config.cluster_name}
    ]
    efa_sg_id = efa_sg["Fn::GetAtt"][0]
    assert resources[efa_sg_id]["Type"] == "AWS::EC2::SecurityGroup"
    placement_id = lt["Placement"]["GroupName"]["Fn::GetAtt"][0]
    assert resources[placement_id]["Properties"] == {"Strategy": "cluster"}
    assert lt["MetadataOptions"]["HttpTokens"] == "required"
    assert lt["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    (disk,) = lt["BlockDeviceMappings"]
    # NVMe holds images and caches, so the root volume keeps only the OS at gp3's baseline.
    assert disk["Ebs"] == {
        "DeleteOnTermination": True,
        "Encrypted": True,
        "VolumeSize": 50,
        "VolumeType": "gp3",
    }


def test_efa_security_group_allows_all_traffic_only_within_itself(
    default_app: Synthesized,
) -> None:
    ingress = default_app.only("GpuNodes", "AWS::EC2::SecurityGroupIngress")["Properties"]
    egress = default_app.only("GpuNodes", "AWS::EC2::SecurityGroupEgress")["Properties"]
    for rule, peer in ((ingress, "SourceSecurityGroupId"), (egress, "DestinationSecurityGroupId")):
        assert rule["IpProtocol"] == "-1"
        assert rule[peer] == {"Fn::GetAtt": [rule["GroupId"]["Fn::GetAtt"][0], "GroupId"]}
    sg_id = ingress["GroupId"]["Fn::GetAtt"][0]
    sg = default_app.templates["GpuNodes"]["Resources"][sg_id]["Properties"]
    assert sg.get("SecurityGroupEgress", []) in (
        [],
        [
            {
                "CidrIp": "255.255.255.255/32",
                "Description": "Disallow all traffic",
                "FromPort": 252,
                "IpProtocol": "icmp",
                "ToPort": 86,
            }
        ],
    )


def test_variant_sizes_flow_into_the_node_groups(variant_app: Synthesized) -> None:
    assert _nodegroup(variant_app, "gpu")["ScalingConfig"]["DesiredSize"] == 3


def test_device_plugins_are_pinned_and_confined_to_gpu_nodes(default_app: Synthesized) -> None:
    efa = _helm(default_app, "aws-efa-k8s-device-plugin")
    nvidia = _helm(default_app, "nvidia-device-plugin")
    assert efa["Stack"] == nvidia["Stack"] == "GpuAddons"
    # The vendored charts (assets/charts/: EFA v0.5.30, NVIDIA 0.20.0), not a repository.
    for plugin in (efa, nvidia):
        assert "Repository" not in plugin["Properties"]
        assert "ChartAssetURL" in plugin["Properties"]
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    mappings = default_app.templates["GpuAddons"].get("Mappings", {})
    for chart in (efa, nvidia):
        values = json.loads(deployed_in(chart["Properties"]["Values"], mappings, "us-west-2"))
        assert values["nodeSelector"] == {"role": "gpu-worker"}
        assert toleration in values["tolerations"]
        assert chart["Properties"]["Namespace"] == "kube-system"
    assert json.loads(nvidia["Properties"]["Values"])["mofedEnabled"] is False
    efa_values = json.loads(deployed_in(efa["Properties"]["Values"], mappings, "us-west-2"))
    assert efa_values["supportedInstanceLabels"]["values"] == ["g6.8xlarge"]


def test_device_plugins_install_after_the_gpu_nodes(default_app: Synthesized) -> None:
    """Their stack (GpuAddons) depends on the GPU node stack: installed after the node group,
    removed before it; the charts themselves carry no reference to that stack."""
    stage = default_app.stage
    assert stage.gpu_nodes in stage.gpu_addons.dependencies
    for chart in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin"):
        assert _helm(default_app, chart)["Stack"] == "GpuAddons"
    assert "GpuNodes" not in json.dumps(default_app.templates["GpuAddons"])


def test_cluster_outputs(default_app: Synthesized) -> None:
    outputs = default_app.templates["Cluster"]["Outputs"]
    assert outputs["UpdateKubeconfigCommand"]["Value"] == {
        "Fn::Join": [
            "",
            [
                "aws eks update-kubeconfig --region ",
                {"Ref": "AWS::Region"},
                " --name ray-llm-multinode",
            ],
        ]
    }
    assert outputs["ClusterName"]["Value"] == {"Ref": "Cluster9EE0221C"}
