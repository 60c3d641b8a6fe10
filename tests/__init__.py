"""Imported before conftest.py and every test module: jsii, which ``import aws_cdk`` starts,
runs the project's Node.js also when pytest is not run through scripts/test.sh
(ray_pd_eks/node_runtime.py).

It also turns off aws-cdk-lib's built-in CloudFormation template validation in the tests'
synths (``CDK_VALIDATION=false``, read by the jsii process at each synth; aws-cdk-lib 2.275
``core/lib/private/synthesis-validation.js`` ``defaultValidationEnabled``). On a process's first
synth it loads a WebAssembly rule engine, 5-6 s of Node.js CPU, a tenth of the suite. Without
the ``@aws-cdk/core:validateAgainstDefaultRules`` flag (cdk.json does not set it) its findings
are only warnings, which no test reads; cfn-lint lints every session template and fails on an
error (tests/cfn_lint_pool.py). ``cdk synth`` still runs it. ``CDK_VALIDATION=true`` in the
environment turns it back on for a run.
"""

import os

from ray_pd_eks.node_runtime import jsii_node_env

os.environ.update(jsii_node_env())
os.environ.setdefault("CDK_VALIDATION", "false")
