"""Metrics, dashboard, alarms and logs on AWS-managed parts (``observability``), and the PromQL
of the dashboard and the alarms as data (``promql``).

May import ``common`` and ``ray_pd_eks`` only (tests/test_layers.py).
"""
