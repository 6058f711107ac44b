"""Cost estimates for planned requests: `farebox cost` and `POST /v1/cost/estimate`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from gateway.pricing.book import PriceBook
from gateway.pricing.cost import CostBreakdown, cost_of
from gateway.pricing.errors import UnknownTierError
from gateway.pricing.tiers import STANDARD, check_tier
from gateway.usage import Usage


class CostEstimateRequest(BaseModel):
    """Token counts of a planned request; cached and cache writes are parts of the input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    input_tokens: int = Field(ge=0, description="whole input, cached and written included")
    cached_tokens: int = Field(default=0, ge=0, description="input read from the cache")
    cache_write_tokens: int = Field(default=0, ge=0, description="input written to the cache")
    cache_ttl: Literal["5m", "1h", "12h"] = "5m"
    output_tokens: int = Field(default=0, ge=0, description="whole output, reasoning included")
    reasoning_tokens: int = Field(default=0, ge=0, description="output spent on reasoning")
    tier: str = STANDARD

    @field_validator("cached_tokens", "cache_write_tokens")
    @classmethod
    def _within_input(cls, value: int, info: ValidationInfo) -> int:
        # Fields validate in order, so input_tokens (and cached_tokens) are already in `data`.
        total, parts = info.data.get("input_tokens"), value
        if info.field_name == "cache_write_tokens":
            parts += info.data.get("cached_tokens", 0)
        if total is not None and parts > total:
            raise ValueError(
                f"cached_tokens + cache_write_tokens ({parts}) must not exceed "
                f"input_tokens ({total}): they are parts of the input"
            )
        return value

    @field_validator("reasoning_tokens")
    @classmethod
    def _within_output(cls, value: int, info: ValidationInfo) -> int:
        total = info.data.get("output_tokens")
        if total is not None and value > total:
            raise ValueError(
                f"reasoning_tokens ({value}) must not exceed output_tokens ({total}): "
                "reasoning is part of the output"
            )
        return value

    @field_validator("tier")
    @classmethod
    def _known_tier(cls, value: str) -> str:
        try:
            return check_tier(value)
        except UnknownTierError as exc:
            raise ValueError(str(exc)) from exc

    def usage(self) -> Usage:
        """Return the planned request's token counts as an estimated Usage."""
        return Usage(
            prompt_tokens=self.input_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            completion_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
            estimated=True,
        )


def estimate_request(book: PriceBook, request: CostEstimateRequest) -> CostBreakdown:
    """Price a validated estimate request; raise UnknownModelError for an unknown model."""
    price = book.price(request.model)
    return cost_of(price, request.usage(), request.tier, cache_ttl=request.cache_ttl)


def estimate(
    book: PriceBook,
    model: str,
    input_tokens: int,
    cached: int = 0,
    cache_write: int = 0,
    output: int = 0,
    reasoning: int = 0,
    tier: str = STANDARD,
    cache_ttl: str = "5m",
) -> CostBreakdown:
    """Estimate the cost of a request; raise pydantic.ValidationError for impossible counts."""
    request = CostEstimateRequest.model_validate(
        {
            "model": model,
            "input_tokens": input_tokens,
            "cached_tokens": cached,
            "cache_write_tokens": cache_write,
            "cache_ttl": cache_ttl,
            "output_tokens": output,
            "reasoning_tokens": reasoning,
            "tier": tier,
        }
    )
    return estimate_request(book, request)
