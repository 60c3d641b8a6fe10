"""The RayService the app renders (defaults plus ``context`` overrides), as ``rehearse`` reads
it from ``cdk.out/rendered/``: the same rendering the deploy applies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_pd_eks.rehearse.plane import RENDERED_RAYSERVICE, RenderedApp, rendered_app


def app_for(context: Mapping[str, Any] | None = None) -> RenderedApp:
    from pd_constructs.inventory.render import rendered_files
    from ray_pd_eks.config import AppConfig
    from tests.synth import cdk_json_context

    config = AppConfig.from_context({**cdk_json_context(), **(context or {})})
    return rendered_app(rendered_files(config)[RENDERED_RAYSERVICE.name])
