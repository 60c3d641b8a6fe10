"""What the app deploys, read across every package: every connection (``flows``) and every
identity (``identities``), the tables that docs/flows.md and docs/identities.md are rendered
from and that the tests check both ways against the templates; and every Kubernetes object as
plain YAML for review (``render``, which app.py writes to ``<cdk.out>/rendered/``).

The top of ``pd_constructs``: may import every package here; none imports it
(tests/test_layers.py).
"""
