"""Every rule of the configuration, in the order their lines print: a rule that is a table row
(a plain range, choice or form) stands in the list itself; the others are functions of the
``rules_*`` modules and :mod:`ray_pd_eks.config.fit`. A rule must not be decorated (mutation
testing, scripts/mutation.sh, cannot mutate a decorated function).
"""

from __future__ import annotations

from ray_pd_eks.config.fit import model_fit
from ray_pd_eks.config.problems import Rule
from ray_pd_eks.config.rules_cluster import (
    LOG_RETENTION,
    access,
    environment,
    kubernetes,
    names,
    observability,
    software,
)
from ray_pd_eks.config.rules_endpoint import ENDPOINT_LIMITS, endpoint
from ray_pd_eks.config.rules_model import (
    engine,
    model_access,
    model_revision,
    model_source,
    serving,
)
from ray_pd_eks.config.rules_nodes import (
    CAPACITY,
    gpu_az,
    gpu_nodes,
    gpu_storage,
    scaling,
    system_nodes,
)

RULES: tuple[Rule, ...] = (
    environment,
    kubernetes,
    names,
    model_source,
    gpu_nodes,
    scaling,
    gpu_storage,
    *CAPACITY,
    model_access,
    model_revision,
    gpu_az,
    system_nodes,
    software,
    serving,
    engine,
    access,
    endpoint,
    *ENDPOINT_LIMITS,
    LOG_RETENTION,
    observability,
    model_fit,
)
