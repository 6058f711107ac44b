"""Long-context price steps, chosen by the whole prompt's size.

gemini-2.5-pro (vertex) in the map, USD per token:
    base      input 1.25e-06, read 1.25e-07, output 1e-05
    >200k     input 2.5e-06,  read 2.5e-07,  output 1.5e-05
    priority  >200k: input 4.5e-06, read 4.5e-07, output 2.7e-05
xai/grok-4.3: input 1.25e-06 / 2.5e-06 from 200k, output 2.5e-06 / 5e-06 (xAI: from, not above).
"""

from __future__ import annotations

from decimal import Decimal

from gateway.pricing import PriceBook, cost_of, parse_price_overrides
from gateway.usage import Usage


def test_step_applies_above_threshold(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=250_000, cached_tokens=50_000, completion_tokens=10_000)
    cost = cost_of(book.price("gemini-2.5-pro"), usage)
    assert book.price("gemini-2.5-pro").thresholds() == [200_000]
    assert cost.long_context_above == 200_000
    assert cost.input == Decimal("0.5")  # 200,000 x 0.0000025
    assert cost.cached == Decimal("0.0125")  # 50,000 x 0.00000025
    assert cost.output == Decimal("0.15")  # 10,000 x 0.000015
    assert cost.total == Decimal("0.6625")


def test_threshold_itself_is_base_price(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=200_000, cached_tokens=50_000, completion_tokens=10_000)
    cost = cost_of(book.price("gemini-2.5-pro"), usage)
    assert cost.long_context_above == 0
    assert cost.total == Decimal("0.1875") + Decimal("0.00625") + Decimal("0.1")


def test_tier_specific_step(book: PriceBook) -> None:
    usage = Usage(prompt_tokens=250_000, cached_tokens=50_000, completion_tokens=10_000)
    cost = cost_of(book.price("gemini-2.5-pro"), usage, "priority")
    assert (cost.input, cost.cached, cost.output) == (
        Decimal("0.9"),  # 200,000 x 0.0000045
        Decimal("0.0225"),  # 50,000 x 0.00000045
        Decimal("0.27"),  # 10,000 x 0.000027
    )


def test_xai_bills_the_step_from_the_threshold(book: PriceBook) -> None:
    cost = cost_of(
        book.price("xai/grok-4.3"), Usage(prompt_tokens=200_000, completion_tokens=1_000)
    )
    assert cost.long_context_above == 200_000
    assert cost.total == Decimal("0.505")  # 200,000 x 0.0000025 + 1,000 x 0.000005


def test_configured_step_for_a_new_model() -> None:
    overrides = parse_price_overrides(
        {
            "big": {
                "input": "1",
                "output": 2,
                "long_context": [{"above_input_tokens": 100_000, "input": 2, "output": "4"}],
            }
        }
    )
    price = PriceBook.from_sources(overrides, model_map={}).price("big")
    small = cost_of(price, Usage(prompt_tokens=100_000, completion_tokens=1_000))
    assert small.total == Decimal("0.102")  # 100,000 x 0.000001 + 1,000 x 0.000002
    usage = Usage(prompt_tokens=150_000, cached_tokens=50_000, completion_tokens=1_000)
    large = cost_of(price, usage)
    # No cache price is configured, so cached tokens cost the step's input price.
    assert (large.input, large.cached, large.output) == (
        Decimal("0.2"),
        Decimal("0.1"),
        Decimal("0.004"),
    )
