"""The booking reuses what billing computed, with the same results as computing it again.

- `cost_of` keeps the rates it priced at (`CostBreakdown.rates`, the quote's), which
  equality ignores; the prefix verdict (`finish._judge_prefix`) reads them instead of
  looking the price up and quoting it again, and judges as a fresh quote would, also when
  the tier moved after the pricing (then it quotes afresh) and for an unpriced model.
- `verdict`: a request that missed nothing loses exactly `Decimal(0)`; float prices are
  still refused whatever the status.
- `ledger_record`'s prefix columns: the expected tokens, `status[:reason]`, the loss.
"""

from __future__ import annotations

import copy
import dataclasses
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.pipeline.context import RequestContext, TaskRef
from gateway.pipeline.decide import decide
from gateway.pipeline.finish import _judge_prefix
from gateway.pipeline.identify import identify
from gateway.pipeline.parse import parse
from gateway.pipeline.prefix import PrefixOutcome, judge
from gateway.pipeline.price import price_usage
from gateway.pipeline.record import booked_cost, ledger_record
from gateway.prefix import rule_for
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.compare import Divergence, Reason
from gateway.prefix.verdict import CacheStatus, verdict
from gateway.pricing import ModelPrice, PriceBook, PriceSheet, PricingError, cost_of
from gateway.usage import Usage

CONFIG = parse_config(
    "models:\n  m:\n    model: up\n    base_url: http://h/v1\n  free:\n    model: nowhere-9\n"
    "prices:\n  m:\n    input: 3\n    cached_input: 0.3\n    output: 15\n"
)
SERVICES: Any = SimpleNamespace(config=CONFIG, prices=PriceBook(CONFIG.prices))
PROMPT = {"model": "m", "messages": [{"role": "user", "content": "hello " * 400}]}


def _ctx(alias: str = "m", usage: Usage | None = None) -> RequestContext:
    body = f'{{"model":"{alias}","messages":[{{"role":"user","content":"x"}}]}}'.encode()
    ctx = RequestContext(raw_body=body, headers={}, request_id="req-1")
    parse(ctx)
    identify(ctx)
    decide(ctx, CONFIG)
    ctx.task = TaskRef(task_id="t-1")
    ctx.status_code, ctx.tier_served = 200, "standard"
    usage = usage or Usage(prompt_tokens=4000, cached_tokens=1000, completion_tokens=20)
    price_usage(ctx, usage, SERVICES.prices, CONFIG.price_key(alias))
    ctx.prefix = PrefixOutcome(PrefixChecker().check(PROMPT, rule_for("openai")), "openai", [])
    return ctx


def _fresh_verdict(ctx: RequestContext) -> Any:
    """The verdict judged with the price looked up and quoted again, on a copy."""
    assert ctx.alias is not None and ctx.usage is not None and ctx.prefix is not None
    again = copy.copy(ctx)
    again.prefix = prefix = dataclasses.replace(ctx.prefix)
    try:
        price = SERVICES.prices.price(CONFIG.price_key(ctx.alias))
        rates = price.quote(ctx.tier_served or "standard", ctx.usage.prompt_tokens).rates
        prices = rates.input, rates.cached_input
    except PricingError:  # an unpriced model: the verdict at zero prices
        prices = Decimal(0), Decimal(0)
    return judge(prefix, again, *prices)


def test_cost_of_keeps_the_quoted_rates_which_equality_ignores() -> None:
    price = ModelPrice(model="p", standard={0: PriceSheet(input=Decimal(1), output=Decimal(2))})
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    cost = cost_of(price, usage)
    assert cost.rates == price.quote("standard", 10).rates
    assert cost == dataclasses.replace(cost, rates=None)
    assert "rates" not in repr(cost)


@pytest.mark.parametrize("expected", [0, 1000, 3000])
def test_the_verdict_from_the_billed_rates_is_the_fresh_quotes(expected: int) -> None:
    ctx = _ctx()
    assert ctx.cost is not None and ctx.cost.rates is not None
    assert ctx.prefix is not None
    check = ctx.prefix.check  # expecting `expected` of the 4,000 tokens: a hit, then misses
    expectation = dataclasses.replace(check.expectation, prompt_tokens=4000, read_tokens=expected)
    ctx.prefix.check = dataclasses.replace(check, expectation=expectation, forecast=None)
    _judge_prefix(ctx, SERVICES)
    assert ctx.prefix.verdict == _fresh_verdict(ctx)
    assert ctx.prefix.verdict is not None
    assert ctx.prefix.verdict.expected_cached == expectation.scaled(4000)
    if expected == 3000:  # 2,944 expected, 1,000 read: a miss that lost money
        assert ctx.prefix.verdict.status is CacheStatus.MISS
        assert ctx.prefix.verdict.money_lost == 1944 * Decimal("0.0000027")


def test_a_tier_moved_after_pricing_is_quoted_afresh() -> None:
    ctx = _ctx()
    ctx.tier_served = "priority"  # the cost was priced at standard
    _judge_prefix(ctx, SERVICES)
    assert ctx.prefix is not None and ctx.prefix.verdict == _fresh_verdict(ctx)


def test_an_unpriced_model_is_judged_at_zero_prices() -> None:
    ctx = _ctx("free")
    assert ctx.cost is None
    _judge_prefix(ctx, SERVICES)
    assert ctx.prefix is not None and ctx.prefix.verdict == _fresh_verdict(ctx)
    assert ctx.prefix.verdict is not None and ctx.prefix.verdict.money_lost == 0


def test_nothing_missed_loses_exactly_zero_and_floats_are_still_refused() -> None:
    hit = verdict(1000, 1000, 2000, Decimal("0.000003"), Decimal("0.0000003"))
    assert hit.status is CacheStatus.HIT and hit.missed_tokens == 0
    assert hit.money_lost == Decimal(0) and str(hit.money_lost) == "0"
    missed = verdict(5000, 0, 5000, Decimal("0.000003"), Decimal("0.0000003"))
    assert missed.money_lost == Decimal(5000) * Decimal("0.0000027")
    with pytest.raises(TypeError, match="Decimal"):
        verdict(0, 0, 10, 3e-6, Decimal(0))  # type: ignore[arg-type]


def test_the_rows_prefix_columns() -> None:
    ctx = _ctx()
    ctx.prefix = None
    row = ledger_record(ctx, booked_cost(ctx))
    assert (row.expected_cached_tokens, row.prefix_status, row.prefix_lost_usd) == (None,) * 3
    ctx = _ctx()
    row = ledger_record(ctx, booked_cost(ctx))
    assert (row.expected_cached_tokens, row.prefix_status, row.prefix_lost_usd) == (
        None,
        "unjudged",
        None,
    )
    _judge_prefix(ctx, SERVICES)
    judged = ctx.prefix.verdict  # type: ignore[union-attr]
    assert judged is not None
    row = ledger_record(ctx, booked_cost(ctx))
    assert row.expected_cached_tokens == judged.expected_cached
    assert row.prefix_status == str(judged.status)
    assert row.prefix_lost_usd == judged.money_lost
    broke = Divergence(1, "user", Reason.VOLATILE_VALUE, "a timestamp", 10)
    ctx.prefix.check = dataclasses.replace(ctx.prefix.check, divergence=broke)  # type: ignore[union-attr]
    row = ledger_record(ctx, booked_cost(ctx))
    assert row.prefix_status == f"{judged.status}:volatile_value"
