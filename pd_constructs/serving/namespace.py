"""What every namespace our pods run in starts with (the Ray namespace, ``workload``; the
warm-up one, ``warmup``): the Namespace, its NetworkPolicies, the admission policies in force
before its pods, and, when the model needs AWS access, its model-fetch service account."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.serving.model_access import ModelFetchServiceAccount
from ray_pd_eks.config import AppConfig


class PodNamespace(NamedTuple):
    namespace: eks.KubernetesManifest
    network_policies: eks.KubernetesManifest
    admission: eks.KubernetesManifest
    service_account: ModelFetchServiceAccount | None


def pod_namespace(
    scope: Construct,
    *,
    cluster: eks.Cluster,
    config: AppConfig,
    name: str,
    namespace: Mapping[str, Any],
    network_policies: Sequence[Mapping[str, Any]],
    admission: Sequence[Mapping[str, Any]],
) -> PodNamespace:
    """In ``scope``: ``Namespace`` (the manifest ``namespace`` of the namespace ``name``), its
    ``NetworkPolicies`` (after it), ``AdmissionPolicies`` (``admission``, which need no
    namespace) and, when ``config`` needs model access, ``ModelFetch`` (after the namespace)."""
    manifest_cluster = as_icluster(cluster)
    namespace_manifest = eks.KubernetesManifest(
        scope, "Namespace", cluster=manifest_cluster, manifest=[namespace]
    )
    policies = eks.KubernetesManifest(
        scope,
        "NetworkPolicies",
        cluster=manifest_cluster,
        manifest=list(network_policies),
    )
    policies.node.add_dependency(namespace_manifest)
    admission_manifest = eks.KubernetesManifest(
        scope,
        "AdmissionPolicies",
        cluster=manifest_cluster,
        manifest=list(admission),
    )
    service_account: ModelFetchServiceAccount | None = None
    if config.needs_model_access:
        service_account = ModelFetchServiceAccount(
            scope, "ModelFetch", cluster=cluster, config=config, namespace=name
        )
        service_account.node.add_dependency(namespace_manifest)
    return PodNamespace(namespace_manifest, policies, admission_manifest, service_account)
