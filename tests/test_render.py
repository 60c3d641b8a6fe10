"""Rendered Kubernetes YAML for review or for applying without CloudFormation."""

from __future__ import annotations

from pathlib import Path

import yaml

from pd_constructs.inventory.render import rendered_files, write_rendered
from pd_constructs.serving.workload import render_rayservice
from ray_pd_eks.config import DEFAULTS


def test_files_in_apply_order_and_each_says_how_to_apply() -> None:
    files = rendered_files(DEFAULTS)
    assert list(files) == [
        "05-gpu-node-config.yaml",
        "10-aws-efa-k8s-device-plugin-values.yaml",
        "11-nvidia-device-plugin-values.yaml",
        "12-node-warmup.yaml",
        "20-namespace.yaml",
        "21-kuberay-operator-values.yaml",
        "22-network-policies.yaml",
        "30-rayservice.yaml",
        "40-podmonitors.yaml",
    ]
    assert "--version v0.5.30" in files["10-aws-efa-k8s-device-plugin-values.yaml"]
    assert "--version 1.7.0" in files["21-kuberay-operator-values.yaml"]
    assert "kubectl apply -f 30-rayservice.yaml" in files["30-rayservice.yaml"]
    assert (
        "kubectl create secret generic ray-llm-ray-token -n inference "
        '--from-literal=auth_token="$(openssl rand -base64 32)"'
    ) in files["30-rayservice.yaml"]
    warmup = list(yaml.safe_load_all(files["12-node-warmup.yaml"]))
    assert [d["kind"] for d in warmup] == ["Namespace", "NetworkPolicy", "DaemonSet", "DaemonSet"]
    policies = list(yaml.safe_load_all(files["22-network-policies.yaml"]))
    assert {d["kind"] for d in policies} == {"NetworkPolicy"}
    assert policies[0]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    node_config = yaml.safe_load(files["05-gpu-node-config.yaml"])
    assert node_config["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}
    assert node_config["spec"]["featureGates"] == {"FastImagePull": True}
    ebs = rendered_files(DEFAULTS.with_overrides({"gpuLocalStorage": "none"}))
    assert "localStorage" not in yaml.safe_load(ebs["05-gpu-node-config.yaml"])["spec"]
    monitors = list(yaml.safe_load_all(files["40-podmonitors.yaml"]))
    assert [m["kind"] for m in monitors] == ["PodMonitor", "PodMonitor"]
    assert "40-podmonitors.yaml" not in rendered_files(
        DEFAULTS.with_overrides({"observability": "none"})
    )


def test_rayservice_round_trips_and_keeps_the_region_for_envsubst() -> None:
    text = rendered_files(DEFAULTS)["30-rayservice.yaml"]
    assert yaml.safe_load(text) == render_rayservice(
        DEFAULTS, image=DEFAULTS.image_uri("${AWS_REGION}")
    )
    assert "serveConfigV2: |" in text  # readable block, not an escaped string


def test_configured_region_is_filled_in(tmp_path: Path) -> None:
    config = DEFAULTS.with_overrides({"region": "eu-west-1"})
    paths = write_rendered(config, tmp_path / "rendered")
    text = (tmp_path / "rendered" / "30-rayservice.yaml").read_text()
    assert "763104351884.dkr.ecr.eu-west-1.amazonaws.com/ray:serve-llm-cuda-v1.0" in text
    assert [p.name for p in paths][-2:] == ["30-rayservice.yaml", "40-podmonitors.yaml"]


def test_cdk_synth_writes_the_rendered_files_next_to_the_templates(tmp_path: Path) -> None:
    import aws_cdk as cdk

    import app as app_module

    app_module.main(cdk.App(outdir=str(tmp_path), context={"maxModelLen": 8192}))
    text = (tmp_path / "rendered" / "30-rayservice.yaml").read_text()
    assert "max_model_len: 8192" in text
    assert any(tmp_path.glob("assembly-RayPdEks/*Workload*.template.json"))


def test_rendered_pods_needing_aws_access_say_which_service_account() -> None:
    assert "model-fetch" not in rendered_files(DEFAULTS)["30-rayservice.yaml"]
    staged = DEFAULTS.with_overrides({"modelS3Uri": "s3://models/qwen/Qwen3.5-9B"})
    text = rendered_files(staged)["30-rayservice.yaml"]
    assert "# The pods run as service account model-fetch" in text
    assert (
        yaml.safe_load(text)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
            "serviceAccountName"
        ]
        == "model-fetch"
    )
