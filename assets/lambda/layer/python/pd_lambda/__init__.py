"""Helpers every custom-resource handler of ray-pd-eks shares, shipped once as a Lambda layer.

The layer is this plain folder (``assets/lambda/layer/``, no bundling, so no Docker): Lambda
extracts a layer under ``/opt`` and puts ``/opt/python`` on ``sys.path`` for Python runtimes,
so ``python/pd_lambda/`` is importable as ``pd_lambda`` in every function that carries the
layer (pd_constructs/common/lambda_functions.py, ``SharedHandlerLayer``). The tests and the
project's CLI put ``assets/lambda/layer/python`` on ``sys.path`` the same way
(ray_pd_eks/lambda_code.py).

Standard library only: a handler passes in whatever boto3 client it uses.
"""
