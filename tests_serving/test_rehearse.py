"""``rehearse``'s checks (``ray_pd_eks.rehearse.checks``) on the tier's real plane: every one
passes on the PD app as rendered, with the machine's changes only."""

from __future__ import annotations

from ray_pd_eks.rehearse.checks import rehearse_checks
from ray_pd_eks.rehearse.plane import WORKER_IPS, ServingPlane


def test_every_rehearse_check_passes_on_the_rendered_pd_app(plane: ServingPlane) -> None:
    findings = rehearse_checks(plane)
    assert [(f.check, f.level) for f in findings] == [
        ("serve", "OK"),
        ("placement", "OK"),
        ("models", "OK"),
        ("probe", "OK"),
        ("kv", "OK"),
        ("backend", "OK"),
    ], [f.line() for f in findings]
    texts = {f.check: f.text for f in findings}
    assert texts["placement"] == f"prefill on {WORKER_IPS[0]}, decode on {WORKER_IPS[1]}" or (
        texts["placement"] == f"prefill on {WORKER_IPS[1]}, decode on {WORKER_IPS[0]}"
    )
    assert texts["backend"] == "NIXL backend UCX (workers' logs)"
