"""Namespaces the app creates besides the configurable Ray namespace (``namespace``)."""

from __future__ import annotations

# The node warm-up DaemonSets (pd_constructs/serving/warmup.py).
WARMUP_NAMESPACE = "ray-pd-eks-warmup"
# The KubeRay operator's Helm release (pd_constructs/common/helm.py).
OPERATOR_NAMESPACE = "kuberay-system"
