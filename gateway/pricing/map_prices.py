"""Turn one entry of litellm's price map into a `ModelPrice`.

Every per-token price key of the map is built from up to four parts:

    {base}[_above_{ttl}][_above_{N}[k]_tokens][_{tier}]

    base  input_cost_per_token, output_cost_per_token, output_cost_per_reasoning_token,
          cache_read_input_token_cost, cache_creation_input_token_cost
    ttl   1hr or 12hr, cache writes only (`cache_creation_input_token_cost_above_1hr`)
    N     a long-context step: the price applies when the prompt has more than N tokens
    tier  batches, flex, priority, balanced, ultrafast

Two more sources: `tiered_pricing`, a list of input-token ranges each with its own
prices (Dashscope), read as long-context steps; and `provider_specific_entry.fast`,
Anthropic's fast-mode multiplier of every price. Keys priced per image, audio token,
second, query or character, `_decisions` keys, off-peak windows and regional uplifts
are not token prices of a chat request and are left out (see docs/pricing.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from gateway.pricing.money import to_decimal
from gateway.pricing.price import ModelPrice, PriceSheet, TierPrice
from gateway.pricing.tiers import STANDARD

_KEY = re.compile(
    r"^(?P<base>input_cost_per_token|output_cost_per_token|output_cost_per_reasoning_token"
    r"|cache_read_input_token_cost|cache_creation_input_token_cost)"
    r"(?:_above_(?P<ttl>1hr|12hr))?"
    r"(?:_above_(?P<step>\d+)(?P<k>k?)_tokens)?"
    r"(?:_(?P<tier>batches|flex|priority|balanced|ultrafast))?$"
)
_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "input_cost_per_token": "input",
        "cache_read_input_token_cost": "cached_input",
        "cache_creation_input_token_cost": "cache_write",
        "output_cost_per_token": "output",
        "output_cost_per_reasoning_token": "reasoning",
    }
)
_TTL_FIELDS: Mapping[str, str] = MappingProxyType(
    {"1hr": "cache_write_1h", "12hr": "cache_write_12h"}
)
_TIER_SUFFIXES: Mapping[str, str] = MappingProxyType(
    {
        "batches": "batch",
        "flex": "flex",
        "priority": "priority",
        "balanced": "balanced",
        "ultrafast": "ultrafast",
    }
)
# Providers that bill a long-context step from the threshold itself, as litellm does.
_INCLUSIVE_PROVIDERS = frozenset({"xai"})

Grid = dict[tuple[str, int], dict[str, Decimal]]


def parse_price_key(key: str) -> tuple[str, int, str] | None:
    """Split a map key into (tier, long-context step, sheet field); None if not a token price."""
    match = _KEY.match(key)
    if match is None:
        return None
    base, ttl = match["base"], match["ttl"]
    if ttl and base != "cache_creation_input_token_cost":
        return None
    step = int(match["step"] or 0) * (1000 if match["k"] else 1)
    tier = _TIER_SUFFIXES[match["tier"]] if match["tier"] else STANDARD
    return tier, step, _TTL_FIELDS[ttl] if ttl else _FIELDS[base]


def _grid(entry: Mapping[str, Any]) -> Grid:
    """Collect the entry's per-token prices by (tier, step)."""
    grid: Grid = {}
    for key, raw in entry.items():
        parsed, value = parse_price_key(key), to_decimal(raw)
        if parsed is not None and value is not None:
            tier, step, name = parsed
            grid.setdefault((tier, step), {})[name] = value
    return grid


def _band_sheet(band: Mapping[str, Any]) -> PriceSheet:
    """Read one `tiered_pricing` band; what it leaves out costs what its own input/output cost."""
    prices = {_FIELDS[k]: v for k in _FIELDS if (v := to_decimal(band.get(k))) is not None}
    if "input" in prices:
        prices.setdefault("cached_input", prices["input"])
        prices.setdefault("cache_write", prices["input"])
    return PriceSheet(**prices)


def _with_bands(standard: dict[int, PriceSheet], bands: object) -> dict[int, PriceSheet]:
    """Add `tiered_pricing` bands as steps; a band from N tokens applies above N."""
    if not isinstance(bands, list):
        return standard
    for band in bands:
        span = band.get("range") if isinstance(band, dict) else None
        start = to_decimal(span[0]) if isinstance(span, list) and span else None
        if start is None:
            continue
        step = int(start)
        standard[step] = standard.get(step, PriceSheet()).merged(_band_sheet(band))
    return standard


def _fast_multiplier(entry: Mapping[str, Any]) -> Decimal | None:
    """Return Anthropic's fast-mode multiplier from `provider_specific_entry`, if any."""
    specific = entry.get("provider_specific_entry")
    multiplier = to_decimal(specific.get("fast")) if isinstance(specific, dict) else None
    return multiplier if multiplier else None


def price_from_entry(model: str, entry: Mapping[str, Any]) -> ModelPrice:
    """Build the ModelPrice of one map entry; raise UnpricedModelError without token prices."""
    grid = _grid(entry)
    standard = {step: PriceSheet(**p) for (tier, step), p in grid.items() if tier == STANDARD}
    standard = _with_bands(standard, entry.get("tiered_pricing"))
    sheets: dict[str, dict[int, PriceSheet]] = {}
    for (tier, step), prices in grid.items():
        if tier != STANDARD:
            sheets.setdefault(tier, {})[step] = PriceSheet(**prices)
    tiers = {tier: TierPrice(sheets=by_step) for tier, by_step in sheets.items()}
    fast = _fast_multiplier(entry)
    if fast is not None:
        tiers.setdefault("fast", TierPrice(multiplier=fast))
    provider = entry.get("litellm_provider")
    provider = provider if isinstance(provider, str) else None
    return ModelPrice(
        model=model,
        standard=standard,
        tiers=tiers,
        provider=provider,
        inclusive_thresholds=provider in _INCLUSIVE_PROVIDERS,
    )
