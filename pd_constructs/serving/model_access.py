"""How pods get the model: the node's model cache, S3 staging, and the Hugging Face token.

Pure rendering (config in, Kubernetes objects out) for the containers and volumes that the Ray
pods and the prefetch DaemonSet share, and :class:`ModelFetchServiceAccount`, the one identity
that may read the staged model or the token (EKS Pod Identity, read-only, exactly that prefix or
that secret). Nothing here is created unless ``modelS3Uri`` or ``hfTokenSecretArn`` is set.
"""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import Aws
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.nag import acknowledge
from pd_constructs.common.pod_identity import pod_identity_service_account
from pd_constructs.common.templates import ASSETS, render
from ray_pd_eks.config import AppConfig
from ray_pd_eks.trust import MODEL_ACCESS_TAG_KEY, MODEL_ACCESS_TAG_VALUE

MODEL_CACHE = "/data/model-cache"  # where pods mount the node's model cache
HF_SUBDIR = "hf"  # the Hugging Face cache inside it
HF_HOME = f"{MODEL_CACHE}/{HF_SUBDIR}"
VLLM_CACHE_ROOT = f"{MODEL_CACHE}/vllm"
TOKEN_DIR = "/var/run/secrets/huggingface"
SERVICE_ACCOUNT = "model-fetch"
PREFETCH_REQUIREMENTS = "prefetch/hf-requirements.txt"  # under assets/
# What the prefetch downloads from Hugging Face: config, tokenizer, chat template and the
# safetensors weights (not the duplicate .bin/.pt/.gguf files some repositories also carry).
ALLOW_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
# The head needs config and tokenizer only; weights stay on the GPU nodes.
CONFIG_ONLY_SYNC_ARGS = " ".join(
    f"--exclude *.{ext}" for ext in ("safetensors", "bin", "pt", "pth", "gguf")
)


def serve_model_source(config: AppConfig) -> str:
    """``model_source`` for the engines: the staged copy when weights come from S3."""
    if config.model_s3_uri:
        return f"{MODEL_CACHE}/{config.staged_model_dir}"
    return config.model_source


def model_env(config: AppConfig) -> list[dict[str, Any]]:
    """Environment of every Ray container that may load the model or its tokenizer."""
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": HF_HOME}]
    if config.model_s3_uri:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    if config.hf_token_secret_arn:
        env.append({"name": "HF_TOKEN_PATH", "value": f"{TOKEN_DIR}/token"})
    return env


def node_cache_volume(config: AppConfig) -> dict[str, Any]:
    """The node's model cache: on the NVMe RAID0 (or the root volume without NVMe). It outlives
    pods, so a restarted worker loads from disk and page cache; it goes with the node."""
    return {
        "name": "model-cache",
        "hostPath": {"path": config.node_cache_dir, "type": "DirectoryOrCreate"},
    }


def token_volume() -> dict[str, Any]:
    return {"name": "hf-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def token_mount() -> dict[str, Any]:
    return {"name": "hf-token", "mountPath": TOKEN_DIR, "readOnly": True}


def cache_mount() -> dict[str, Any]:
    return {"name": "model-cache", "mountPath": MODEL_CACHE}


def _secret_region(arn: str) -> str:
    return arn.split(":")[3]


def hf_token_container(config: AppConfig, *, aws_cli_image: str) -> dict[str, Any]:
    return dict(
        render(
            "manifests/containers/hf-token.yaml",
            {
                "AWS_CLI_IMAGE": aws_cli_image,
                "SECRET_ARN": config.hf_token_secret_arn,
                "SECRET_REGION": _secret_region(config.hf_token_secret_arn),
                "TOKEN_DIR": TOKEN_DIR,
            },
        )
    )


def stage_container(
    config: AppConfig, *, region: str, config_only: bool, aws_cli_image: str
) -> dict[str, Any]:
    """``aws s3 sync`` of the model into the cache; ``region`` may be a CloudFormation token."""
    resources = (
        {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
        if config_only
        else {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    )
    uri = config.model_s3_uri if config.model_s3_uri.endswith("/") else config.model_s3_uri + "/"
    return dict(
        render(
            "manifests/containers/stage-from-s3.yaml",
            {
                "AWS_CLI_IMAGE": aws_cli_image,
                "MODEL_S3_URI": uri,
                "BUCKET": config.model_s3_bucket,
                "PREFIX": config.model_s3_prefix,
                "BUCKET_OWNER": config.model_s3_bucket_owner,
                "DEST": f"{MODEL_CACHE}/{config.staged_model_dir}",
                "SUBDIR": config.staged_model_dir,
                "REGION": region,
                "SYNC_ARGS": CONFIG_ONLY_SYNC_ARGS if config_only else "",
                "RESOURCES": resources,
            },
        )
    )


def prefetch_requirements() -> str:
    """The pinned, hashed requirements the prefetch installs (comments dropped)."""
    text = (ASSETS / PREFETCH_REQUIREMENTS).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if line and not line.startswith("#"))


def prefetch_container(config: AppConfig, *, image: str) -> dict[str, Any]:
    """Hugging Face download into the cache in ``image`` (``prefetchImage``, small), with the
    pinned ``huggingface_hub`` of :func:`prefetch_requirements`."""
    container = dict(
        render(
            "manifests/containers/prefetch-from-hf.yaml",
            {
                "IMAGE": image,
                "REQUIREMENTS": prefetch_requirements(),
                "MODEL_SOURCE": config.model_source,
                "MODEL_REVISION": config.model_revision,
                "HF_HOME": HF_HOME,
                "HF_SUBDIR": HF_SUBDIR,
                "ALLOW_PATTERNS": ",".join(ALLOW_PATTERNS),
            },
        )
    )
    if config.hf_token_secret_arn:
        container["env"].append({"name": "HF_TOKEN_PATH", "value": f"{TOKEN_DIR}/token"})
        container["volumeMounts"].append(token_mount())
    return container


def fetch_init_containers(
    config: AppConfig,
    *,
    region: str,
    config_only: bool = False,
    aws_cli_image: str | None = None,
) -> list[dict[str, Any]]:
    """Init containers of a Ray pod: the token first, then the staged copy (never both).
    ``aws_cli_image`` defaults to ``awsCliImage`` as configured."""
    cli = aws_cli_image or config.aws_cli_image
    containers: list[dict[str, Any]] = []
    if config.hf_token_secret_arn:
        containers.append(hf_token_container(config, aws_cli_image=cli))
    if config.model_s3_uri:
        containers.append(
            stage_container(config, region=region, config_only=config_only, aws_cli_image=cli)
        )
    return containers


# EKS Pod Identity's admission webhook (aws/amazon-eks-pod-identity-webhook) gives every
# container of a pod using an associated service account the credentials' environment
# (AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) and the projected
# token's mount, except the containers this pod annotation names (its "container credentials"
# path honours it like the IRSA one; see its testdata/containercredentials/rawPodSkip).
SKIP_CONTAINERS_ANNOTATION = "eks.amazonaws.com/skip-containers"
# The init containers that call AWS; every other container of their pods is skipped.
AWS_CONTAINERS = frozenset({"hf-token", "stage-model"})


def credential_annotations(config: AppConfig, other_containers: list[str]) -> dict[str, str]:
    """Pod annotations that keep Pod Identity credentials out of ``other_containers`` (every
    container but the AWS init containers); none without model access."""
    if not config.needs_model_access:
        return {}
    skipped = [name for name in other_containers if name not in AWS_CONTAINERS]
    return {SKIP_CONTAINERS_ANNOTATION: ",".join(skipped)}


def service_account_name(config: AppConfig) -> str:
    """The pods' service account: the Pod Identity one only when AWS access is needed."""
    return SERVICE_ACCOUNT if config.needs_model_access else "default"


def bucket_owner(config: AppConfig) -> str:
    """The account that must own the staging bucket: ``modelS3BucketOwner`` or this one."""
    return config.model_s3_bucket_owner or Aws.ACCOUNT_ID


def model_access_statements(config: AppConfig) -> list[iam.PolicyStatement]:
    """Read-only access to exactly the staged prefix and/or the token secret. S3 access holds
    only while the bucket belongs to :func:`bucket_owner` (``s3:ResourceAccount``): a bucket
    of the same name in another account matches the ARNs but not the condition. Objects and
    the secret are readable only while they carry :data:`MODEL_ACCESS_TAG_KEY` =
    ``true`` (listing the prefix shows names only and needs no tag)."""
    statements = []
    if config.model_s3_uri:
        bucket, prefix = config.model_s3_bucket, config.model_s3_prefix
        bucket_arn = f"arn:{Aws.PARTITION}:s3:::{bucket}"
        owner = {"s3:ResourceAccount": bucket_owner(config)}
        statements += [
            iam.PolicyStatement(
                sid="ReadStagedModel",
                actions=["s3:GetObject"],
                resources=[f"{bucket_arn}/{prefix}/*"],
                conditions={
                    "StringEquals": {
                        **owner,
                        f"s3:ExistingObjectTag/{MODEL_ACCESS_TAG_KEY}": MODEL_ACCESS_TAG_VALUE,
                    }
                },
            ),
            iam.PolicyStatement(
                sid="ListStagedModel",
                actions=["s3:ListBucket"],
                resources=[bucket_arn],
                conditions={
                    "StringLike": {"s3:prefix": [f"{prefix}/*", prefix]},
                    "StringEquals": owner,
                },
            ),
        ]
    if config.hf_token_secret_arn:
        statements.append(
            iam.PolicyStatement(
                sid="ReadHuggingFaceToken",
                actions=["secretsmanager:GetSecretValue"],
                resources=[config.hf_token_secret_resource],
                conditions={
                    "StringEquals": {
                        f"secretsmanager:ResourceTag/{MODEL_ACCESS_TAG_KEY}": (
                            MODEL_ACCESS_TAG_VALUE
                        )
                    }
                },
            )
        )
    return statements


def iam5_findings(config: AppConfig) -> list[str]:
    """The cdk-nag IAM5 findings the statements above raise (each a scoped wildcard)."""
    findings = []
    if config.model_s3_uri:
        findings.append(
            f"Resource::arn:<AWS::Partition>:s3:::{config.model_s3_bucket}/"
            f"{config.model_s3_prefix}/*"
        )
    resource = config.hf_token_secret_resource
    if resource.endswith("-??????"):
        findings.append(
            f"Resource::{re.sub(r'^arn:aws[a-z-]*:', 'arn:<AWS::Partition>:', resource)}"
        )
    return findings


class ModelFetchServiceAccount(Construct):
    """Service account ``model-fetch`` in ``namespace`` with its own IAM role through EKS Pod
    Identity (aws-cdk-lib adds the ``eks-pod-identity-agent`` add-on once per cluster), allowed
    only what :func:`model_access_statements` lists."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        namespace: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.service_account = pod_identity_service_account(
            self,
            construct_id="Resource",
            cluster=cluster,
            name=SERVICE_ACCOUNT,
            namespace=namespace,
        )
        for statement in model_access_statements(config):
            self.service_account.add_to_principal_policy(statement)
        findings = iam5_findings(config)
        if findings:
            acknowledge(
                self.service_account.role,
                "AwsSolutions-IAM5",
                "Read-only: objects under the configured model prefix (the model is many "
                "files), or a secret named without its random suffix (Secrets Manager's "
                "documented '-??????' form for a partial ARN).",
                findings=findings,
            )
