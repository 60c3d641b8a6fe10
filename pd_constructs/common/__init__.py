"""What every construct package shares: cdk-nag acknowledgments (``nag``), the app's own Lambda
functions and their shared layer (``lambda_functions``), the template helpers (``templates``),
the Helm charts pinned in one place (``helm``), EKS Pod Identity trust (``pod_identity``), the
KMS key of fixed-name log groups (``logs_key``), the namespaces besides the Ray one
(``namespaces``) and typing glue for ``aws_eks_v2`` (``eks_types``).

The bottom of ``pd_constructs``: may import ``ray_pd_eks`` only, no other package here
(tests/test_layers.py).
"""
