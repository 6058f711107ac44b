"""The `prices:` configuration: adding models, overriding map prices, and its errors."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml

from gateway.pricing import (
    PriceBook,
    PriceConfigError,
    PriceOverride,
    cost_of,
    parse_price_overrides,
)
from gateway.usage import Usage

EXAMPLE = Usage(prompt_tokens=50_000, cached_tokens=40_000, completion_tokens=15_000)

CONFIG = """
prices:
  claude-sonnet-4-5:
    input: 2.50
    output: "12"
  coder:
    base: anthropic/claude-sonnet-4-5
  house-model:
    input: 0.5
    output: 1.5
  thinker:
    input: 1
    output: 4
    reasoning: 2
  zai/glm-5.3:
    tiers:
      flex: {multiplier: 0.5}
      priority: {input: 2.8}
"""


@pytest.fixture(scope="module")
def configured() -> PriceBook:
    raw = yaml.safe_load(CONFIG)["prices"]
    return PriceBook.from_sources(parse_price_overrides(raw))


def test_override_replaces_only_named_prices(configured: PriceBook) -> None:
    cost = cost_of(configured.price("claude-sonnet-4-5"), EXAMPLE)
    assert cost.input == Decimal("0.025")  # 10,000 x 2.50 / 1M
    assert cost.cached == Decimal("0.012")  # the map's 3e-07, untouched
    assert cost.output == Decimal("0.18")  # 15,000 x 12 / 1M
    assert cost.total == Decimal("0.217")


def test_override_applies_under_a_provider_prefixed_name(configured: PriceBook) -> None:
    assert cost_of(configured.price("anthropic/claude-sonnet-4-5"), EXAMPLE).total == Decimal(
        "0.217"
    )


def test_alias_starts_from_its_base(configured: PriceBook) -> None:
    cost = cost_of(configured.price("coder"), EXAMPLE)
    assert cost.model == "coder"
    assert cost.total == Decimal("0.267")  # the map's claude-sonnet-4-5, not the override
    assert configured.cache_min_tokens("coder") == 1024
    assert configured.model_info("coder")["litellm_provider"] == "anthropic"


def test_new_model_bills_cache_reads_as_input(configured: PriceBook) -> None:
    cost = cost_of(configured.price("house-model"), EXAMPLE)
    assert cost.input + cost.cached == Decimal("0.025")  # 50,000 x 0.5 / 1M
    assert cost.output == Decimal("0.0225")


def test_configured_reasoning_price(configured: PriceBook) -> None:
    usage = Usage(prompt_tokens=1_000, completion_tokens=3_000, reasoning_tokens=2_000)
    cost = cost_of(configured.price("thinker"), usage)
    assert (cost.input, cost.output, cost.reasoning) == (
        Decimal("0.001"),
        Decimal("0.004"),  # 1,000 answer tokens x 4 / 1M
        Decimal("0.004"),  # 2,000 reasoning tokens x 2 / 1M
    )


def test_configured_multiplier_tier(configured: PriceBook) -> None:
    usage = Usage(prompt_tokens=100_000, cached_tokens=60_000, completion_tokens=10_000)
    price = configured.price("zai/glm-5.3")
    assert cost_of(price, usage).total == Decimal("0.1156")  # 0.056 + 0.0156 + 0.044
    flex = cost_of(price, usage, "flex")
    assert flex.total == Decimal("0.0578")
    assert (flex.priced_as, flex.multiplier, flex.tier_fallback) == (
        "standard",
        Decimal("0.5"),
        False,
    )


def test_configured_explicit_tier_keeps_standard_for_the_rest(configured: PriceBook) -> None:
    usage = Usage(prompt_tokens=100_000, cached_tokens=60_000, completion_tokens=10_000)
    cost = cost_of(configured.price("zai/glm-5.3"), usage, "priority")
    assert cost.input == Decimal("0.112")  # 40,000 x 2.8 / 1M
    assert cost.cached == Decimal("0.0156")  # standard cache read
    assert cost.output == Decimal("0.044")  # standard output
    assert cost.priced_as == "priority"


def test_prices_parse_as_exact_decimals() -> None:
    override = parse_price_overrides({"m": {"input": 0.1, "output": "3e-1"}})["m"]
    assert override.input == Decimal("0.1") and type(override.input) is Decimal
    assert override.output == Decimal("0.3")
    sheet = override.sheet()
    assert sheet.input == Decimal("0.0000001")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"m": {"input": -1}}, "prices.m.input: Input should be greater than or equal to 0"),
        ({"m": {"inptu": 1}}, "prices.m.inptu: Extra inputs are not permitted"),
        ({"m": {"input": "cheap"}}, "prices.m.input"),
        ({"m": {"tiers": {"turbo": {"multiplier": 2}}}}, "prices.m.tiers.turbo"),
        (
            {"m": {"tiers": {"flex": {"multiplier": 0.5, "input": 1}}}},
            "prices.m.tiers.flex: Value error, give either `multiplier` or prices",
        ),
        ({"m": {"tiers": {"flex": {}}}}, "give either `multiplier` or prices"),
        ({"m": {"tiers": {"flex": {"multiplier": 0}}}}, "prices.m.tiers.flex.multiplier"),
        ({"m": {"long_context": [{"above_input_tokens": 1000}]}}, "needs at least one price"),
        (
            {"m": {"long_context": [{"above_input_tokens": 9, "input": 1}] * 2}},
            "two steps with the same above_input_tokens",
        ),
        ({"m": {"gpu": {"cost_per_hour": 2}}}, "prices.m.gpu.prefill_tokens_per_second"),
        ([1, 2], "prices: Input should be a valid dictionary"),
    ],
)
def test_invalid_config_names_the_field(raw: Any, message: str) -> None:
    with pytest.raises(PriceConfigError) as caught:
        parse_price_overrides(raw)
    assert message in str(caught.value)


def test_unknown_base_fails_at_startup() -> None:
    overrides = {"alias": PriceOverride(base="no-such-model")}
    with pytest.raises(PriceConfigError, match=r"prices\.alias\.base: 'no-such-model' is not in"):
        PriceBook.from_sources(overrides)


def test_new_model_without_prices_fails_at_startup() -> None:
    overrides = parse_price_overrides({"house": {"cached_input": 0.1}})
    with pytest.raises(PriceConfigError, match=r"prices\.house: no input or output price"):
        PriceBook.from_sources(overrides, model_map={})


def test_empty_config() -> None:
    assert parse_price_overrides(None) == {}
    assert parse_price_overrides({}) == {}


def test_overriding_output_also_prices_reasoning() -> None:
    # gemini-3.5-flash publishes output_cost_per_reasoning_token 9e-06 in the map.
    book = PriceBook.from_sources(parse_price_overrides({"gemini-3.5-flash": {"output": 12}}))
    rates = book.price("gemini-3.5-flash").quote().rates
    assert rates.output == rates.reasoning == Decimal("0.000012")
    kept = parse_price_overrides({"gemini-3.5-flash": {"output": 12, "reasoning": 10}})
    rates = PriceBook.from_sources(kept).price("gemini-3.5-flash").quote().rates
    assert rates.reasoning == Decimal("0.00001")
