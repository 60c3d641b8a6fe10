"""GPU launch template: NVMe local storage through nodeadm, the root-volume fallback, and
capacity (reservation and placement group)."""

from __future__ import annotations

import email
import json
from email.message import Message
from typing import Any

import yaml

from pd_constructs.cluster.cluster import NODEADM_CONTENT_TYPE, nodeadm_user_data
from tests.conftest import RESERVATION
from tests.synth import Synthesized


def _gpu_launch_template(app: Synthesized) -> dict[str, Any]:
    resources = app.templates["GpuNodes"]["Resources"]
    return dict(resources[_gpu_launch_template_id(app)]["Properties"]["LaunchTemplateData"])


def _gpu_nodegroup(app: Synthesized) -> dict[str, Any]:
    (ng,) = app.resources("GpuNodes", "AWS::EKS::Nodegroup").values()
    return dict(ng["Properties"])


def _mime(user_data: dict[str, Any]) -> Message:
    text = user_data["Fn::Base64"]
    assert isinstance(text, str), "user data holds no CloudFormation token"
    return email.message_from_string(text)


def _parts(message: Message) -> list[tuple[str, str]]:
    """(content type, body) of each leaf part of a MIME multi-part message."""
    return [
        (part.get_content_type(), str(part.get_payload()))
        for part in message.walk()
        if not part.is_multipart()
    ]


def test_nvme_types_get_a_raid0_node_config_in_mime_user_data(default_app: Synthesized) -> None:
    lt = _gpu_launch_template(default_app)
    message = _mime(lt["UserData"])
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    ((content_type, body),) = _parts(message)
    assert content_type == NODEADM_CONTENT_TYPE
    node_config = yaml.safe_load(body)
    assert node_config == {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "featureGates": {"FastImagePull": True},
            "instance": {"localStorage": {"strategy": "RAID0"}},
        },
    }
    # The root volume keeps only the OS: small, gp3 baseline, no raised IOPS/throughput.
    (disk,) = lt["BlockDeviceMappings"]
    assert disk["Ebs"]["VolumeSize"] == 50
    assert "Iops" not in disk["Ebs"] and "Throughput" not in disk["Ebs"]


def test_without_nvme_no_raid0_and_a_faster_root_volume(variant_app: Synthesized) -> None:
    lt = _gpu_launch_template(variant_app)
    ((_, body),) = _parts(_mime(lt["UserData"]))
    # SOCI parallel pull still, but nothing for local storage.
    assert yaml.safe_load(body)["spec"] == {"featureGates": {"FastImagePull": True}}
    (disk,) = lt["BlockDeviceMappings"]
    assert disk["Ebs"] == {
        "DeleteOnTermination": True,
        "Encrypted": True,
        "Iops": 12000,
        "Throughput": 750,
        "VolumeSize": 200,
        "VolumeType": "gp3",
    }


def test_system_nodes_have_room_for_the_head_image(default_app: Synthesized) -> None:
    resources = default_app.templates["Workload"]["Resources"]
    (system,) = default_app.resources("Workload", "AWS::EKS::Nodegroup").values()
    lt = resources[system["Properties"]["LaunchTemplate"]["Id"]["Ref"]]["Properties"]
    (disk,) = lt["LaunchTemplateData"]["BlockDeviceMappings"]
    assert disk["Ebs"]["VolumeSize"] == 100
    # The head's ~20 GB image is written here: above gp3's 125 MiB/s baseline.
    assert (disk["Ebs"]["Iops"], disk["Ebs"]["Throughput"]) == (3000, 500)
    # ... and pulled with SOCI parallel pull and unpack (nodeadm's FastImagePull gate).
    ((content_type, body),) = _parts(_mime(lt["LaunchTemplateData"]["UserData"]))
    assert content_type == NODEADM_CONTENT_TYPE
    assert yaml.safe_load(body)["spec"] == {"featureGates": {"FastImagePull": True}}


def test_user_data_round_trips_through_a_mime_parser() -> None:
    text = nodeadm_user_data({"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig"})
    ((_, body),) = _parts(email.message_from_string(text))
    assert yaml.safe_load(body)["kind"] == "NodeConfig"
    assert text.isascii()  # EC2 takes it base64-encoded; nothing needs escaping


def test_default_has_its_own_cluster_placement_group_and_no_reservation(
    default_app: Synthesized,
) -> None:
    lt = _gpu_launch_template(default_app)
    assert "CapacityReservationSpecification" not in lt
    # No reservation: EKS's default update (replacements launch first, so the endpoint keeps
    # its nodes until the new ones are up).
    assert "UpdateConfig" not in _gpu_nodegroup(default_app)
    (pg,) = default_app.resources("GpuNodes", "AWS::EC2::PlacementGroup").values()
    assert pg["Properties"] == {"Strategy": "cluster"}


def test_reservation_in_an_existing_placement_group(variant_app: Synthesized) -> None:
    lt = _gpu_launch_template(variant_app)
    assert lt["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": RESERVATION}
    }
    assert lt["Placement"] == {"GroupName": "pd-cluster-pg"}
    assert variant_app.resources("GpuNodes", "AWS::EC2::PlacementGroup") == {}
    chooser = variant_app.only("GpuNodes", "Custom::GpuAvailabilityZone")["Properties"]
    assert chooser["CapacityReservationId"] == RESERVATION
    assert chooser["PlacementGroupName"] == "pd-cluster-pg"
    assert chooser["InstanceCount"] == "3"
    # A reservation sized for the group has no room for replacements launched first.
    assert _gpu_nodegroup(variant_app)["UpdateConfig"] == {
        "MaxUnavailable": 1,
        "UpdateStrategy": "MINIMAL",
    }


def test_reservation_without_placement_group_drops_the_group_and_warns(
    token_app: Synthesized,
) -> None:
    lt = _gpu_launch_template(token_app)
    assert lt["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": RESERVATION
    }
    assert "Placement" not in lt
    assert token_app.resources("GpuNodes", "AWS::EC2::PlacementGroup") == {}
    warnings = [
        entry.data
        for node in token_app.stage.gpu_nodes.node.find_all()
        for entry in node.node.metadata
        if entry.type == "aws:cdk:warning"
    ]
    assert any("gpuPlacementGroupName" in str(w) for w in warnings)


def test_capacity_watch_runs_beside_the_gpu_node_group(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    resources = default_app.templates["GpuNodes"]["Resources"]
    ((watch_id, watch),) = default_app.resources("GpuNodes", "Custom::GpuCapacityWatch").items()
    ((ng_id, ng),) = default_app.resources("GpuNodes", "AWS::EKS::Nodegroup").items()
    # Neither waits for the other: they start together, and a failing watch rolls back both.
    assert ng_id not in watch.get("DependsOn", [])
    assert watch_id not in resources[ng_id].get("DependsOn", [])
    assert ng_id not in json.dumps(watch["Properties"])
    props = watch["Properties"]
    # The watch knows the group's name before the group exists: both derive it from the AZ.
    assert props["NodegroupName"] == ng["Properties"]["NodegroupName"]
    assert props["ClusterName"] == "ray-llm-multinode"
    assert props["InstanceType"] == "g6.8xlarge"
    assert (props["DesiredSize"], props["CapacityWaitSeconds"]) == ("2", "600")
    assert props["TimeoutSeconds"] == str(30 * 60)
    assert props["CapacityReservationId"] == ""
    lt_id = _gpu_launch_template_id(default_app)
    assert props["Fingerprint"] == {"Fn::GetAtt": [lt_id, "LatestVersionNumber"]}
    variant = variant_app.only("GpuNodes", "Custom::GpuCapacityWatch")["Properties"]
    assert (variant["CapacityWaitSeconds"], variant["TimeoutSeconds"]) == ("300", "1500")
    assert variant["CapacityReservationId"] == RESERVATION


def _gpu_launch_template_id(app: Synthesized) -> str:
    (ng,) = app.resources("GpuNodes", "AWS::EKS::Nodegroup").values()
    return str(ng["Properties"]["LaunchTemplate"]["Id"]["Ref"])
