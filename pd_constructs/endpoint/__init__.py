"""The application endpoint (``endpoint``): the AWS Load Balancer Controller, the stack's HTTPS
Application Load Balancer in front of the Ray serve service with JWT validation, the token
issuer, the access logs and the rate limit.

May import ``common``, ``network`` (the load balancer's subnets) and ``ray_pd_eks``
(tests/test_layers.py).
"""
