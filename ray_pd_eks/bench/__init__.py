"""The benchmark: a ``vllm bench serve`` sweep run in the cluster, and its offline report.

``job`` builds the Kubernetes Job and reads its log; ``results`` turns vLLM's result files into
``results.json``; ``report`` writes ``report.md`` and the plots; ``pricing`` prices the GPU
nodes. None of them talks to AWS or Kubernetes except ``pricing.price_from_api``.
"""
