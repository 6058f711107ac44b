"""Errors raised by the pricing package.

    PricingError
    ├── ModelMapError          litellm's bundled price map is missing or unreadable
    ├── UnknownModelError      no price for a model name (also a LookupError)
    │   └── UnpricedModelError the map knows the model but publishes no token price
    ├── PriceConfigError       a `prices:` entry in the configuration is invalid (ValueError)
    ├── UnknownTierError       a speed tier name is not one of `TIERS` (ValueError)
    └── UnknownCacheTtlError   a cache TTL is not one of `CACHE_TTLS` (ValueError)

The gateway maps `UnknownModelError` to a 404-style error for estimates and logs it for
served requests; the others are configuration or caller mistakes.
"""

from __future__ import annotations


class PricingError(Exception):
    """Base class of every pricing error."""


class ModelMapError(PricingError):
    """litellm's bundled model price map could not be found or read."""


class UnknownModelError(PricingError, LookupError):
    """No price is known for a model name."""

    def __str__(self) -> str:
        # LookupError would otherwise quote the message like a dict key.
        return str(self.args[0]) if self.args else ""


class UnpricedModelError(UnknownModelError):
    """The map has the model but no per-token price for it (e.g. per-image or per-second)."""


class PriceConfigError(PricingError, ValueError):
    """A `prices:` entry of the configuration is invalid."""


class UnknownTierError(PricingError, ValueError):
    """A speed tier name is not recognised."""


class UnknownCacheTtlError(PricingError, ValueError):
    """A prompt-cache TTL is not recognised."""
