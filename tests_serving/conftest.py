"""The serving tier's fixtures: one real plane for the session (the PD app as rendered), and the
API server stand-in in front of it (``proxy_standin.py``).

Run by ``scripts/test-serving.sh`` (which installs ``.venv-serving`` first); ``pytest
tests_serving`` alone skips every test with the reason when the serving venv is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_pd_eks.rehearse.plane import (
    RenderedApp,
    ServingPlane,
    adapt_serve_config,
    available,
)
from tests_serving.proxy_standin import RealPlaneKubeApi
from tests_serving.rendering import app_for

# Engines on 2 busy CPU cores load in 2-5 minutes; a cold first import of vLLM and Torch adds
# minutes more (bytecode written once into .venv-serving).
DEPLOY_TIMEOUT_S = float(os.environ.get("RAY_PD_EKS_SERVING_DEPLOY_TIMEOUT", "900"))
# A negative control, run by hand (docs/serving-tier.md): the config as it was before the
# engine ids were unpinned (``engine_id: prefill|decode``), so the restart test can be seen to
# fail on it.
PIN_ENGINE_IDS = os.environ.get("RAY_PD_EKS_SERVING_PIN_ENGINE_IDS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = available()
    if reason is None:
        return
    for item in items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def app() -> RenderedApp:
    return app_for()


@pytest.fixture(scope="session")
def plane(app: RenderedApp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingPlane]:
    workdir = Path(os.environ.get("RAY_PD_EKS_SERVING_DIR") or tmp_path_factory.mktemp("plane"))
    running = ServingPlane(app, workdir, device="cpu")
    try:
        running.start()
        running.deploy(
            adapt_serve_config(app.serve_config, model_dir=running.model_dir, device="cpu")
        )
        running.wait_running(DEPLOY_TIMEOUT_S)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def kube(app: RenderedApp, plane: ServingPlane) -> Iterator[RealPlaneKubeApi]:
    server = RealPlaneKubeApi(app)
    server.start()
    try:
        yield server
    finally:
        server.close()
