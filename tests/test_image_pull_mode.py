"""How the nodes pull the Ray image: SOCI parallel pull, never lazy loading.

docs/cold-start.md ("Reference: why not SOCI lazy loading") gives the upstream reasons and
keeps the scale-out model without a lazy pull. The ones that live in this repository are
checked here: every node's NodeConfig leaves the snapshotter's config to nodeadm's
`FastImagePull` (which writes parallel mode, and parallel mode skips lazy loading), and the
pinned image is not a SOCI-enabled (`-soci`) image, the only kind that carries a SOCI v2 index.
"""

from __future__ import annotations

from typing import Any

import pytest

from pd_constructs.cluster.cluster import gpu_node_config, node_config
from ray_pd_eks.config import DLC_REPOSITORY_TAG
from tests.synth import ROOT

COLD_START = ROOT / "docs" / "cold-start.md"


@pytest.mark.parametrize(
    "config",
    [node_config(), gpu_node_config(True), gpu_node_config(False)],
    ids=["system", "gpu-nvme", "gpu-ebs"],
)
def test_the_snapshotter_config_is_nodeadms_own(config: dict[str, Any]) -> None:
    """Only the gate: no containerd TOML of ours that could route images to the snapshotter
    some other way (nodeadm's NodeConfig has no setting for the snapshotter itself)."""
    spec = config["spec"]
    assert spec["featureGates"] == {"FastImagePull": True}
    assert "containerd" not in spec
    assert set(spec) <= {"featureGates", "instance"}


def test_the_pinned_image_is_not_a_soci_enabled_image() -> None:
    """DLC publishes its SOCI v2 indexes only in separate `-soci` tags; the docs reason about
    the tag the app pins, by name."""
    assert not DLC_REPOSITORY_TAG.endswith("-soci")
    doc = COLD_START.read_text()
    assert f"`{DLC_REPOSITORY_TAG}` has no such suffix" in doc
    assert "`skipRemoteSnapshotPrepare`" in doc
