"""A break is measured against the forecast; announcements fit the prompt; no breakpoints,
no cache on Anthropic."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gateway.prefix import CacheStatus, PrefixChecker, PrefixRecord, rule_for, verdict
from gateway.prefix.cacheability import NO_BREAKPOINTS, uncacheable
from gateway.prefix.lint import lint_request
from gateway.prefix.segments import split_request

SYSTEM = "You are a meticulous research agent. " * 200  # ~1,850 tokens by the estimate


def _body(step: int, top: str = "", **extra: Any) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": top + SYSTEM}]
    for i in range(step):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    messages.append({"role": "user", "content": f"question {step}"})
    return {"model": "gpt-5", "messages": messages, **extra}


def _stored(record: PrefixRecord, reported: int = 0) -> PrefixRecord:
    data = record.to_dict()
    data["reported_prompt_tokens"] = reported
    return PrefixRecord.from_dict(data)


def test_a_break_is_judged_against_what_the_cache_would_have_read() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    first = checker.check(_body(0), rule)
    broken = checker.check(
        _body(1, top="Now: 2026-11-30T10:00:07Z\n"), rule, [_stored(first.record)]
    )
    assert broken.divergence is not None and broken.divergence.avoidable
    assert broken.expected_cached_now == 0  # nothing will be read: the header says so
    prompt = broken.record.total_tokens
    forecast = broken.expected_cached_for(prompt)
    assert 1024 <= forecast <= prompt and (forecast - 1024) % 128 == 0
    judged = verdict(forecast, 0, prompt, Decimal("2.5e-6"), Decimal("1.25e-6"))
    assert judged.status is CacheStatus.MISS
    assert judged.money_lost == forecast * Decimal("1.25e-6")


def test_a_new_turn_has_no_forecast() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    first = checker.check(_body(1), rule)
    branched = _body(1)
    branched["messages"][-1] = {"role": "user", "content": "something else"}
    second = checker.check(branched, rule, [_stored(first.record)])
    assert second.forecast is None


def test_the_announced_read_is_calibrated_on_the_reported_prompt_size() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    first = checker.check(_body(0), rule)
    # The provider counted 30% fewer tokens than bytes / 4 for the first request.
    reported = first.record.total_tokens * 7 // 10
    second = checker.check(_body(1), rule, [_stored(first.record, reported)])
    assert second.predicted_prompt_tokens < second.record.total_tokens
    assert 0 < second.expected_cached_now <= reported <= second.predicted_prompt_tokens


def test_anthropic_without_breakpoints_is_uncacheable_and_with_one_is_not() -> None:
    rule = rule_for("anthropic")
    bare = split_request(_body(1), rule)
    assert (blocked := uncacheable(bare, rule)) is not None
    assert blocked.reason == NO_BREAKPOINTS and "cache_control" in blocked.fix
    marked = _body(1)
    marked["messages"][0]["content"] = [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    assert uncacheable(split_request(marked, rule), rule) is None
    automatic = _body(1, cache_control={"type": "ephemeral"})
    assert uncacheable(split_request(automatic, rule), rule) is None
    assert uncacheable(split_request(_body(1), rule_for("openai")), rule_for("openai")) is None


def test_lint_reports_an_uncacheable_anthropic_request() -> None:
    report = lint_request(_body(1), family="anthropic")
    assert not report.clean and report.uncacheable is not None
    assert '"cache": "uncacheable"' in report.to_json()
    assert lint_request(_body(1), family="openai").clean
