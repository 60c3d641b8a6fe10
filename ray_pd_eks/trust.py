"""What a deployment trusts beyond its own account's settings: the registries its images may
come from, and the tag that marks a secret or staged model as readable by its pods.

Both limit what a changed ``cdk.json`` can reach. An image setting (``dlcImage``,
``awsCliImage``, ``prefetchImage``) is a reference the cluster pulls and runs with the pods'
rights (the model-fetch identity, the node's model cache), so a change to ``cdk.json`` must
not be able to point it at any registry on the internet. Accepted:

- **Amazon ECR Public** (``public.ecr.aws``): the defaults of ``awsCliImage`` and
  ``prefetchImage`` (the AWS CLI's and Docker's official images, as AWS mirrors them).
- **The AWS Deep Learning Containers registries** (ray_pd_eks/dlc_images.py): the Ray LLM DLC.
- **The deploy account's own private ECR**, in any region: where a copied or built image goes.
  With an environment-agnostic deploy (no ``account`` setting) the account is not known at
  synth, so any account's private ECR is accepted there; a pipeline environment always names
  its account.

The model-fetch pods (hfTokenSecretArn, modelS3Uri) may read a secret or a staged object
only while it carries the tag :data:`MODEL_ACCESS_TAG_KEY` = :data:`MODEL_ACCESS_TAG_VALUE`
(pd_constructs/serving/model_access.py puts it in their IAM conditions; ``preflight`` checks the
secret's tag). Marking a resource is then a decision of someone who may tag resources in that
account, not of whoever edits the settings.
"""

from __future__ import annotations

import re

from ray_pd_eks.dlc_images import DLC_ACCOUNTS

ECR_PUBLIC = "public.ecr.aws"
MODEL_ACCESS_TAG_KEY = "ray-pd-eks:model-access"
MODEL_ACCESS_TAG_VALUE = "true"
_PRIVATE_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?(?=/)")
DLC_REGISTRY_ACCOUNTS = frozenset(DLC_ACCOUNTS.values())


def registry_problem(image: str, account: str) -> str | None:
    """Why ``image`` (a full reference) comes from no registry this app knows, or None.
    ``account`` is the deploy account, empty when not known at synth."""
    if image.startswith(f"{ECR_PUBLIC}/"):
        return None
    m = _PRIVATE_ECR.match(image)
    if m and (m["account"] in DLC_REGISTRY_ACCOUNTS or not account or m["account"] == account):
        return None
    own = f"{account}.dkr.ecr.<region>.amazonaws.com" if account else "your account's ECR"
    return (
        f"must come from a registry this app knows: {ECR_PUBLIC}, an AWS Deep Learning "
        f"Containers registry, or {own} (copy the image there; ray_pd_eks/trust.py)"
    )


def secret_tag_command(arn: str) -> str:
    """The command that marks a secret readable by the model-fetch pods."""
    return (
        f"aws secretsmanager tag-resource --secret-id {arn} "
        f"--tags Key={MODEL_ACCESS_TAG_KEY},Value={MODEL_ACCESS_TAG_VALUE}"
    )


__all__ = [
    "ECR_PUBLIC",
    "MODEL_ACCESS_TAG_KEY",
    "MODEL_ACCESS_TAG_VALUE",
    "registry_problem",
    "secret_tag_command",
]
