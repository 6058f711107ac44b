"""What the hot path builds once instead of per use gives what building it each time gave.

- `booked_cost(ctx)`: the rounded cost, kept on the context for the cost it was made from
  (the ledger row, `usage.cost` and the cost header read it); a new cost is rounded anew.
- `facts_of`: the policy's facts in one construction, equal to `RequestFacts.from_headers`
  followed by a `replace` of team and project (what it did before).
- `new_row_id`: a version 4 UUID string, as `str(uuid.uuid4())`.
- `rule_for`: one shared frozen rule per arguments.
- `money_str`: str() where it is plain notation, else format "f": the same text.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import parse_config
from gateway.ledger.records import new_row_id
from gateway.pipeline.context import RequestContext, TaskRef
from gateway.pipeline.decide import decide
from gateway.pipeline.identify import identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.parse import parse
from gateway.pipeline.policy import facts_of
from gateway.pipeline.record import BookedCost, booked_cost
from gateway.pipeline.respond import cost_headers, cost_object
from gateway.policy.facts import RequestFacts
from gateway.prefix.cache_rules import rule_for, rule_from_model_info
from gateway.pricing import ModelPrice, PriceSheet, cost_of
from gateway.pricing.money import money_str
from gateway.usage import Usage

CONFIG = parse_config("models:\n  m:\n    model: up\n    base_url: http://h/v1\n")
BODY = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'


def _ctx(**headers: str) -> RequestContext:
    ctx = RequestContext(raw_body=BODY, headers=headers)
    parse(ctx)
    identify(ctx)
    decide(ctx, CONFIG)
    return ctx


def _cost(prompt: int, completion: int) -> object:
    sheet = PriceSheet(input=Decimal("0.000001"), output=Decimal("0.000002"))
    price = ModelPrice(model="m", standard={0: sheet})
    return cost_of(price, Usage(prompt_tokens=prompt, completion_tokens=completion))


def test_the_booked_cost_is_rounded_once_per_cost() -> None:
    ctx = _ctx()
    unpriced = booked_cost(ctx)
    assert unpriced.total == 0 and booked_cost(ctx) is unpriced
    ctx.cost = _cost(1000, 10)  # type: ignore[assignment]
    first = booked_cost(ctx)
    assert first is not unpriced and first == BookedCost.of(ctx.cost)
    assert first.total == Decimal("0.00102") and booked_cost(ctx) is first
    assert cost_object(ctx)["total"] == "0.00102"
    assert cost_headers(ctx)["x-farebox-cost-usd"] == "0.00102"
    ctx.cost = _cost(2000, 10)  # type: ignore[assignment]  # a retry's, priced again
    assert booked_cost(ctx).total == Decimal("0.00202")
    assert cost_headers(ctx)["x-farebox-cost-usd"] == "0.00202"
    ctx.cost = None
    assert booked_cost(ctx).total == 0


def test_booked_total_is_the_sum_of_its_components() -> None:
    booked = BookedCost({"input": Decimal("0.1"), "output": Decimal("0.25")})
    assert booked.total == Decimal("0.35")


def test_facts_are_what_from_headers_and_replace_gave() -> None:
    sent = "café-team".encode().decode("latin-1")
    headers = {"x-farebox-team": sent, "x-farebox-project": "p", "x-speed-tier": "Flex"}
    headers |= {"x-farebox-tags": "a, B", "authorization": "Bearer k"}
    ctx = _ctx(**headers)
    assert ctx.task is not None
    ctx.task = TaskRef(task_id="t", step="tool_result", implicit=False)
    facts = facts_of(ctx, "m", task_effort="low")
    with_step = {**headers, "x-task-step-kind": "tool_result"}
    before = RequestFacts.from_headers(
        "m", with_step, caller=ctx.identity.caller, task_effort="low"
    )
    assert facts == replace(before, team=ctx.identity.team, project=ctx.identity.project)
    assert facts.team == "café-team" and facts.step_kind == "tool_result"
    assert facts.tier_header == "flex" and facts.tags == frozenset({"a", "b"})
    # A step kind the client names itself wins over the task's step.
    ctx = _ctx(**{"x-task-step-kind": "continuation"})
    ctx.task = TaskRef(task_id="t", step="tool_result", implicit=False)
    assert facts_of(ctx, "m").step_kind == "continuation"


def test_row_ids_are_version_4_uuids() -> None:
    ids = {new_row_id() for _ in range(2000)}
    assert len(ids) == 2000
    for row_id in list(ids)[:200]:
        parsed = uuid.UUID(row_id)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == row_id


def test_a_cache_rule_is_shared_and_equal_to_a_fresh_one() -> None:
    rule = rule_from_model_info("anthropic", {"prompt_cache_min_tokens": 2048})
    assert rule is rule_from_model_info("anthropic", {"prompt_cache_min_tokens": 2048})
    assert rule == rule_for.__wrapped__("anthropic", min_tokens=2048)
    assert rule.min_tokens == 2048
    assert rule_from_model_info("anthropic", {}).min_tokens != 2048


def test_a_quote_is_kept_per_price_and_tier_and_follows_a_new_price() -> None:
    sheet = PriceSheet(input=Decimal("0.000001"), output=Decimal("0.000002"))
    price = ModelPrice(model="m", standard={0: sheet})
    first = price.quote("standard", 10)
    assert price.quote("standard", 5_000_000) is first  # no long-context step
    assert first.rates.input == Decimal("0.000001") and first.tier == "standard"
    assert price.quote("flex").tier_fallback and price.quote("flex") is price.quote("flex")
    dearer = ModelPrice(model="m", standard={0: PriceSheet(input=Decimal("0.000003"))})
    assert dearer.quote("standard").rates.input == Decimal("0.000003")  # a reloaded price


def test_a_long_context_price_is_quoted_by_the_prompt_size() -> None:
    base = PriceSheet(input=Decimal("0.000001"), output=Decimal("0.000002"))
    longer = PriceSheet(input=Decimal("0.000004"))
    price = ModelPrice(model="m", standard={0: base, 200_000: longer})
    assert price.quote("standard", 1000).rates.input == Decimal("0.000001")
    assert price.quote("standard", 300_000).rates.input == Decimal("0.000004")
    assert price.quote("standard", 1000).rates.input == Decimal("0.000001")


@settings(max_examples=2000, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_money_is_rendered_as_format_f_renders_it(value: Decimal) -> None:
    # money_str takes str() where it is plain notation; it must equal format "f" always.
    expected = format(value.normalize(), "f") if value else "0"
    assert money_str(value) == expected
    assert "E" not in money_str(value)


def test_money_strings_of_typical_amounts() -> None:
    cases = {"0.0010200000": "0.00102", "100": "100", "1E+2": "100", "1.5E-7": "0.00000015"}
    cases |= {"0": "0", "-0.50": "-0.5", "0.000001": "0.000001", "12.3400": "12.34"}
    for value, text in cases.items():
        assert money_str(Decimal(value)) == text


def test_the_meter_reads_odd_chunks_as_before() -> None:
    ticks = iter(range(100))
    meter = Meter(clock=lambda: float(next(ticks)))
    meter.observe_chunk({"service_tier": "flex", "choices": "not a list"})
    meter.observe_chunk({"choices": [7, {"delta": "text", "finish_reason": ""}]})
    meter.observe_chunk({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "length"}]})
    meter.observe_chunk({"usage": None, "choices": []})
    assert meter.service_tier == "flex" and meter.usage is None
    assert meter.first_token == meter.first_answer_token == 2.0
    assert meter.finish_reason == "length" and meter.chunks == 4
    meter.observe_chunk({"usage": {"prompt_tokens": 3, "completion_tokens": 1, "speed": "fast"}})
    assert meter.usage is not None and meter.usage.prompt_tokens == 3 and meter.speed == "fast"
