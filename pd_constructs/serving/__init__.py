"""What serves the model on the cluster: the KubeRay operator and the prefill/decode RayService
(``workload``), node warm-up (``warmup``), the admission policies of our pods and the GPU nodes
(``admission``), what each namespace of our pods starts with (``namespace``), how pods get the
model (``model_access``), the Ray token (``ray_auth``) and the images pinned to digests
(``images``).

May import ``common``, ``lifecycle``, ``network`` (the Ray ports and NetworkPolicies) and
``ray_pd_eks``; not ``cluster``, ``endpoint``, ``observability`` or ``readiness``
(tests/test_layers.py).
"""
