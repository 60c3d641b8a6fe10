"""Amazon EKS's per-region image registries, without calling AWS.

EKS replicates the images of its add-ons (among them the EFA device plugin,
``eks/aws-efa-k8s-device-plugin``) into a private ECR registry in each region it supports, and
nodes pull from the registry of their own region with the node role's ECR pull permissions. The
account owning that registry is ``602401143452`` in the older commercial regions and a different
one in opt-in, GovCloud and China regions, so a registry cannot be derived from the region name.

Source: the EKS User Guide, "View Amazon container image registries for Amazon EKS add-ons"
(``add-ons-images``; awsdocs/amazon-eks-user-guide ``latest/ug/workloads/add-ons-images.adoc``),
checked 2026-11 against the ``get-ecr-uri.sh`` helper of the EKS AMI build scripts, which
carries the same accounts. Two deliberate differences from the guide's table as read:
``ap-east-2``'s row names the host ``533267051163.dkr.ecr.ap-east-1...``; the AMI helper and the
GuardDuty EKS agent's registry table both give ``533267051163.dkr.ecr.ap-east-2...``, so the
host here is in ``ap-east-2``. ``ap-southeast-5`` (``151610086707``) is missing from the
English page's revision that was read, present in a later (localized) revision and in the AMI
helper. docs/operations.md says how to add a region.
"""

from __future__ import annotations

_DEFAULT_ACCOUNT = "602401143452"

# Region -> account that owns EKS's image registry there.
_ACCOUNTS: dict[str, str] = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-northeast-1": _DEFAULT_ACCOUNT,
    "ap-northeast-2": _DEFAULT_ACCOUNT,
    "ap-northeast-3": _DEFAULT_ACCOUNT,
    "ap-south-1": _DEFAULT_ACCOUNT,
    "ap-south-2": "900889452093",
    "ap-southeast-1": _DEFAULT_ACCOUNT,
    "ap-southeast-2": _DEFAULT_ACCOUNT,
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-central-1": _DEFAULT_ACCOUNT,
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-1": _DEFAULT_ACCOUNT,
    "eu-central-2": "900612956339",
    "eu-north-1": _DEFAULT_ACCOUNT,
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "eu-west-1": _DEFAULT_ACCOUNT,
    "eu-west-2": _DEFAULT_ACCOUNT,
    "eu-west-3": _DEFAULT_ACCOUNT,
    "eusc-de-east-1": "877088126301",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "sa-east-1": _DEFAULT_ACCOUNT,
    "us-east-1": _DEFAULT_ACCOUNT,
    "us-east-2": _DEFAULT_ACCOUNT,
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
    "us-west-1": _DEFAULT_ACCOUNT,
    "us-west-2": _DEFAULT_ACCOUNT,
}


def _dns_suffix(region: str) -> str:
    """The registry host's domain in the region's partition."""
    if region.startswith("cn-"):
        return "amazonaws.com.cn"
    if region.startswith("eusc-"):
        return "amazonaws.eu"
    return "amazonaws.com"


# Region -> registry host, e.g. "877085696533.dkr.ecr.af-south-1.amazonaws.com".
EKS_IMAGE_REGISTRIES: dict[str, str] = {
    region: f"{account}.dkr.ecr.{region}.{_dns_suffix(region)}"
    for region, account in sorted(_ACCOUNTS.items())
}

ADD_ONS_IMAGES_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html"
