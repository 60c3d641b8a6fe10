"""Reusable constructs of ray-pd-eks.

Named ``pd_constructs`` rather than ``constructs``: a top-level package called ``constructs``
would shadow the ``constructs`` library that every CDK app imports (``from constructs import
Construct``).
"""
