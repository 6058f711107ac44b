"""Costs of requests against litellm's bundled map; every expected value is hand-computed.

Map prices used (USD per token):
    claude-sonnet-4-5  input 3e-06, cache read 3e-07, write 3.75e-06, write 1h 6e-06,
                       output 1.5e-05; batches: input 1.5e-06, read 1.5e-07, output 7.5e-06
    gpt-5              input 1.25e-06, read 1.25e-07, output 1e-05
                       flex & batches: 6.25e-07 / 6.25e-08 / 5e-06
                       priority: 2.5e-06 / 2.5e-07 / 2e-05
    claude-opus-5      input 5e-06, output 2.5e-05, provider_specific_entry.fast = 2.0
    zai/glm-5.3        input 1.4e-06, read 2.6e-07, write 0, output 4.4e-06
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gateway.pricing import (
    COMPONENTS,
    CostBreakdown,
    PriceBook,
    UnknownCacheTtlError,
    UnknownTierError,
    cost_of,
)
from gateway.usage import Usage

# The brief's example: 50,000 input of which 40,000 cached, 15,000 output.
EXAMPLE = Usage(prompt_tokens=50_000, cached_tokens=40_000, completion_tokens=15_000)


def assert_all_decimal(cost: CostBreakdown) -> None:
    for name in (*COMPONENTS, "total", "multiplier"):
        assert type(getattr(cost, name)) is Decimal, name
    assert all(type(share) is Decimal for share in cost.shares().values())


def test_cached_read_on_claude_sonnet(book: PriceBook) -> None:
    cost = cost_of(book.price("claude-sonnet-4-5"), EXAMPLE)
    assert cost.input == Decimal("0.03")  # 10,000 x 0.000003
    assert cost.cached == Decimal("0.012")  # 40,000 x 0.0000003
    assert cost.cache_write == Decimal("0")
    assert cost.output == Decimal("0.225")  # 15,000 x 0.000015
    assert cost.reasoning == Decimal("0")
    assert cost.total == Decimal("0.267")
    assert cost.shares() == {
        "input": Decimal("0.1124"),  # 0.03 / 0.267
        "cached": Decimal("0.0449"),
        "cache_write": Decimal("0"),
        "output": Decimal("0.8427"),
        "reasoning": Decimal("0"),
    }
    assert_all_decimal(cost)


def test_same_example_on_gpt5(book: PriceBook) -> None:
    cost = cost_of(book.price("gpt-5"), EXAMPLE)
    assert (cost.input, cost.cached, cost.output) == (
        Decimal("0.0125"),
        Decimal("0.005"),
        Decimal("0.15"),
    )
    assert cost.total == Decimal("0.1675")


def test_cache_writes_at_two_ttls(book: PriceBook) -> None:
    usage = Usage(
        prompt_tokens=30_000,
        cached_tokens=10_000,
        cache_write_tokens=8_000,
        cache_write_1h_tokens=4_000,
        completion_tokens=1_000,
    )
    cost = cost_of(book.price("claude-sonnet-4-5"), usage)
    assert cost.input == Decimal("0.024")  # 8,000 uncached x 0.000003
    assert cost.cached == Decimal("0.003")
    assert cost.cache_write == Decimal("0.054")  # 8,000 x 0.00000375 + 4,000 x 0.000006
    assert cost.output == Decimal("0.015")
    assert cost.total == Decimal("0.096")
    # Unsplit writes made with a 1-hour TTL: all 12,000 at 0.000006.
    assert cost_of(book.price("claude-sonnet-4-5"), usage, cache_ttl="1h").cache_write == Decimal(
        "0.072"
    )


def test_unknown_cache_ttl_is_refused(book: PriceBook) -> None:
    with pytest.raises(UnknownCacheTtlError, match="5m, 1h, 12h"):
        cost_of(book.price("claude-sonnet-4-5"), EXAMPLE, cache_ttl="2h")


def test_reasoning_tokens_default_to_output_price(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=2_000, completion_tokens=5_000, reasoning_tokens=3_000)
    cost = cost_of(book.price("gpt-5"), usage)
    assert cost.input == Decimal("0.0025")
    assert cost.output == Decimal("0.02")  # 2,000 answer tokens x 0.00001
    assert cost.reasoning == Decimal("0.03")  # 3,000 x 0.00001
    assert cost.total == Decimal("0.0525")


@pytest.mark.parametrize(
    ("tier", "priced_as", "total"),
    [
        ("flex", "flex", Decimal("0.08375")),  # 0.00625 + 0.0025 + 0.075
        ("batch", "batch", Decimal("0.08375")),
        ("priority", "priority", Decimal("0.335")),  # 0.025 + 0.01 + 0.3
        ("fast", "priority", Decimal("0.335")),  # OpenAI serves fast as priority
    ],
)
def test_gpt5_tiers_from_map_keys(
    book: PriceBook, tier: str, priced_as: str, total: Decimal
) -> None:
    cost = cost_of(book.price("gpt-5"), EXAMPLE, tier)
    assert (cost.tier, cost.priced_as, cost.tier_fallback) == (tier, priced_as, False)
    assert cost.total == total
    assert cost.multiplier == Decimal(1)


def test_batch_tier_on_claude(book: PriceBook) -> None:
    cost = cost_of(book.price("claude-sonnet-4-5"), EXAMPLE, "batch")
    # 10,000 x 0.0000015 + 40,000 x 0.00000015 + 15,000 x 0.0000075
    assert cost.total == Decimal("0.015") + Decimal("0.006") + Decimal("0.1125")


def test_anthropic_fast_mode_multiplier(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=10_000, completion_tokens=2_000)
    price = book.price("anthropic/claude-opus-5")
    assert cost_of(price, usage).total == Decimal("0.1")  # 0.05 + 0.05
    fast = cost_of(price, usage, "fast")
    assert (fast.input, fast.output, fast.total) == (Decimal("0.1"), Decimal("0.1"), Decimal("0.2"))
    assert (fast.priced_as, fast.multiplier) == ("standard", Decimal(2))
    assert fast.as_dict()["multiplier"] == "2"


def test_unpriced_tier_falls_back_to_standard_with_a_flag(book: PriceBook) -> None:
    price = book.price("claude-opus-5")
    assert not price.has_tier("priority")
    cost = cost_of(price, Usage(prompt_tokens=10_000, completion_tokens=2_000), "priority")
    assert cost.total == Decimal("0.1")
    assert (cost.tier, cost.priced_as, cost.tier_fallback) == ("priority", "standard", True)


def test_unknown_tier_is_refused(book: PriceBook) -> None:
    with pytest.raises(UnknownTierError, match="use one of standard, batch"):
        cost_of(book.price("gpt-5"), EXAMPLE, "turbo")


def test_zai_glm_with_free_cache_writes(book: PriceBook) -> None:
    usage = Usage(
        prompt_tokens=100_000,
        cached_tokens=60_000,
        cache_write_tokens=20_000,
        completion_tokens=10_000,
    )
    cost = cost_of(book.price("zai/glm-5.3"), usage)
    assert cost.input == Decimal("0.028")  # 20,000 x 0.0000014
    assert cost.cached == Decimal("0.0156")  # 60,000 x 0.00000026
    assert cost.cache_write == Decimal("0")  # the map's explicit 0 stays a price
    assert cost.output == Decimal("0.044")
    assert cost.total == Decimal("0.0876")


def test_as_dict_is_json_safe_and_exact(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=1, cached_tokens=1, completion_tokens=1)
    data = cost_of(book.price("gpt-5"), usage, "flex").as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["cached"] == "0.0000000625"  # never "6.25E-8"
    assert data["total"] == "0.0000050625"
    assert data["currency"] == "USD"
    assert set(data["shares"]) == set(COMPONENTS)


def test_zero_usage_costs_zero(book: PriceBook) -> None:
    cost = cost_of(book.price("gpt-5"), Usage())
    assert cost.total == 0
    assert cost.share("input") == 0
    assert cost.as_dict()["total"] == "0"


def test_estimated_usage_is_flagged(book: PriceBook) -> None:
    cost = cost_of(book.price("gpt-5"), Usage(prompt_tokens=10, estimated=True))
    assert cost.estimated and cost.as_dict()["estimated"] is True
