"""One model's prices: sheets per tier and long-context step, and how one is chosen.

A *sheet* holds the per-token prices a provider publishes for one tier at one step; any
price may be missing. `ModelPrice.quote` turns the sheets into complete `Rates` for one
request, taking each price from the most specific sheet that has it:

    tier at this step  ->  standard at this step  ->  tier base  ->  standard base

(the order litellm's own cost calculator uses, so the two agree), then filling what no
sheet publishes: cache reads and writes cost what input costs, a 1-hour or 12-hour write
costs what a 5-minute write costs, and reasoning costs what output costs (a sheet's own
output price covers its reasoning unless it publishes a reasoning price).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Context, Decimal

from gateway.pricing.errors import UnpricedModelError
from gateway.pricing.money import ONE, ZERO
from gateway.pricing.tiers import STANDARD, TIER_ALIASES, check_tier

RATE_FIELDS: tuple[str, ...] = (
    "input",
    "cached_input",
    "cache_write",
    "cache_write_1h",
    "cache_write_12h",
    "output",
    "reasoning",
)


@dataclass(frozen=True, slots=True)
class PriceSheet:
    """Published USD prices per token of one tier at one step; None where none is published.

    A sheet that prices output but not reasoning bills reasoning as its own output, so a
    tier's or a long-context step's output price also covers its reasoning tokens.
    """

    input: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None
    cache_write_12h: Decimal | None = None
    output: Decimal | None = None
    reasoning: Decimal | None = None

    def __post_init__(self) -> None:
        if self.reasoning is None and self.output is not None:
            object.__setattr__(self, "reasoning", self.output)

    def merged(self, other: PriceSheet) -> PriceSheet:
        """Return this sheet with every price that `other` publishes replacing ours."""
        given = {name: getattr(other, name) for name in RATE_FIELDS}
        return replace(self, **{name: v for name, v in given.items() if v is not None})

    def is_empty(self) -> bool:
        """Tell whether the sheet publishes no price at all."""
        return all(getattr(self, name) is None for name in RATE_FIELDS)


@dataclass(frozen=True, slots=True)
class Rates:
    """Complete USD prices per token that apply to one request."""

    input: Decimal
    cached_input: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal
    cache_write_12h: Decimal
    output: Decimal
    reasoning: Decimal

    def scaled(self, multiplier: Decimal) -> Rates:
        """Return every price multiplied by `multiplier`, exactly (never rounded)."""
        times = _EXACT.multiply
        return Rates(**{name: times(getattr(self, name), multiplier) for name in RATE_FIELDS})

    def cache_write_for(self, ttl: str) -> Decimal:
        """Return the price of one token written to the cache with TTL `ttl`."""
        if ttl == "1h":
            return self.cache_write_1h
        return self.cache_write_12h if ttl == "12h" else self.cache_write


_EXACT = Context(prec=60)
"""Enough digits that a price times a multiplier is never rounded, whatever the context
(a quote is kept, so it must not depend on the context of the first request priced)."""


_RESOLVED: dict[tuple[int, ...], tuple[tuple[PriceSheet, ...], Rates]] = {}
"""Rates by the identity of their sheets: a price map's sheets live as long as its
configuration, and resolving them again was ~1.5% of a small request's CPU. The entry
holds its sheets, so no id is reused while it lives."""
MAX_RESOLVED = 4096


def resolve_rates(chain: Sequence[PriceSheet]) -> Rates:
    """Take each price from the first sheet in `chain` that has it, then fill the gaps."""
    key = tuple(map(id, chain))
    hit = _RESOLVED.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], chain, strict=True)):
        return hit[1]
    rates = _resolve(chain)
    if len(_RESOLVED) >= MAX_RESOLVED:  # configurations reloaded many times
        _RESOLVED.clear()
    _RESOLVED[key] = (tuple(chain), rates)
    return rates


def _resolve(chain: Sequence[PriceSheet]) -> Rates:

    def first(name: str) -> Decimal | None:
        return next((v for s in chain if (v := getattr(s, name)) is not None), None)

    def pick(value: Decimal | None, default: Decimal) -> Decimal:
        return default if value is None else value

    price_in = pick(first("input"), ZERO)
    price_out = pick(first("output"), ZERO)
    # A provider that publishes no cache price bills cached tokens as ordinary input.
    write = pick(first("cache_write"), price_in)
    return Rates(
        input=price_in,
        cached_input=pick(first("cached_input"), price_in),
        cache_write=write,
        cache_write_1h=pick(first("cache_write_1h"), write),
        cache_write_12h=pick(first("cache_write_12h"), write),
        output=price_out,
        reasoning=pick(first("reasoning"), price_out),
    )


@dataclass(frozen=True, slots=True)
class TierPrice:
    """How one non-standard tier is priced: published sheets by step, or a multiple of standard."""

    sheets: Mapping[int, PriceSheet] = field(default_factory=dict)
    multiplier: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Quote:
    """The rates that apply to one request, and how they were chosen."""

    rates: Rates
    tier: str  # the tier billed
    priced_as: str  # whose sheets the rates came from ("standard" for multiplier tiers)
    multiplier: Decimal  # applied to the sheets' prices; 1 unless the tier is a multiplier
    tier_fallback: bool  # no price was known for the tier, so standard prices were used
    long_context_above: int  # the long-context step used (input tokens above which it applies)


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Every price of one model; `standard[0]` is the base sheet."""

    model: str
    standard: Mapping[int, PriceSheet]
    tiers: Mapping[str, TierPrice] = field(default_factory=dict)
    provider: str | None = None
    # xAI bills the higher step once the prompt *reaches* the threshold, others above it.
    inclusive_thresholds: bool = False

    def __post_init__(self) -> None:
        base = self.standard.get(0)
        if base is None or (base.input is None and base.output is None):
            raise UnpricedModelError(f"model {self.model!r} has no per-token input or output price")

    def has_tier(self, tier: str) -> bool:
        """Tell whether the model has a price for `tier` (else standard prices are used)."""
        return not self._tier(check_tier(tier))[2]

    def thresholds(self) -> list[int]:
        """Return the long-context steps of standard prices, lowest first."""
        return sorted(step for step in self.standard if step)

    def quote(self, tier: str = STANDARD, prompt_tokens: int = 0) -> Quote:
        """Return the rates for a request of `prompt_tokens` input tokens served on `tier`.

        Kept per price, tier and long-context step (see `_QUOTES`): a price never changes.
        """
        name = check_tier(tier)
        kept = _QUOTES.get((id(self), name))
        if kept is None or kept[0] is not self:
            tier_price = self._tier(name)[1]
            sheets = tier_price.sheets if tier_price else {}
            kept = (self, any(step for step in (*self.standard, *sheets)), {})
            if len(_QUOTES) >= MAX_QUOTES:  # prices replaced by many reloads
                _QUOTES.clear()
            _QUOTES[(id(self), name)] = kept
        if kept[1]:  # long-context steps: the step depends on the prompt's size
            return self._quote(name, prompt_tokens)
        quote = kept[2].get(0)
        if quote is None:
            quote = kept[2][0] = self._quote(name, 0)
        return quote

    def _quote(self, name: str, prompt_tokens: int) -> Quote:
        priced_as, tier_price, fallback = self._tier(name)
        sheets = tier_price.sheets if tier_price else {}
        step = self._step(prompt_tokens, sheets)
        chain = (sheets.get(step), self.standard.get(step), sheets.get(0), self.standard[0])
        rates = resolve_rates([sheet for sheet in chain if sheet is not None])
        multiplier = ONE
        if tier_price is not None and tier_price.multiplier is not None:
            multiplier = tier_price.multiplier
            rates = rates.scaled(multiplier)
        return Quote(rates, name, priced_as, multiplier, fallback, step)

    def _tier(self, name: str) -> tuple[str, TierPrice | None, bool]:
        """Find how `name` is priced: (sheets' tier, its TierPrice, fell back to standard)."""
        if name == STANDARD:
            return STANDARD, None, False
        for candidate in (name, TIER_ALIASES.get(name)):
            tier_price = self.tiers.get(candidate) if candidate else None
            if tier_price is not None and candidate is not None:
                priced_as = STANDARD if tier_price.multiplier is not None else candidate
                return priced_as, tier_price, False
        return STANDARD, None, True

    def _step(self, prompt_tokens: int, sheets: Mapping[int, PriceSheet]) -> int:
        """Return the highest long-context threshold the prompt passes, 0 if none."""
        inclusive = self.inclusive_thresholds
        passed = [
            step
            for step in {*self.standard, *sheets}
            if step and (prompt_tokens > step or (inclusive and prompt_tokens == step))
        ]
        return max(passed, default=0)


_QUOTES: dict[tuple[int, str], tuple[ModelPrice, bool, dict[int, Quote]]] = {}
"""Quotes of a price without long-context steps, by the price's identity and tier (one per
model in force): each entry holds its price, so no id is reused while it lives. A price
with steps (the quote depends on the prompt's size) is quoted afresh."""
MAX_QUOTES = 4096
