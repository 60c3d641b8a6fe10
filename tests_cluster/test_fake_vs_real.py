"""The fake API server (tests/fakes/kube_api.py) against the real one, where both answer: the
same request, the same status code and the same Status message (what the app's KubeClient
reads of the body). A difference found here is fixed in the fake; docs/testing.md lists them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.kube_api import FakeKubeApi
from tests_cluster import handlers
from tests_cluster.conftest import Deployer, bind_admin_cli
from tests_cluster.kube import Cluster

pytest_plugins = ["tests.fakes.fixtures"]


@pytest.fixture(scope="module")
def deployed(deployer: Deployer) -> Cluster:
    deployer.ensure("default")
    return deployer.cluster


def _answer(api: Any, path: str) -> tuple[int, str]:
    """(HTTP status, the Status body's message as the readiness code's KubeClient reads it)."""
    try:
        body = api.get_json(path)
    except handlers.kube.KubeApiError as exc:
        return int(exc.status or 0), str(exc.reason)
    return 200, str(body.get("kind"))


def _fake_client(server: FakeKubeApi) -> Any:
    return handlers.kube.KubeClient(server.url, server.ca_data, lambda: "k8s-aws-v1.t", retries=0)


# (what, the path asked of the real server, of the fake with no RayService). The real
# cluster's RayService is in the app's namespace and Serve is not ready, so a RayService of the
# same name is asked where there is none ("default"), and the Serve proxy where KubeRay has not
# made the Service yet.
CASES = {
    "a RayService that does not exist": (
        "/apis/ray.io/v1/namespaces/default/rayservices/ray-llm",
        "/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm",
    ),
    "the Serve proxy before KubeRay made the Service": (
        "/api/v1/namespaces/inference/services/ray-llm-serve-svc:8000/proxy/v1/models",
        "/api/v1/namespaces/inference/services/ray-llm-serve-svc:8000/proxy/v1/models",
    ),
    "the dashboard proxy before KubeRay made the Service": (
        "/api/v1/namespaces/inference/services/ray-llm-head-svc:8265/proxy/api/serve/applications/",
        "/api/v1/namespaces/inference/services/ray-llm-head-svc:8265/proxy/api/serve/applications/",
    ),
}


@pytest.mark.parametrize("paths", CASES.values(), ids=list(CASES))
def test_the_fake_answers_as_the_real_api_server(
    deployed: Cluster, kube_api: FakeKubeApi, paths: tuple[str, str]
) -> None:
    bind_admin_cli(deployed)
    real = _answer(handlers.client(deployed, "admin-cli"), paths[0])
    kube_api.rayservice = None
    fake = _answer(_fake_client(kube_api), paths[1])
    assert fake == real, f"fake {fake} != real {real}"
