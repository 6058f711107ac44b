"""`cost_of` multiplies in its own exact context, whatever the caller's context is.

It used to enter `localcontext(Context(prec=60))` per request; now it calls that context's
`multiply` and `add` directly, and a multiplier tier's rates are scaled the same way. These
tests compare every component with the products taken under `localcontext` (the old
form), for long prices and counts, under a caller's context of few digits too.
"""

from __future__ import annotations

from decimal import Context, Decimal, localcontext

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pricing import cost_of
from gateway.pricing.price import ModelPrice, PriceSheet, Rates, TierPrice
from gateway.usage import Usage

EXACT = Context(prec=60)
PRICES = st.decimals(min_value=Decimal("1e-12"), max_value=Decimal("0.01"), places=24)
COUNTS = st.integers(min_value=0, max_value=10**9)


def _price(input_: Decimal, output: Decimal, write: Decimal, multiplier: Decimal) -> ModelPrice:
    sheet = PriceSheet(input=input_, output=output, cache_write=write, cache_write_1h=write * 2)
    return ModelPrice("m", {0: sheet}, tiers={"fast": TierPrice(multiplier=multiplier)})


@settings(max_examples=200, deadline=None)
@given(PRICES, PRICES, PRICES, PRICES, COUNTS, COUNTS, COUNTS, COUNTS, st.booleans())
def test_components_are_the_exact_products(
    input_: Decimal, output: Decimal, write: Decimal, multiplier: Decimal,
    prompt: int, completion: int, writes: int, writes_1h: int, fast: bool,
) -> None:  # fmt: skip
    price = _price(input_, output, write, multiplier)
    usage = Usage(
        prompt_tokens=prompt + writes + writes_1h,
        completion_tokens=completion,
        cache_write_tokens=writes,
        cache_write_1h_tokens=writes_1h,
    )
    with localcontext(Context(prec=3)):  # a caller's context changes nothing
        cost = cost_of(price, usage, "fast" if fast else "standard")
    with localcontext(EXACT):
        scale = multiplier if fast else Decimal(1)
        rates = Rates(input_ * scale, input_ * scale, write * scale, write * 2 * scale,
                      write * scale, output * scale, output * scale)  # fmt: skip
        assert cost.input == usage.uncached_input_tokens * rates.input
        assert cost.cache_write == writes * rates.cache_write + writes_1h * rates.cache_write_1h
        assert cost.output == usage.answer_tokens * rates.output
        assert cost.total == cost.input + cost.cache_write + cost.output
