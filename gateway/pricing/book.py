"""The price book: litellm's map, with the configured `prices:` laid over it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.pricing import catalog
from gateway.pricing.errors import PriceConfigError, UnknownModelError, UnpricedModelError
from gateway.pricing.map_prices import price_from_entry
from gateway.pricing.overrides import PriceOverride, apply_override
from gateway.pricing.price import ModelPrice


class PriceBook:
    """Prices of every model the gateway may call.

    A name is looked up in the configured overrides first, then in litellm's map (exact
    key, `provider/model`, `alias_of`); a map model with an override under its own map
    key gets that override whichever name it is asked by. The map is read on first use.
    """

    def __init__(
        self,
        overrides: Mapping[str, PriceOverride] | None = None,
        *,
        model_map: Mapping[str, Any] | None = None,
        map_path: Path | None = None,
    ) -> None:
        self._overrides = dict(overrides or {})
        self._model_map = model_map
        self._map_path = map_path
        self._prices: dict[str, ModelPrice] = {}

    @classmethod
    def from_sources(
        cls,
        overrides: Mapping[str, PriceOverride] | None = None,
        *,
        model_map: Mapping[str, Any] | None = None,
        map_path: Path | None = None,
    ) -> PriceBook:
        """Build a book and price every override now, so a bad config fails at start-up."""
        book = cls(overrides, model_map=model_map, map_path=map_path)
        for name in book._overrides:
            book.price(name)
        return book

    @property
    def model_map(self) -> Mapping[str, Any]:
        """Return litellm's price map, reading it on first use (a `catalog.ModelMap`)."""
        if self._model_map is None:
            self._model_map = catalog.ModelMap(self._map_path)
        return self._model_map

    def trim_map(self) -> None:
        """Keep only the map entries read so far (see `catalog.ModelMap`); lookups of other
        names still answer as before, reading the file again for an entry not kept."""
        if isinstance(self._model_map, catalog.ModelMap):
            self._model_map.trim()

    @property
    def priced(self) -> frozenset[str]:
        """Names already priced (and cached): a lookup of these costs a dict access."""
        return frozenset(self._prices)

    def price(self, model: str) -> ModelPrice:
        """Return the prices of `model`, or raise UnknownModelError."""
        known = self._prices.get(model)
        if known is None:
            known = self._prices[model] = self._build(model)
        return known

    def knows(self, model: str) -> bool:
        """Tell whether `model` has a price."""
        try:
            self.price(model)
        except UnknownModelError:
            return False
        return True

    def model_info(self, model: str) -> dict[str, Any]:
        """Return a copy of the raw map entry behind `model` (following an override's base)."""
        return catalog.model_info(self._map_name(model), self.model_map)

    def cache_min_tokens(self, model: str) -> int | None:
        """Return the fewest prompt tokens the provider caches for `model`, if published."""
        return catalog.cache_min_tokens(self._map_name(model), self.model_map)

    def _map_name(self, model: str) -> str:
        override = self._overrides.get(model)
        return override.base if override is not None and override.base else model

    def _build(self, model: str) -> ModelPrice:
        override = self._overrides.get(model)
        key = catalog.find_key(self.model_map, model)
        if override is None and key is not None:
            override = self._overrides.get(key)
        if override is None:
            return price_from_entry(model, catalog.map_entry(self.model_map, model))
        return apply_override(model, override, self._base(model, override, key))

    def _base(self, model: str, override: PriceOverride, key: str | None) -> ModelPrice | None:
        """Return the map prices an override starts from: its `base`, else its own name's."""
        if override.base is not None:
            key = catalog.find_key(self.model_map, override.base)
            if key is None:
                raise PriceConfigError(
                    f"prices.{model}.base: {override.base!r} is not in litellm's price map"
                )
        if key is None:
            return None
        try:
            return price_from_entry(key, self.model_map[key])
        except UnpricedModelError:
            return None  # e.g. a per-image model the override prices per token
