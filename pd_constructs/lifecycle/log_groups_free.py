"""The first thing a deploy with ``retainLogs=true`` does: make sure no log group that the
deployment must create by a fixed name is left over from an earlier one (handler:
``assets/lambda/log_groups_free/``).

Retained log groups (the control plane's ``/aws/eks/<cluster>/cluster``, the CloudWatch
add-on's ``/aws/containerinsights/<cluster>/...``) survive ``cdk destroy``; a later create of
the same cluster name would fail on "already exists" in the cluster or workload stack, after
the NAT gateway and the control plane started billing. This check is created in the network
stack and everything else there waits for it, so the deploy stops before anything that bills,
naming each leftover and its delete command. The pipeline deploys the same Stage, so its
stages stop the same way. Without ``retainLogs`` nothing is left by a destroy and the check is
not created (its function would only lengthen every deploy).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.lambda_functions import function_resource
from pd_constructs.common.nag import acknowledge
from ray_pd_eks.logs import LogPolicy


class LeftoverLogGroupsCheck(Construct):
    """Fails the stack's create when any of ``log_group_names`` exists; an Update only logs,
    a Delete does nothing (the handler's docstring says why). ``resource`` is what the rest
    of the stack should depend on."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_group_names: Sequence[str],
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function, self.resource = function_resource(
            self,
            folder="log_groups_free",
            description="Stops a deploy whose fixed-name log groups are left over",
            log_policy=log_policy,
            resource_type="Custom::LeftoverLogGroupsCheck",
            properties={"LogGroupNames": ",".join(log_group_names), "Region": Aws.REGION},
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["logs:DescribeLogGroups"], resources=["*"])
        )
        acknowledge(
            self.function,
            "AwsSolutions-IAM5",
            "logs:DescribeLogGroups takes no resource scope; the function only reads whether "
            "the deployment's fixed log group names exist.",
            findings=["Resource::*"],
        )
