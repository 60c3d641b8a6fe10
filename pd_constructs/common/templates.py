"""Template helpers, re-exported from :mod:`ray_pd_eks.templates`.

They live in the bottom layer because the CLI fills an ``assets/`` template too (the ``bench``
Job) and ``ray_pd_eks`` never imports ``pd_constructs``; constructs keep importing them from here.
"""

from ray_pd_eks.templates import (
    ASSETS,
    TemplateError,
    deep_merge,
    load_yaml,
    placeholders,
    render,
    render_from,
)

__all__ = [
    "ASSETS",
    "TemplateError",
    "deep_merge",
    "load_yaml",
    "placeholders",
    "render",
    "render_from",
]
