"""Self-hosted backends (vLLM, SGLang) cost GPU time, not tokens; price them two ways.

*Planned*: from the configured throughput, one token of input costs the GPU seconds its
prefill takes, and one token of output the seconds its decode takes:

    input price  = cost per second / prefill tokens per second
    output price = cost per second / decode tokens per second

*Effective*: what each token actually cost in a given hour, the hour's GPU bill divided by
the tokens served in it. `GpuHourMeter` accumulates the tokens; an idle GPU still costs
its hour, so a quiet hour shows up as expensive tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from pydantic import BaseModel, ConfigDict, Field

from gateway.pricing.money import PER_MILLION, ZERO
from gateway.pricing.price import ModelPrice, PriceSheet

SECONDS_PER_HOUR = Decimal(3600)
# Planned prices are rounded to 10^-15 USD per token (10^-9 USD per million tokens), so that
# costs computed from them stay exact Decimal products.
_TOKEN_PRICE_QUANTUM = Decimal("1e-15")
_PER_MILLION_QUANTUM = Decimal("0.000001")
_RATIO_QUANTUM = Decimal("0.0001")


class GpuCost(BaseModel):
    """The `gpu:` section of a self-hosted model's price entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cost_per_hour: Decimal = Field(ge=0, description="USD per GPU per hour")
    gpus: int = Field(default=1, ge=1, description="GPUs the deployment occupies")
    prefill_tokens_per_second: Decimal = Field(gt=0, description="input tokens/s, whole deployment")
    decode_tokens_per_second: Decimal = Field(gt=0, description="output tokens/s, whole deployment")
    cached_input_fraction: Decimal = Field(
        default=ZERO, ge=0, le=1, description="cost of a prefix-cache hit as a fraction of input"
    )

    @property
    def hourly_cost(self) -> Decimal:
        """Return the USD cost of one hour of the whole deployment."""
        return self.cost_per_hour * self.gpus

    def token_price(self, tokens_per_second: Decimal) -> Decimal:
        """Return the USD price of one token processed at `tokens_per_second`."""
        price = self.hourly_cost / (SECONDS_PER_HOUR * tokens_per_second)
        return price.quantize(_TOKEN_PRICE_QUANTUM, rounding=ROUND_HALF_EVEN)


def planned_sheet(gpu: GpuCost) -> PriceSheet:
    """Return per-token prices planned from the GPU cost and throughput."""
    price_in = gpu.token_price(gpu.prefill_tokens_per_second)
    price_out = gpu.token_price(gpu.decode_tokens_per_second)
    return PriceSheet(
        input=price_in,
        # A prefix-cache hit skips prefill, which is all an input token costs here.
        cached_input=(price_in * gpu.cached_input_fraction).quantize(_TOKEN_PRICE_QUANTUM),
        cache_write=price_in,
        output=price_out,
        reasoning=price_out,
    )


def planned_price(model: str, gpu: GpuCost) -> ModelPrice:
    """Return the planned ModelPrice of a self-hosted model."""
    return ModelPrice(model=model, standard={0: planned_sheet(gpu)})


@dataclass(frozen=True, slots=True)
class EffectiveCost:
    """GPU time paid for over whole hours, against the tokens served in them."""

    start: datetime
    hours: int
    gpu_cost: Decimal
    input_tokens: int
    output_tokens: int
    planned_cost: Decimal  # what the served tokens cost at the planned per-token prices
    planned_input: Decimal  # planned USD per input token
    planned_output: Decimal  # planned USD per output token

    @property
    def tokens(self) -> int:
        """Return all tokens served, input and output."""
        return self.input_tokens + self.output_tokens

    @property
    def per_million_tokens(self) -> Decimal | None:
        """Return USD per million tokens served, blended; None when nothing was served."""
        if not self.tokens:
            return None
        return (self.gpu_cost * PER_MILLION / self.tokens).quantize(_PER_MILLION_QUANTUM)

    @property
    def utilisation(self) -> Decimal:
        """Return the share of the GPU time that the served tokens needed at planned throughput."""
        if not self.gpu_cost:
            return ZERO
        return (self.planned_cost / self.gpu_cost).quantize(_RATIO_QUANTUM)

    @property
    def input_per_million(self) -> Decimal | None:
        """Return the effective USD per million input tokens (planned price / utilisation)."""
        return self._effective(self.planned_input)

    @property
    def output_per_million(self) -> Decimal | None:
        """Return the effective USD per million output tokens (planned price / utilisation)."""
        return self._effective(self.planned_output)

    def _effective(self, planned: Decimal) -> Decimal | None:
        if not self.planned_cost:
            return None
        scaled = planned * PER_MILLION * self.gpu_cost / self.planned_cost
        return scaled.quantize(_PER_MILLION_QUANTUM)


def _hour_index(at: datetime | float) -> int:
    """Return the hour bucket of a timestamp: whole hours since the Unix epoch, UTC."""
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise ValueError("give a timezone-aware datetime, e.g. datetime.now(UTC)")
        at = at.timestamp()
    return int(at // 3600)


class GpuHourMeter:
    """Count the tokens one self-hosted deployment served, per hour, to find their real cost.

    Not thread-safe: keep one per event loop, or serialise calls to `record`.
    """

    def __init__(self, gpu: GpuCost, retain_hours: int = 168) -> None:
        self._gpu = gpu
        self._planned = planned_sheet(gpu)
        self._retain = retain_hours
        self._hours: dict[int, tuple[int, int]] = {}

    def record(self, at: datetime | float, input_tokens: int, output_tokens: int) -> None:
        """Add the tokens of one request served at `at` (a datetime or Unix seconds)."""
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError("token counts must not be negative")
        hour = _hour_index(at)
        seen_in, seen_out = self._hours.get(hour, (0, 0))
        self._hours[hour] = (seen_in + input_tokens, seen_out + output_tokens)
        if len(self._hours) > self._retain:
            newest = max(self._hours)
            for old in [h for h in self._hours if h <= newest - self._retain]:
                del self._hours[old]

    def effective(self, at: datetime | float) -> EffectiveCost:
        """Return the cost of the hour containing `at` against the tokens served in it.

        The hour is charged in full, so the current hour reads high until it is over.
        """
        hour = _hour_index(at)
        return self._over(hour, hour + 1)

    def effective_span(self, start: datetime | float, end: datetime | float) -> EffectiveCost:
        """Return the cost of the hours from `start`'s through `end`'s, idle ones included."""
        first, last = _hour_index(start), _hour_index(end)
        if last < first:
            raise ValueError("end must not be before start")
        return self._over(first, last + 1)

    def _over(self, first: int, stop: int) -> EffectiveCost:
        """Sum hours first..stop-1."""
        counts = [self._hours.get(h, (0, 0)) for h in range(first, stop)]
        tokens_in = sum(c[0] for c in counts)
        tokens_out = sum(c[1] for c in counts)
        price_in, price_out = self._planned.input or ZERO, self._planned.output or ZERO
        return EffectiveCost(
            start=datetime.fromtimestamp(0, UTC) + timedelta(hours=first),
            hours=stop - first,
            gpu_cost=self._gpu.hourly_cost * (stop - first),
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            planned_cost=tokens_in * price_in + tokens_out * price_out,
            planned_input=price_in,
            planned_output=price_out,
        )
