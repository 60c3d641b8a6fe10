"""Who reaches what: the VPC, its subnets, NAT egress and the GPU subnet with the construct that
chooses its AZ (``network``), and the Kubernetes NetworkPolicies with the Ray ports they and the
RayService are rendered from (``network_policy``).

May import ``common``, ``lifecycle`` and ``ray_pd_eks``; not ``cluster``, ``serving`` or the
other packages that build on it (tests/test_layers.py).
"""
