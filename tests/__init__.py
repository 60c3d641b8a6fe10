"""Imported before conftest.py and every test module: jsii, which ``import aws_cdk`` starts,
runs the project's Node.js also when pytest is not run through scripts/test.sh
(ray_pd_eks/node_runtime.py)."""

import os

from ray_pd_eks.node_runtime import jsii_node_env

os.environ.update(jsii_node_env())
