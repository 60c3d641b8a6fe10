"""``python -m ray_pd_eks``: the operations tool (see ``ray_pd_eks.cli``)."""

import os
import sys

from ray_pd_eks.node_runtime import jsii_node_env

# Commands that synthesize import aws_cdk, which starts jsii's Node.js: the project's.
os.environ.update(jsii_node_env())

from ray_pd_eks.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
