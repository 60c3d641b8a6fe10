"""One image, the same on every node: the images the pods run, pinned to digests at deploy time
(handler: ``assets/lambda/image_digest/``).

Every Ray container, init container and warm-up container references the attribute of
:class:`ImageDigests` for its image, ``repository@sha256:<digest>``, never a tag. The digest is
resolved when the configured reference first deploys and kept until it changes (like the GPU
AZ choice), so nodes that join later (a replaced node, a scale-up) pull exactly the build the
others run. A reference the user gives by digest is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aws_cdk import Aws, CfnMapping, Duration, Stack, Token
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.lambda_functions import function_resource
from pd_constructs.lifecycle.rollback import grant_describe_own_stack
from ray_pd_eks.config import DLC_REPOSITORY_TAG, AppConfig
from ray_pd_eks.dlc_images import DLC_ACCOUNTS, dlc_registry
from ray_pd_eks.logs import LogPolicy

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>:<tag>; the region may be a token.
_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[^/.]+)\.amazonaws\.com(\.cn)?/"
    r"(?P<repo>[^:@]+):"
)


def ecr_repository_arn(reference: str) -> str | None:
    """The ECR repository a tagged reference is read from (``BatchGetImage``), or None for a
    digest or another registry. The deploy region may stand in the reference as a token."""
    if "@sha256:" in reference:
        return None
    resolved = reference
    if Token.is_unresolved(reference):
        resolved = reference.replace(Aws.REGION, "${AWS::Region}")
    m = _ECR.match(resolved)
    if not m:
        return None
    region = Aws.REGION if m["region"] == "${AWS::Region}" else m["region"]
    return f"arn:{Aws.PARTITION}:ecr:{region}:{m['account']}:repository/{m['repo']}"


def ray_image(scope: Construct, config: AppConfig) -> tuple[str, str | None]:
    """The Ray image reference for ``scope``'s stack and, for the default DLC, its ECR
    repository ARN: ``dlcImage`` as given; else the DLC registry AWS documents for the stack's
    region (ray_pd_eks/dlc_images.py). An environment-agnostic stack maps ``AWS::Region`` to
    the account with a ``CfnMapping`` of the whole table (a region missing there fails the
    deploy at that lookup; ``preflight`` says so first)."""
    if config.dlc_image:
        return config.dlc_image, None
    region = Stack.of(scope).region
    repository = DLC_REPOSITORY_TAG.split(":", 1)[0]
    if not Token.is_unresolved(region):
        return config.image_uri(region), None
    mapping = CfnMapping(
        scope,
        "DlcRegistries",
        mapping={
            r: {"account": account, "host": dlc_registry(r)} for r, account in DLC_ACCOUNTS.items()
        },
    )
    account = mapping.find_in_map(Aws.REGION, "account")
    host = mapping.find_in_map(Aws.REGION, "host")
    arn = f"arn:{Aws.PARTITION}:ecr:{Aws.REGION}:{account}:repository/{repository}"
    return f"{host}/{DLC_REPOSITORY_TAG}", arn


class ImageDigests(Construct):
    """Resolves ``images`` (key -> reference by tag or digest) to ``repository@sha256:...``;
    :meth:`reference` gives the pinned reference of a key. The function may call ECR's
    ``BatchGetImage`` on exactly the ECR repositories the tagged references name, and reaches
    other registries (ECR Public, ...) over HTTPS without credentials; it runs outside the VPC.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        images: Mapping[str, str],
        log_policy: LogPolicy,
        repository_arns: tuple[str, ...] = (),
    ) -> None:
        """``repository_arns``: ECR repositories of references whose registry is a
        CloudFormation token (``ecr_repository_arn`` cannot read those)."""
        super().__init__(scope, construct_id)
        fn, self.resource = function_resource(
            self,
            folder="image_digest",
            description="Pins the pods' images to digests at deploy time",
            log_policy=log_policy,
            resource_type="Custom::ImageDigests",
            properties=images,
            timeout=Duration.minutes(2),
        )
        repositories = sorted({a for a in map(ecr_repository_arn, images.values()) if a})
        repositories += list(repository_arns)
        if repositories:
            fn.add_to_role_policy(
                iam.PolicyStatement(actions=["ecr:BatchGetImage"], resources=repositories)
            )
        # Tells CloudFormation's rollback Update (answered at once, no registry call).
        grant_describe_own_stack(fn)

    def reference(self, key: str) -> str:
        """``repository@sha256:<digest>`` of the image configured under ``key``."""
        return self.resource.get_att_string(key)
