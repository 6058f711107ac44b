"""The cost of one request, by component, in exact Decimal USD."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any

from gateway.frozen import mutable_twin
from gateway.pricing.money import ZERO, money_str
from gateway.pricing.price import ModelPrice, Rates
from gateway.pricing.tiers import STANDARD, check_cache_ttl
from gateway.usage import Usage

COMPONENTS: tuple[str, ...] = ("input", "cached", "cache_write", "output", "reasoning")
_SHARE_QUANTUM = Decimal("0.0001")
# Enough digits that a price times a token count is never rounded, whatever the context.
_EXACT = Context(prec=60)


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """What one request cost (or would cost), by component, in USD."""

    model: str
    tier: str  # the tier billed
    priced_as: str  # whose prices were used: the tier, "priority" for fast, or "standard"
    multiplier: Decimal  # applied to those prices (a multiplier tier such as fast mode)
    tier_fallback: bool  # no price was known for the tier: standard prices were used
    long_context_above: int  # the long-context step used; 0 for base prices
    input: Decimal  # uncached input tokens
    cached: Decimal  # cache reads
    cache_write: Decimal  # cache writes, each TTL at its own price
    output: Decimal  # visible answer tokens
    reasoning: Decimal  # reasoning tokens
    estimated: bool = False  # the token counts were estimated, not reported by the upstream
    # The per-token rates these amounts were priced at (None for a breakdown built by
    # hand): the prefix verdict reads the input and cached-input rates the call paid.
    rates: Rates | None = field(default=None, compare=False, repr=False)

    @property
    def total(self) -> Decimal:
        """Return the sum of all components."""
        return self.input + self.cached + self.cache_write + self.output + self.reasoning

    def components(self) -> dict[str, Decimal]:
        """Return each component's cost by name."""
        return {name: getattr(self, name) for name in COMPONENTS}

    def share(self, component: str) -> Decimal:
        """Return one component's fraction of the total, to 4 places; 0 when the total is 0."""
        total = self.total
        if not total:
            return ZERO
        return (getattr(self, component) / total).quantize(_SHARE_QUANTUM)

    def shares(self) -> dict[str, Decimal]:
        """Return every component's fraction of the total."""
        return {name: self.share(name) for name in COMPONENTS}

    def as_dict(self) -> dict[str, Any]:
        """Render as JSON-safe data: money as exact decimal strings, e.g. for `usage.cost`."""
        return {
            "currency": "USD",
            "total": money_str(self.total),
            **{name: money_str(cost) for name, cost in self.components().items()},
            "shares": {name: money_str(share) for name, share in self.shares().items()},
            "model": self.model,
            "tier": self.tier,
            "priced_as": self.priced_as,
            "multiplier": money_str(self.multiplier),
            "tier_fallback": self.tier_fallback,
            "long_context_above": self.long_context_above,
            "estimated": self.estimated,
        }


_BREAKDOWN = mutable_twin(CostBreakdown)  # `CostBreakdown(...)`, a store per field


def cost_of(
    price: ModelPrice, usage: Usage, tier: str = STANDARD, cache_ttl: str = "5m"
) -> CostBreakdown:
    """Price one request's usage on `tier`.

    `cache_ttl` is the TTL that `usage.cache_write_tokens` were written with (when the
    upstream does not split writes by TTL); `cache_write_1h_tokens` always cost the 1-hour
    price. The long-context step is chosen by `usage.prompt_tokens`. A tier the model has
    no price for is billed at standard prices with `tier_fallback` set, because a request
    that was served must still be booked; check `ModelPrice.has_tier` to refuse one first.
    """
    ttl = check_cache_ttl(cache_ttl)
    quote = price.quote(tier, usage.prompt_tokens)
    rates = quote.rates
    write_rate = rates.cache_write_for(ttl)
    # Each product and the sum in `_EXACT` (what `localcontext(_EXACT)` gave, without
    # entering and leaving a context per request).
    times, add = _EXACT.multiply, _EXACT.add
    writes = add(
        times(usage.cache_write_tokens, write_rate),
        times(usage.cache_write_1h_tokens, rates.cache_write_1h),
    )
    # Positional, in the fields' order: no twelve keywords to match to parameters.
    return _BREAKDOWN(
        price.model,
        quote.tier,
        quote.priced_as,
        quote.multiplier,
        quote.tier_fallback,
        quote.long_context_above,
        times(usage.uncached_input_tokens, rates.input),
        times(usage.cached_tokens, rates.cached_input),
        writes,
        times(usage.answer_tokens, rates.output),
        times(usage.reasoning_tokens, rates.reasoning),
        usage.estimated,
        rates,
    )
