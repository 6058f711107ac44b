"""Prices and costs: litellm's price map, configured overrides, GPU-hour pricing.

Pure logic: no I/O beyond reading litellm's bundled JSON once, no awaits. Money is
Decimal from the price map to the result.
"""

from __future__ import annotations

from gateway.pricing.book import PriceBook
from gateway.pricing.catalog import cache_min_tokens, find_key, load_model_map, model_info
from gateway.pricing.cost import COMPONENTS, CostBreakdown, cost_of
from gateway.pricing.errors import (
    ModelMapError,
    PriceConfigError,
    PricingError,
    UnknownCacheTtlError,
    UnknownModelError,
    UnknownTierError,
    UnpricedModelError,
)
from gateway.pricing.estimate import CostEstimateRequest, estimate, estimate_request
from gateway.pricing.gpu import EffectiveCost, GpuCost, GpuHourMeter, planned_price
from gateway.pricing.map_prices import price_from_entry
from gateway.pricing.overrides import (
    LongContextOverride,
    PriceOverride,
    TierOverride,
    parse_price_overrides,
)
from gateway.pricing.price import ModelPrice, PriceSheet, Quote, Rates, TierPrice
from gateway.pricing.tiers import (
    CACHE_TTLS,
    STANDARD,
    TIERS,
    ServedTier,
    served_tier,
    settle_served,
)

__all__ = [
    "CACHE_TTLS",
    "COMPONENTS",
    "STANDARD",
    "TIERS",
    "CostBreakdown",
    "CostEstimateRequest",
    "EffectiveCost",
    "GpuCost",
    "GpuHourMeter",
    "LongContextOverride",
    "ModelMapError",
    "ModelPrice",
    "PriceBook",
    "PriceConfigError",
    "PriceOverride",
    "PriceSheet",
    "PricingError",
    "Quote",
    "Rates",
    "ServedTier",
    "TierOverride",
    "TierPrice",
    "UnknownCacheTtlError",
    "UnknownModelError",
    "UnknownTierError",
    "UnpricedModelError",
    "cache_min_tokens",
    "cost_of",
    "estimate",
    "estimate_request",
    "find_key",
    "load_model_map",
    "model_info",
    "parse_price_overrides",
    "planned_price",
    "price_from_entry",
    "served_tier",
    "settle_served",
]
