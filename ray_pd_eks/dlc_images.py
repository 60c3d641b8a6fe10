"""Where AWS publishes its Deep Learning Containers (DLC), per region, without calling AWS.

The Ray LLM DLC (``ray:serve-llm-cuda-...``) lives in account ``763104351884`` in most
commercial regions, in a different account in opt-in regions and China, and in no registry
AWS documents for GovCloud and the newest regions. Nodes pull from the registry of their own
region, so an image cannot be derived from the region name.

Source: AWS Deep Learning Containers, "Region Availability"
(aws/deep-learning-containers ``docs/reference/region_availability.md``, commit ``18d714e0``,
the table behind the "Available images" page), read 2026-12. A region missing here has no DLC
registry in that table (us-gov-east-1, us-gov-west-1, eusc-de-east-1, ...):
the config refuses it at synth unless ``dlcImage`` names an image (a copy in your own
registry), and ``preflight`` says the same for an environment-agnostic deploy.
"""

from __future__ import annotations

DLC_DEFAULT_ACCOUNT = "763104351884"
DLC_DOC = (
    "https://github.com/aws/deep-learning-containers/blob/master/docs/reference/"
    "region_availability.md"
)

# Region -> account that owns the DLC registry there.
_ACCOUNTS: dict[str, str] = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": DLC_DEFAULT_ACCOUNT,
    "ap-northeast-2": DLC_DEFAULT_ACCOUNT,
    "ap-northeast-3": "364406365360",
    "ap-south-1": DLC_DEFAULT_ACCOUNT,
    "ap-south-2": "772153158452",
    "ap-southeast-1": DLC_DEFAULT_ACCOUNT,
    "ap-southeast-2": DLC_DEFAULT_ACCOUNT,
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": DLC_DEFAULT_ACCOUNT,
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": DLC_DEFAULT_ACCOUNT,
    "eu-central-2": "380420809688",
    "eu-north-1": DLC_DEFAULT_ACCOUNT,
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": DLC_DEFAULT_ACCOUNT,
    "eu-west-2": DLC_DEFAULT_ACCOUNT,
    "eu-west-3": DLC_DEFAULT_ACCOUNT,
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "me-west-1": "124382933778",
    "mx-central-1": "637423239942",
    "sa-east-1": DLC_DEFAULT_ACCOUNT,
    "us-east-1": DLC_DEFAULT_ACCOUNT,
    "us-east-2": DLC_DEFAULT_ACCOUNT,
    "us-west-1": DLC_DEFAULT_ACCOUNT,
    "us-west-2": DLC_DEFAULT_ACCOUNT,
}

DLC_ACCOUNTS: dict[str, str] = dict(sorted(_ACCOUNTS.items()))


def dlc_registry(region: str) -> str | None:
    """The DLC registry host of ``region`` (``<account>.dkr.ecr.<region>.<suffix>``), or None
    where AWS documents none."""
    account = DLC_ACCOUNTS.get(region)
    if account is None:
        return None
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{suffix}"
