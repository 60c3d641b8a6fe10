"""On-demand prices of the GPU node types, for the cost per million output tokens.

The bench command asks the AWS Price List API (``pricing:GetProducts``) when the caller's
credentials allow it; otherwise, and always for ``bench report`` (offline), it uses the table
below and says so in the report. Prices are per instance-hour, Linux, shared tenancy, On-Demand,
in USD, without Savings Plans, Reserved Instances or Capacity Blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The Price List API has endpoints in only a few regions; us-east-1 serves every region's prices.
PRICING_API_REGION = "us-east-1"
TABLE_DATE = "2026-11"
TABLE_REGION = "us-east-1"
# On-Demand Linux list prices in us-east-1 (USD per hour) as published on the EC2 pricing page
# in November 2026. Other regions differ by a few percent to a few tens of percent; pass
# --price-per-hour or let the Price List API answer for an exact figure.
ON_DEMAND_USD_PER_HOUR: dict[str, float] = {
    "g4dn.8xlarge": 2.176,
    "g4dn.12xlarge": 3.912,
    "g4dn.16xlarge": 4.352,
    "g5.8xlarge": 2.448,
    "g5.12xlarge": 5.672,
    "g5.16xlarge": 4.096,
    "g5.24xlarge": 8.144,
    "g5.48xlarge": 16.288,
    "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016,
    "g6.16xlarge": 3.3968,
    "g6.24xlarge": 6.6752,
    "g6.48xlarge": 13.3504,
    "g6e.8xlarge": 4.52856,
    "g6e.12xlarge": 10.49264,
    "g6e.16xlarge": 7.57719,
    "g6e.24xlarge": 15.06559,
    "g6e.48xlarge": 30.13118,
}


@dataclass(frozen=True)
class Price:
    usd_per_hour: float | None
    source: str  # shown in the report: where the number came from


def table_price(instance_type: str) -> Price:
    value = ON_DEMAND_USD_PER_HOUR.get(instance_type)
    if value is None:
        return Price(
            None,
            f"no price for {instance_type} in the table of ray_pd_eks/bench/pricing.py "
            "(pass --price-per-hour USD)",
        )
    return Price(
        value,
        f"On-Demand list price table in ray_pd_eks/bench/pricing.py ({TABLE_REGION}, "
        f"dated {TABLE_DATE}), not this account's price",
    )


def product_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """The Price List filters that select exactly one EC2 product: the plain On-Demand Linux
    instance (not a reservation, dedicated host or one with pre-installed software)."""
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def on_demand_usd(price_list_item: str) -> float | None:
    """The hourly USD price in one ``PriceList`` entry (a JSON string) of ``GetProducts``."""
    product = json.loads(price_list_item)
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") in ("Hrs", "Hours"):
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                if usd is not None and float(usd) > 0:
                    return float(usd)
    return None


def price_from_api(client: Any, instance_type: str, region: str) -> Price | None:
    """The On-Demand price from ``pricing:GetProducts``, or None when it gives no single answer
    (the caller then falls back to the table). AWS errors propagate to the caller."""
    response = client.get_products(
        ServiceCode="AmazonEC2",
        Filters=product_filters(instance_type, region),
        FormatVersion="aws_v1",
        MaxResults=10,
    )
    prices = {p for p in (on_demand_usd(item) for item in response.get("PriceList", [])) if p}
    if len(prices) != 1:
        return None
    return Price(prices.pop(), f"AWS Price List API (On-Demand, Linux, {region})")
