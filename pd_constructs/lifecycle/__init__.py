"""Custom resources that order, guard and wait on the stacks' deploy, update, rollback and
delete, and the waiter shapes they share: the logged ``Provider`` waiter (``waiter``), the one
shape of every custom resource that calls the Kubernetes API (``kubernetes_waiter``), the
permission that tells a rollback from a deploy (``rollback``); the GPU node stack's wait for the
control plane (``cluster_active``), the GPU capacity watch (``capacity``), the cluster's delete
guard (``nodegroups_gone``), the check for leftover log groups (``log_groups_free``), the refused
deploy (``deploy_refusal``) and the RayService recreate (``recreate``).

May import ``common`` and ``ray_pd_eks``; none of the packages that build the system on it
(tests/test_layers.py).
"""
