"""The `prices:` section of the configuration: add models and override any price.

Prices are written in USD per **million** tokens, as providers publish them, and are
parsed as Decimal (`"0.30"`, `0.3` and `3e-1` are all exactly 0.3). Example:

    prices:
      claude-opus-5:                 # a map model: change only what is named
        tiers: {fast: {multiplier: 6}}
      my-coder:                      # an alias that starts from a map model
        base: anthropic/claude-sonnet-4-5
        output: 12
      llama-3.3-70b:                 # a self-hosted model, priced from GPU time
        gpu: {cost_per_hour: 2.50, gpus: 2, prefill_tokens_per_second: 20000,
              decode_tokens_per_second: 1500}
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from gateway.pricing.errors import PriceConfigError, UnpricedModelError
from gateway.pricing.gpu import GpuCost, planned_sheet
from gateway.pricing.money import PER_MILLION
from gateway.pricing.price import RATE_FIELDS, ModelPrice, PriceSheet, TierPrice

PerMillion = Annotated[Decimal, Field(ge=0, description="USD per million tokens")]
TierName = Literal["batch", "flex", "priority", "fast", "balanced", "ultrafast"]


class _Prices(BaseModel):
    """Per-token-kind prices in USD per million tokens; each one optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: PerMillion | None = None
    cached_input: PerMillion | None = None
    cache_write: PerMillion | None = None
    cache_write_1h: PerMillion | None = None
    cache_write_12h: PerMillion | None = None
    output: PerMillion | None = None
    reasoning: PerMillion | None = None

    def has_prices(self) -> bool:
        """Tell whether any price is given."""
        return any(getattr(self, name) is not None for name in RATE_FIELDS)

    def sheet(self) -> PriceSheet:
        """Return the given prices per token."""
        given = {name: getattr(self, name) for name in RATE_FIELDS}
        return PriceSheet(**{k: v / PER_MILLION for k, v in given.items() if v is not None})


class TierOverride(_Prices):
    """A tier priced as a multiple of standard, or by its own prices (others as standard)."""

    multiplier: Decimal | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_way(self) -> TierOverride:
        if (self.multiplier is None) == (not self.has_prices()):
            raise ValueError("give either `multiplier` or prices (input, output, ...), not both")
        return self

    def tier_price(self) -> TierPrice:
        """Return the TierPrice this entry describes."""
        if self.multiplier is not None:
            return TierPrice(multiplier=self.multiplier)
        return TierPrice(sheets={0: self.sheet()})


class LongContextOverride(_Prices):
    """Standard prices for prompts of more than `above_input_tokens` input tokens."""

    above_input_tokens: int = Field(gt=0)

    @model_validator(mode="after")
    def _has_prices(self) -> LongContextOverride:
        if not self.has_prices():
            raise ValueError("a long_context step needs at least one price (input, output, ...)")
        return self


class PriceOverride(_Prices):
    """One model's entry under `prices:`; everything not named keeps its map price."""

    base: str | None = Field(default=None, description="map model to start from")
    tiers: dict[TierName, TierOverride] = Field(default_factory=dict)
    long_context: list[LongContextOverride] = Field(default_factory=list)
    gpu: GpuCost | None = None

    @model_validator(mode="after")
    def _unique_steps(self) -> PriceOverride:
        steps = [step.above_input_tokens for step in self.long_context]
        if len(steps) != len(set(steps)):
            raise ValueError("long_context has two steps with the same above_input_tokens")
        return self


_OVERRIDES = TypeAdapter(dict[str, PriceOverride])


def parse_price_overrides(raw: Mapping[str, Any] | None) -> dict[str, PriceOverride]:
    """Validate the `prices:` section; raise PriceConfigError naming each bad field."""
    if raw is None:
        return {}
    try:
        return _OVERRIDES.validate_python(raw)
    except ValidationError as exc:
        problems = [
            f"prices{''.join(f'.{part}' for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        ]
        raise PriceConfigError("invalid price configuration:\n  " + "\n  ".join(problems)) from exc


def apply_override(model: str, override: PriceOverride, base: ModelPrice | None) -> ModelPrice:
    """Return `base` (or nothing) with every price the override names replaced."""
    standard = dict(base.standard) if base else {}
    tiers = dict(base.tiers) if base else {}
    top = override.sheet()
    if override.gpu is not None:
        top = planned_sheet(override.gpu).merged(top)
    standard[0] = standard.get(0, PriceSheet()).merged(top)
    for step in override.long_context:
        above = step.above_input_tokens
        standard[above] = standard.get(above, PriceSheet()).merged(step.sheet())
    # A configured tier replaces the map's tier whole: half-map, half-config tiers surprise.
    tiers.update({name: tier.tier_price() for name, tier in override.tiers.items()})
    try:
        return ModelPrice(
            model=model,
            standard=standard,
            tiers=tiers,
            provider=base.provider if base else None,
            inclusive_thresholds=base.inclusive_thresholds if base else False,
        )
    except UnpricedModelError as exc:
        raise PriceConfigError(
            f"prices.{model}: no input or output price; give `input` and `output`, "
            "a `gpu` cost, or a `base` model from litellm's map"
        ) from exc
