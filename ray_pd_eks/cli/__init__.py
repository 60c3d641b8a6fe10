"""The operations tool of the app: ``ray-pd-eks <command>`` (or ``python -m ray_pd_eks``).

One module per command (``preflight``, ``status``, ``endpoint``, ``smoke``, ``efa_check``), each
with ``NAME``, ``HELP``, ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(app) -> exit code``;
``main`` wires them into argparse. The Kubernetes client is the readiness Lambda's own
(:mod:`ray_pd_eks.lambda_code`), so the deploy-time check and this tool cannot drift apart.
"""
