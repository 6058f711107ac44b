"""Estimates for `farebox cost` and POST /v1/cost/estimate, and their validation."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.pricing import (
    CostEstimateRequest,
    PriceBook,
    UnknownModelError,
    estimate,
    estimate_request,
)


def test_estimate_matches_the_hand_computed_example(book: PriceBook) -> None:
    cost = estimate(book, "claude-sonnet-4-5", 50_000, cached=40_000, output=15_000)
    assert cost.total == Decimal("0.267")
    assert cost.estimated


def test_estimate_with_reasoning_tier_and_ttl(book: PriceBook) -> None:
    cost = estimate(book, "gpt-5", 2_000, output=5_000, reasoning=3_000, tier="flex")
    # 2,000 x 0.000000625 + 2,000 x 0.000005 + 3,000 x 0.000005
    assert cost.total == Decimal("0.00125") + Decimal("0.01") + Decimal("0.015")
    sonnet = estimate(book, "claude-sonnet-4-5", 20_000, cache_write=10_000, cache_ttl="1h")
    assert sonnet.cache_write == Decimal("0.06")  # 10,000 x 0.000006
    assert sonnet.total == Decimal("0.09")


def test_request_model_prices_the_same(book: PriceBook) -> None:
    request = CostEstimateRequest.model_validate(
        {"model": "gpt-5", "input_tokens": 50_000, "cached_tokens": 40_000, "output_tokens": 15_000}
    )
    assert estimate_request(book, request).total == Decimal("0.1675")


def test_unknown_model(book: PriceBook) -> None:
    with pytest.raises(UnknownModelError):
        estimate(book, "no-such-model", 1)


@pytest.mark.parametrize(
    ("fields", "location", "message"),
    [
        ({"input_tokens": -1}, "input_tokens", "greater than or equal to 0"),
        (
            {"input_tokens": 10, "cached_tokens": 11},
            "cached_tokens",
            "must not exceed input_tokens",
        ),
        (
            {"input_tokens": 10, "cached_tokens": 6, "cache_write_tokens": 5},
            "cache_write_tokens",
            "cached_tokens + cache_write_tokens (11) must not exceed input_tokens (10)",
        ),
        (
            {"input_tokens": 1, "output_tokens": 2, "reasoning_tokens": 3},
            "reasoning_tokens",
            "reasoning_tokens (3) must not exceed output_tokens (2)",
        ),
        ({"input_tokens": 1, "tier": "turbo"}, "tier", "unknown tier 'turbo'"),
        ({"input_tokens": 1, "cache_ttl": "2h"}, "cache_ttl", "'5m', '1h' or '12h'"),
        ({"input_tokens": 1, "cached": 1}, "cached", "Extra inputs are not permitted"),
        ({"input_tokens": 1, "model": ""}, "model", "at least 1 character"),
    ],
)
def test_validation_names_the_field(fields: dict[str, Any], location: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CostEstimateRequest.model_validate({"model": "gpt-5", **fields})
    errors = caught.value.errors()
    assert len(errors) == 1
    assert errors[0]["loc"] == (location,)
    assert message in errors[0]["msg"]


def test_tier_is_normalised() -> None:
    request = CostEstimateRequest(model="gpt-5", input_tokens=1, tier=" Flex ")
    assert request.tier == "flex"
