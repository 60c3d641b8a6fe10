"""The default app's templates are those the committed digests describe (tests/template_digests.py
says why digests, what is masked, and how to refresh them after an intended change)."""

from __future__ import annotations

import json

from tests.synth import Synthesized
from tests.template_digests import DIGESTS, REFRESH, differences, digest, digests


def test_the_default_templates_are_the_ones_the_digests_describe(
    default_app: Synthesized,
) -> None:
    changed = differences(json.loads(DIGESTS.read_text()), digests(default_app.templates))
    assert changed == [], (
        "the default app's templates changed: " + "; ".join(changed[:20]) + ". If intended, "
        f"refresh the digests (`{REFRESH}`) and say why in the commit."
    )


def test_asset_hashes_and_asset_paths_are_masked_but_image_digests_are_not() -> None:
    asset = "5b06c760186c400652626f5a88725a7bb782969dc71e6d3b6d81660ea42705cb"
    other = asset.replace("5b06", "9f11")
    code = {"S3Key": f"{asset}.zip", "Metadata": {"aws:asset:path": f"/a/asset.{asset}"}}
    assert digest(code) == digest(
        {"S3Key": f"{other}.zip", "Metadata": {"aws:asset:path": "/b/lambda/x"}}
    )
    assert digest({"Image": f"repo@sha256:{asset}"}) != digest({"Image": f"repo@sha256:{other}"})


def test_a_change_names_the_entries_that_differ() -> None:
    old = {"Network": {"Resources/Vpc": "a", "Resources/Gone": "b"}, "Old": {"Description": "c"}}
    new = {"Network": {"Resources/Vpc": "A", "Outputs/New": "d"}}
    assert differences(old, new) == [
        "Network Outputs/New: added",
        "Network Resources/Gone: removed",
        "Network Resources/Vpc: changed",
        "Old Description: removed",
    ]
