"""The Kubernetes YAML the app deploys, written as plain files for review or for applying to an
existing cluster (``helm install -f`` / ``kubectl apply -f``) without CloudFormation.

``app.py`` writes them on every synth to ``<cdk.out>/rendered/``. Where the deploy region is
not configured, the image URI keeps ``${AWS_REGION}`` for ``envsubst``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pd_constructs.cluster.cluster import gpu_node_config
from pd_constructs.common.helm import (
    EFA_DEVICE_PLUGIN,
    EFA_DEVICE_PLUGIN_IMAGE_PATH,
    NVIDIA_DEVICE_PLUGIN,
    HelmRelease,
)
from pd_constructs.network.network_policy import (
    render_ray_network_policies,
    render_warmup_network_policies,
)
from pd_constructs.observability.observability import render_podmonitors
from pd_constructs.serving.warmup import (
    render_image_prepull,
    render_model_prefetch,
    render_warmup_namespace,
)
from pd_constructs.serving.workload import kuberay_values, render_namespace, render_rayservice
from ray_pd_eks.config import AppConfig
from ray_pd_eks.eks_images import EKS_IMAGE_REGISTRIES


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the serve config) as readable ``|`` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(document: Any) -> str:
    if isinstance(document, list):  # several objects in one file
        return "---\n".join(dump(d) for d in document)
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100)


def _helm_header(release: HelmRelease) -> str:
    return (
        f"# helm upgrade --install {release.release} {release.chart} --repo {release.repository}"
        f" --version {release.version} --namespace {release.namespace} --create-namespace"
        f" -f {release.release}-values.yaml\n"
    )


def rendered_files(config: AppConfig) -> dict[str, str]:
    """File name -> YAML text, in the order they are applied."""
    region = config.region or "${AWS_REGION}"
    image = config.image_uri(region)
    efa_overrides: dict[str, Any] = {"supportedInstanceLabels": {"values": [config.gpu_node_type]}}
    if config.region:  # without one, the chart's default (us-west-2's registry) stays
        registry = EKS_IMAGE_REGISTRIES[config.region]
        efa_overrides["image"] = {"repository": f"{registry}/{EFA_DEVICE_PLUGIN_IMAGE_PATH}"}
    efa = EFA_DEVICE_PLUGIN.values(efa_overrides)
    documents: list[tuple[str, str, Any]] = []
    node_config = gpu_node_config(config.uses_local_nvme)
    if node_config:
        documents.append(
            (
                "05-gpu-node-config.yaml",
                "# nodeadm NodeConfig: one part of the GPU launch template's MIME user data\n",
                node_config,
            )
        )
    documents += [
        ("10-aws-efa-k8s-device-plugin-values.yaml", _helm_header(EFA_DEVICE_PLUGIN), efa),
        (
            "11-nvidia-device-plugin-values.yaml",
            _helm_header(NVIDIA_DEVICE_PLUGIN),
            NVIDIA_DEVICE_PLUGIN.values(),
        ),
        (
            "12-node-warmup.yaml",
            "# kubectl apply -f 12-node-warmup.yaml (with S3 staging or a token, the pods also "
            "need the model-fetch service account and its Pod Identity association)\n",
            [
                render_warmup_namespace(),
                *render_warmup_network_policies(config),
                render_image_prepull(image=image),
                render_model_prefetch(config, region=region),
            ],
        ),
        ("20-namespace.yaml", "# kubectl apply -f 20-namespace.yaml\n", render_namespace(config)),
        (
            "21-kuberay-operator-values.yaml",
            "# helm upgrade --install kuberay-operator kuberay-operator --repo "
            f"https://ray-project.github.io/kuberay-helm/ --version {config.kuberay_version} "
            "--namespace kuberay-system --create-namespace -f 21-kuberay-operator-values.yaml\n",
            kuberay_values(config),
        ),
        (
            "22-network-policies.yaml",
            "# kubectl apply -f 22-network-policies.yaml (enforced only with the VPC CNI's "
            "network policies on: the vpc-cni add-on's enableNetworkPolicy)\n",
            render_ray_network_policies(config),
        ),
        (
            "30-rayservice.yaml",
            "# kubectl apply -f 30-rayservice.yaml\n"
            + (
                "# First create the Ray token Secret it names (authOptions.secretName): kubectl "
                f"create secret generic {config.ray_auth_secret_name} -n {config.namespace} "
                '--from-literal=auth_token="$(openssl rand -base64 32)"\n'
            )
            + (
                "# The pods run as service account model-fetch: create it with a Pod Identity "
                "association to a role that may read the staged model or the token.\n"
                if config.needs_model_access
                else ""
            ),
            render_rayservice(config, image=image, region=region),
        ),
    ]
    if config.observability_enabled:
        documents.append(
            (
                "40-podmonitors.yaml",
                "# kubectl apply -f 40-podmonitors.yaml (needs the amazon-cloudwatch-observability"
                " add-on >= v8.0.0, or prometheus-operator's CRDs)\n",
                render_podmonitors(config),
            )
        )
    banner = "# Rendered by ray-pd-eks from the CDK context at synth time. Do not edit.\n"
    return {name: banner + header + dump(doc) for name, header, doc in documents}


def write_rendered(config: AppConfig, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered_files(config).items():
        path = outdir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
