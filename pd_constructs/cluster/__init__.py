"""The EKS cluster and its nodes: the control plane, the node groups and the GPU device plugins
(``cluster``), the Cluster Autoscaler of the GPU node group (``cluster_autoscaler``) and the
managed VPC CNI add-on with its own identity (``vpc_cni``).

May import ``common``, ``lifecycle`` and ``ray_pd_eks``; not ``network`` (the stacks pass the
VPC and subnets in) nor what runs on the cluster (tests/test_layers.py).
"""
