"""The whole per-request flow, as the pipeline runs it: check, store, check again, verdict."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gateway.prefix import CacheStatus, PrefixChecker, PrefixRecord, rule_for, verdict

SYSTEM = "You are a meticulous research agent. " * 200  # ~1,800 tokens by the estimate


def _turns(n: int, **extra: Any) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(n):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i} " * 40},
        ]
    messages.append({"role": "user", "content": f"question {n}"})
    body: dict[str, Any] = {"model": "gpt-5", "messages": messages}
    body.update(extra)
    return body


def test_agent_loop_expects_the_repeated_prefix_and_judges_the_reply() -> None:
    checker = PrefixChecker()
    rule = rule_for("openai")
    history: list[PrefixRecord] = []
    first = checker.check(_turns(1), rule, history)
    assert first.expectation.cached_tokens == 0 and first.divergence is None
    history.append(PrefixRecord.from_dict(first.record.to_dict()))  # through the store
    second = checker.check(_turns(2), rule, history)
    expected = second.expected_cached_for(second.record.total_tokens)
    assert expected >= 1024 and (expected - 1024) % 128 == 0
    assert second.divergence is None
    judged = verdict(expected, 0, second.record.total_tokens, Decimal("2e-6"), Decimal("2e-7"))
    assert judged.status is CacheStatus.MISS
    assert judged.money_lost == Decimal(expected) * Decimal("1.8e-6")


def test_expected_cache_is_rescaled_to_the_reported_prompt_size() -> None:
    checker = PrefixChecker()
    rule = rule_for("openai")
    first = checker.check(_turns(1), rule)
    second = checker.check(_turns(2), rule, [first.record])
    estimated = second.record.total_tokens
    assert second.expected_cached_for(estimated * 2) > second.expectation.cached_tokens


def test_anthropic_reads_what_the_previous_request_wrote_at_its_breakpoint() -> None:
    checker = PrefixChecker()
    rule = rule_for("anthropic", min_tokens=1024)
    marker = {"cache_control": {"type": "ephemeral"}}
    first = checker.check(_turns(1, **marker), rule)
    assert first.record.breakpoints == (len(first.record.segment_digests) - 1,)
    assert first.expectation.cached_tokens == 0
    assert first.expectation.write_tokens == first.record.total_tokens
    second = checker.check(_turns(2, **marker), rule, [first.record])
    assert second.expectation.cached_tokens == first.record.total_tokens
    assert 0 < second.expectation.write_tokens < second.record.total_tokens


def test_anthropic_without_breakpoints_caches_nothing() -> None:
    checker = PrefixChecker()
    rule = rule_for("anthropic")
    first = checker.check(_turns(1), rule)
    second = checker.check(_turns(2), rule, [first.record])
    assert second.expectation.cached_tokens == 0
    assert second.record.breakpoints == ()


def test_short_prompts_are_reported_below_the_minimum() -> None:
    checker = PrefixChecker()
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
    assert checker.check(body, rule_for("openai")).expectation.below_minimum


def test_unscanned_segments_are_reported_under_a_tight_budget() -> None:
    checker = PrefixChecker(scan_budget=1024)
    body = _turns(3)
    body["messages"][0]["content"] = SYSTEM + " " + "word " * 20_000
    result = checker.check(body, rule_for("openai"))
    assert result.unscanned[0] == "system"  # one window went ahead, the rest waits
