"""Speed tiers: their names, and which one the upstream actually served."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.pricing.errors import UnknownCacheTtlError, UnknownTierError

STANDARD = "standard"

# The five tiers Farebox routes by, then two that litellm's map prices for some OpenAI-style
# providers (`_balanced`, `_ultrafast` keys); accepting them costs nothing.
TIERS: tuple[str, ...] = ("standard", "batch", "flex", "priority", "fast", "balanced", "ultrafast")

# OpenAI serves a `fast` request on priority capacity and bills it at priority prices,
# so a model without its own fast price but with priority prices is priced as priority.
TIER_ALIASES: Mapping[str, str] = MappingProxyType({"fast": "priority"})

# TTLs a cache write can be priced at: the default (5 minutes), Anthropic's 1 hour and
# OpenAI's extended 12 hours (`cache_creation_input_token_cost_above_{1hr,12hr}`).
CACHE_TTLS: tuple[str, ...] = ("5m", "1h", "12h")

# What upstreams echo as `service_tier` (or send as a request) -> the tier we bill.
_SERVED: Mapping[str, str] = MappingProxyType(
    {
        **{tier: tier for tier in TIERS},
        "default": STANDARD,  # OpenAI's name for standard processing
        "auto": STANDARD,  # a request for "auto" that comes back unresolved was standard
        "on_demand": STANDARD,
        "standard_only": STANDARD,  # Anthropic's request value
        "scale": "priority",  # OpenAI's legacy Scale Tier: reserved capacity, priced as priority
        "batches": "batch",
    }
)


def check_tier(tier: str) -> str:
    """Return the tier name normalised, or raise UnknownTierError naming the valid ones."""
    name = tier.strip().lower()
    if name not in TIERS:
        raise UnknownTierError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
    return name


def check_cache_ttl(ttl: str) -> str:
    """Return the cache TTL, or raise UnknownCacheTtlError naming the valid ones."""
    if ttl not in CACHE_TTLS:
        raise UnknownCacheTtlError(f"unknown cache TTL {ttl!r}: use one of {', '.join(CACHE_TTLS)}")
    return ttl


def _known(value: str | None) -> str | None:
    return _SERVED.get(value.strip().lower()) if value else None


@dataclass(frozen=True, slots=True)
class ServedTier:
    """The tier to bill and whether the upstream said so (False: the request's, unconfirmed)."""

    tier: str
    confirmed: bool


def settle_served(
    requested: str | None,
    echoed: str | None,
    speed: str | None = None,
    *,
    self_hosted: bool = False,
) -> ServedTier:
    """The tier the upstream served: its own word first, the request's only as a fallback.

    - Anthropic's `usage.speed` ("fast" or "standard") says whether fast mode ran; its
      `usage.service_tier` ("standard", "priority", "batch") says which capacity served.
    - OpenAI echoes `service_tier` in every reply and stream chunk.
    - A self-hosted pool (vLLM, SGLang) is the tier its route is configured as: confirmed.
    - Anything else falls back to what was requested, marked unconfirmed.
    """
    if self_hosted:
        return _SETTLED[_known(requested) or STANDARD, True]
    if speed and speed.strip().lower() in ("fast", "standard"):
        fast = speed.strip().lower() == "fast"
        return _SETTLED["fast" if fast else (_known(echoed) or STANDARD), True]
    echo = _known(echoed)
    if echo:
        return _SETTLED[echo, True]
    return _SETTLED[_known(requested) or STANDARD, False]


# Every answer `settle_served` can give (`_known` names only tiers), made once: a frozen
# dataclass's construction sets each field through `object.__setattr__`, per request.
_SETTLED: Mapping[tuple[str, bool], ServedTier] = MappingProxyType(
    {
        (tier, confirmed): ServedTier(tier, confirmed)
        for tier in TIERS
        for confirmed in (True, False)
    }
)


def served_tier(requested: str | None, echoed: str | None, speed: str | None = None) -> str:
    """Return the tier to bill: the upstream's echo wins over the request, standard by default.

    `speed` is Anthropic's separate `usage.speed` field: "fast" there means fast mode even
    though `service_tier` still says "standard". Unrecognised echoes are ignored.
    """
    return settle_served(requested, echoed, speed).tier
