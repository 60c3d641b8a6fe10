"""A deploy that CloudFormation refuses before it creates or changes anything.

Some settings synthesize fine (``./scripts/setup.sh`` synthesizes the defaults, tests and
``cdk synth`` review templates) but must not reach an account as they are: a cluster nobody can
administer bills for nothing. A synth warning scrolls past; a CloudFormation rule does not. The
rule's assertion is false in every region, so the stack's create or update fails while
CloudFormation validates the template (``cdk deploy`` prints the assertion's description), before
any resource is touched. Put it in the stack that deploys first, so no other stack starts.
"""

from __future__ import annotations

from aws_cdk import Annotations, Aws, CfnRule, CfnRuleAssertion, Fn
from constructs import Construct

NO_REGION = "none"


class DeployRefusal(Construct):
    """Refuses every deploy of its stack with ``reason`` (also a synth warning, ``warning_id``).

    ``reason`` names the setting, why the deploy is refused and the fix; CloudFormation shows it
    as the failed rule's description.
    """

    def __init__(self, scope: Construct, construct_id: str, *, reason: str, warning_id: str):
        super().__init__(scope, construct_id)
        if not reason.strip():
            raise ValueError("DeployRefusal: reason must say why and how to fix it")
        self.reason = reason
        # No region is named "none": the assertion never holds. Rules may reference pseudo
        # parameters (as the endpoint's certificate-region rule does); cfn-lint flags a
        # comparison of a value with itself (W8003), not this one.
        self.rule = CfnRule(
            self,
            "Resource",
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_equals(Aws.REGION, NO_REGION),
                    assert_description=reason,
                )
            ],
        )
        Annotations.of(self).add_warning_v2(
            warning_id, f"cdk deploy will be refused before anything is created: {reason}"
        )
