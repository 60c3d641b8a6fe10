"""The Lambdas' modules, imported by path so the tool and the Lambdas share one copy.

``assets/lambda/readiness/`` is a Lambda asset, not a package: in the Lambda its files are
top-level modules (``import kube``). Copying them into this package would let the two drift, so
``kube``, ``checks`` and the handler's other siblings are loaded from the repository under those
same top-level names, each after the siblings it imports, because they import each other by
those names. A module of that name from another file (some
unrelated ``kube``) is never silently reused: that is an error. ``handler`` itself gets a
private name, since every Lambda asset has a ``handler.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LAMBDA_DIR = Path(__file__).resolve().parent.parent / "assets" / "lambda"
READINESS_DIR = LAMBDA_DIR / "readiness"
# The shared helpers' layer (``pd_lambda``): in a Lambda under /opt/python, here on sys.path
# the same way, so every handler imports it as it does in the Lambda.
LAYER_PYTHON_DIR = LAMBDA_DIR / "layer" / "python"


def use_shared_layer() -> None:
    """Put the shared layer's ``python/`` folder on ``sys.path`` (once)."""
    if str(LAYER_PYTHON_DIR) not in sys.path:
        sys.path.insert(0, str(LAYER_PYTHON_DIR))


use_shared_layer()


def _load(name: str, module_name: str | None = None, folder: Path = READINESS_DIR) -> ModuleType:
    path = folder / f"{name}.py"
    name = module_name or name
    loaded = sys.modules.get(name)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        if origin and Path(origin).resolve() == path:
            return loaded
        raise ImportError(f"a different module named '{name}' is already imported ({origin})")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: its siblings import it by this name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# The siblings each readiness module imports, which must be loaded before it (under their own
# names, as in the Lambda).
SIBLINGS: dict[str, tuple[str, ...]] = {
    "placement": ("checks",),
    "ray_dashboard": ("kube",),
    "nixl_logs": ("kube", "kvproof", "placement", "ray_dashboard"),
    "terminal": ("checks", "properties"),
    "kv_probe": ("kube", "kvproof", "placement", "terminal"),
    "report": ("nixl_logs", "properties"),
    "steps": ("kv_probe", "report"),
    "handler": ("steps",),
    "ray_token": ("kube", "ray_dashboard"),
    "recreate": ("kube", "properties"),
}


def _readiness(name: str, module_name: str | None = None) -> ModuleType:
    """``assets/lambda/readiness/<name>.py``, after the siblings it imports (``SIBLINGS``)."""
    for sibling in SIBLINGS.get(name, ()):
        _readiness(sibling)
    return _load(name, module_name)


def kube() -> ModuleType:
    """``assets/lambda/readiness/kube.py``: KubeClient, eks_token, errors."""
    return _readiness("kube")


def ray_dashboard() -> ModuleType:
    """``assets/lambda/readiness/ray_dashboard.py``: RayDashboard (through the API server's
    proxy) and the Ray token's Secret."""
    return _readiness("ray_dashboard")


def checks() -> ModuleType:
    """``assets/lambda/readiness/checks.py``: pure verdicts on Kubernetes and Ray JSON."""
    return _readiness("checks")


def kvproof() -> ModuleType:
    """``assets/lambda/readiness/kvproof.py``: the KV integrity probe and the NIXL counters."""
    return _readiness("kvproof")


def placement() -> ModuleType:
    """``assets/lambda/readiness/placement.py``: where the engines run (Serve replicas, pods)."""
    return _readiness("placement")


def nixl_logs() -> ModuleType:
    """``assets/lambda/readiness/nixl_logs.py``: the NIXL backend and libfabric provider from
    the engines' logs (which files, the reader, the verdict)."""
    return _readiness("nixl_logs")


def properties() -> ModuleType:
    """``assets/lambda/readiness/properties.py``: the check's ``Props`` and ``ReadinessError``."""
    return _readiness("properties")


def terminal() -> ModuleType:
    """``assets/lambda/readiness/terminal.py``: the states that waiting cannot fix."""
    return _readiness("terminal")


def kv_probe() -> ModuleType:
    """``assets/lambda/readiness/kv_probe.py``: one KV integrity probe with the NIXL counters
    around it."""
    return _readiness("kv_probe")


def report() -> ModuleType:
    """``assets/lambda/readiness/report.py``: the check's Data and the rollback answer."""
    return _readiness("report")


def steps() -> ModuleType:
    """``assets/lambda/readiness/steps.py``: one poll's checks, in order."""
    return _readiness("steps")


def handler() -> ModuleType:
    """``assets/lambda/readiness/handler.py``: the readiness check's entry points (the Provider
    contract and the scheduled KV probe)."""
    return _readiness("handler", "ray_pd_eks_readiness_handler")


def gpu_az_handler() -> ModuleType:
    """``assets/lambda/gpu_az/handler.py``: the GPU AZ chooser and its capacity-reservation
    checks, which ``preflight`` runs before a deploy."""
    return _load("handler", "ray_pd_eks_gpu_az_handler", LAMBDA_DIR / "gpu_az")


def ray_token() -> ModuleType:
    """``assets/lambda/readiness/ray_token.py``: the Ray token writer (custom resource)."""
    return _readiness("ray_token", "ray_pd_eks_ray_token")


def recreate() -> ModuleType:
    """``assets/lambda/readiness/recreate.py``: the RayService recreate on a cluster change."""
    return _readiness("recreate", "ray_pd_eks_recreate_handler")
