"""The deploy proves the endpoint works: the readiness check (``readiness``), its KV probe on a
schedule (``kv_probe``) and one chat completion through the load balancer (``endpoint_probe``).

May import ``common``, ``lifecycle``, ``endpoint`` and ``ray_pd_eks``; not ``serving`` or
``network``: the stack hands the check what it needs of them (the RayService's fingerprint, the
metrics port) (tests/test_layers.py).
"""
