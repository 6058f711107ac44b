"""Batch and ultrafast are sold only where the price book prices them.

Both change what is bought (an asynchronous discount, several times the price): a request
planned at one of them for a model without that price would be billed at standard prices
(`tier_fallback`), a number nobody agreed to. It is refused instead, naming the header the
client sent (or `tier`, when a rule chose it) and the price to add.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.config import GatewayConfig
from gateway.policy.decision import Decision, Rejection
from gateway.pricing import PriceBook, PricingError

SOLD_WHERE_PRICED = frozenset({"batch", "ultrafast"})


def tier_priced(config: GatewayConfig, model_map: Mapping[str, Any], alias: str, tier: str) -> bool:
    """Whether the alias's prices (configured, else litellm's map) have `tier` of their own."""
    book = PriceBook(config.prices, model_map=model_map)
    try:
        return book.price(config.price_key(alias)).has_tier(tier)
    except PricingError:
        return False


def refuse_unpriced(
    decision: Decision, config: GatewayConfig, model_map: Mapping[str, Any], alias: str
) -> Decision:
    """`decision`, or its refusal when `alias` (the alias billed) has no price for its tier."""
    tier = decision.tier
    if decision.rejected or tier not in SOLD_WHERE_PRICED:
        return decision
    if tier_priced(config, model_map, alias, tier):
        return decision
    field = "X-Speed-Tier" if decision.tier_requested == tier else "tier"
    message = f"the {tier} tier has no price for {alias}: add prices.{alias}.tiers.{tier}"
    return replace(
        decision,
        rejection=Rejection(field, message),
        set_fields={},
        remove=frozenset(),
        headers={},
        clamps=(),
        notes=(),
        thinking_enforcement=None,
    )
