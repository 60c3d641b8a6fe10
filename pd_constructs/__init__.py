"""Reusable constructs of ray-pd-eks, one package per concern (docs/architecture.md, "Layout and
choices"): ``common`` (shared helpers) at the bottom, then ``lifecycle`` (waiters and deploy
guards), ``network``, ``cluster``, ``observability``, ``endpoint``, ``serving``, ``readiness``,
and ``inventory`` (the tables and rendered YAML that read across all of them) on top. Each
package's docstring says what it owns and what it may import; tests/test_layers.py holds them to
it.

Named ``pd_constructs`` rather than ``constructs``: a top-level package called ``constructs``
would shadow the ``constructs`` library that every CDK app imports (``from constructs import
Construct``).
"""
