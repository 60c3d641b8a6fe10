"""The integration tier's fixtures: the running local cluster (scripts/local-cluster.sh up, as
scripts/test-cluster.sh starts it) and a deployer that puts one variant at a time on it:
that variant's KWOK nodes, then its manifests by server-side apply in deploy order."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests_cluster import handlers, nodes, variants
from tests_cluster.kube import Cluster, KubectlError, tokens, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "tests" / "schemas"
# CRDs of the charts and add-ons the app's manifests use, as the repository pins them.
THIRD_PARTY_CRDS = (
    SCHEMAS / "monitoring.coreos.com_podmonitors.yaml",
    SCHEMAS / "elbv2.k8s.aws_targetgroupbindings-v3.5.0.yaml",
)


@dataclass
class Applied:
    """What the API server answered to one variant's applies."""

    variant: str
    warnings: dict[str, list[str]] = field(default_factory=dict)  # logical id -> warnings
    handlers: dict[str, str] = field(default_factory=dict)  # custom resource type -> result


class Deployer:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.current: Applied | None = None
        self.generation = 0
        self.handlers = {
            "Custom::RayAuthToken": handlers.write_token,
            "Custom::RayServiceRecreate": handlers.recreate_until_done,
        }

    def ensure(self, variant: str) -> Applied:
        if self.current is not None and self.current.variant == variant:
            return self.current
        self.clear(variant)
        app = variants.app(variant)
        self.generation += 1
        created = nodes.node_objects(app, suffix=f"-d{self.generation}")
        self.cluster.apply(created, manager="kwok-nodes")
        self._wait_nodes_ready({n["metadata"]["name"] for n in created})
        applied = Applied(variant)
        for step in variants.steps(app):
            if step.kind != variants.MANIFEST:
                assert step.properties is not None
                run = self.handlers.get(step.kind)
                if run is not None:
                    applied.handlers[step.kind] = run(self.cluster, step.properties)
                continue
            done = self.cluster.apply(step.objects, manager="cdk-kubectl-provider")
            warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning")]
            if warnings:
                applied.warnings[step.logical_id] = warnings
        self.current = applied
        return applied

    def _wait_nodes_ready(self, names: set[str]) -> None:
        def ready() -> bool:
            found = {
                n["metadata"]["name"]
                for n in self.cluster.items("nodes")
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            }
            return names <= found

        try:
            wait_until("KWOK to make the nodes Ready", ready, timeout_s=60)
        except AssertionError as e:
            log = (self.cluster.state / "kwok.log").read_text().splitlines()[-5:]
            raise AssertionError(f"{e}; KWOK's last log lines: {log}") from None

    def clear(self, variant: str | None = None) -> None:
        """Remove the previous variant (or, on a cluster this session has not deployed to yet,
        whatever ``variant`` would find): its namespaces (and so every pod and the RayService,
        through the namespace controller and the garbage collector) and its nodes."""
        left = self.current.variant if self.current is not None else variant
        if left is None:
            return
        app = variants.app(left)
        namespaces = sorted({o["metadata"]["name"] for o in variants.of_kind(app, "Namespace")})
        cluster_scoped = [
            o
            for o in variants.objects(app)
            if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy")
            or o["kind"] == "ValidatingAdmissionPolicyBinding"
        ]
        if cluster_scoped:  # one kubectl for all of them
            self.cluster.kubectl(
                "delete",
                *(f"{o['kind']}/{o['metadata']['name']}" for o in cluster_scoped),
                "--ignore-not-found",
                "--wait=false",
            )
        self.cluster.kubectl(
            "delete", "namespace", *namespaces, "--ignore-not-found", "--wait=false"
        )
        # The namespace controller retries with a growing backoff while pods remain; removing
        # them at once (KWOK has no processes to stop) keeps a variant switch to seconds.
        for namespace in namespaces:
            self.cluster.kubectl(
                "delete",
                "pods",
                "--all",
                "-n",
                namespace,
                "--grace-period=0",
                "--force",
                "--ignore-not-found",
                "--wait=false",
                check=False,
            )
        wait_until(
            f"namespaces {namespaces} to be deleted",
            lambda: (
                not self.cluster.kubectl(
                    "get", "namespace", *namespaces, "--ignore-not-found", "-o", "name"
                ).stdout.strip()
            ),
            timeout_s=90,
        )
        self.cluster.kubectl("delete", "nodes", "-l", "type=kwok", "--wait=false")
        self.current = None


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    try:
        found = Cluster.from_environment()
        found.kubectl("get", "--raw", "/readyz")
    except (OSError, KubectlError, subprocess.CalledProcessError, KeyError) as e:
        pytest.fail(
            f"no local cluster answers ({e}); run the tier with ./scripts/test-cluster.sh, "
            "or start one with ./scripts/local-cluster.sh up",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="session")
def platform(cluster: Cluster) -> Cluster:
    """What the cluster has before the app: the pinned third-party CRDs and the add-on
    DaemonSets of every node (nodes.py)."""
    for crd in THIRD_PARTY_CRDS:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "30s", "crd", "--all")
    gpu_label = {"role": "gpu-worker"}
    cluster.apply(nodes.daemonset_objects(gpu_label), manager="eks-addons")
    return cluster


@pytest.fixture(scope="session")
def deployer(platform: Cluster) -> Iterator[Deployer]:
    found = Deployer(platform)
    yield found


ADMIN_CLI_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "eks-access-policy-cluster-admin"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "cluster-admin",
    },
    "subjects": [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": tokens()["admin-cli"].user,
        }
    ],
}


def bind_admin_cli(cluster: Cluster) -> str:
    """AmazonEKSClusterAdminPolicy, the access policy of adminPrincipalArns, as RBAC (EKS
    documents it as cluster-admin's rules); returns the admin principal's user name."""
    cluster.apply([ADMIN_CLI_BINDING], manager="tier")
    return str(tokens()["admin-cli"].user)


def pods(cluster: Cluster, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods", "-n", namespace]
    if selector:
        args += ["-l", selector]
    return cluster.items(*args)


def events(cluster: Cluster, namespace: str) -> list[str]:
    return [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: "
        f"{e.get('message', '')}"
        for e in cluster.items("events", "-n", namespace)
    ]


def dump(value: Any) -> str:
    return json.dumps(value, indent=1)[:3000]
