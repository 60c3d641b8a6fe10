"""An ARN in the deploy's own partition, region and account as CDK writes it in a template
(``Stack.format_arn``, ``Fn::Join`` of the pseudo parameters), for tests that compare
synthesized IAM policies and conditions with the ARNs they should name."""

from __future__ import annotations

from typing import Any


def own_arn(service: str, resource: str) -> dict[str, Any]:
    """``arn:<partition>:<service>:<region>:<account>:<resource>``, as the template holds it."""
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":{service}:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                f":{resource}",
            ],
        ]
    }
