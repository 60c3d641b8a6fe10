"""The app's one typed configuration: :class:`AppConfig`, read from CDK context, validated, and
passed down to every construct.

Owns every setting of a deployment and what it may be: ``settings`` (the frozen
:class:`AppConfig`, its derived values, how it is built from context), ``parsing`` (context
values as their types), ``limits`` (allowed values, limits, pinned versions and images),
``problems`` (:class:`ConfigError`, the one-line problem, the rule tables' rows),
``validation`` (every rule, in order) with the rules themselves in ``rules_cluster``,
``rules_nodes``, ``rules_model``, ``rules_endpoint`` and ``fit`` (the model against the GPUs,
and the warnings). May import the rest of ``ray_pd_eks``'s data modules; never a construct.

This module is the face the other layers use.
"""

from ray_pd_eks.config.fit import config_warnings, memory_estimate
from ray_pd_eks.config.limits import (
    DLC_REPOSITORY_TAG,
    GPU_NODEGROUP_PREFIX_MAX,
    STAGE_ID,
    WAITER_DEADLINE_MINUTES,
)
from ray_pd_eks.config.problems import CLI_NAME, SETTINGS_SET, ConfigError, set_hint
from ray_pd_eks.config.settings import DEFAULTS, AppConfig

__all__ = [
    "CLI_NAME",
    "DEFAULTS",
    "DLC_REPOSITORY_TAG",
    "GPU_NODEGROUP_PREFIX_MAX",
    "SETTINGS_SET",
    "STAGE_ID",
    "WAITER_DEADLINE_MINUTES",
    "AppConfig",
    "ConfigError",
    "config_warnings",
    "memory_estimate",
    "set_hint",
]
