"""The readiness Lambda's modules (``assets/lambda/readiness/``), loaded once through
``ray_pd_eks.lambda_code`` under the names they import each other by, for the tests that call
into several of them: ``from tests.readiness import checks, kube``."""

from __future__ import annotations

from ray_pd_eks import lambda_code

checks = lambda_code.checks()
handler = lambda_code.handler()
kube = lambda_code.kube()
kv_probe = lambda_code.kv_probe()
kvproof = lambda_code.kvproof()
nixl_logs = lambda_code.nixl_logs()
placement = lambda_code.placement()
properties = lambda_code.properties()
ray_dashboard = lambda_code.ray_dashboard()
steps = lambda_code.steps()
terminal = lambda_code.terminal()
