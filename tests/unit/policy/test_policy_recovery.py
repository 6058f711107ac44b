"""Fallback chains, retries with jittered backoff, and the circuit breaker."""

from __future__ import annotations

import random

import pytest

from gateway.policy import (
    BreakerBoard,
    BreakerSettings,
    CircuitBreaker,
    FallbackStep,
    RequestFacts,
    Retrier,
    RetrySettings,
    Target,
    next_fallback,
    plan,
    recover,
    validate_policy,
)
from tests.unit.policy.helpers import user_body

CHAIN = [
    FallbackStep(from_tier="flex", statuses=[429, 503], tier="standard"),
    FallbackStep(
        statuses=[500, 502, 503, "connect"], alias="local", tier="standard", after_retries=True
    ),
]
FLEX = Target("gpt", "flex")
STANDARD = Target("gpt", "standard")
LOCAL = Target("local", "standard")


class FixedRandom:
    """A random source that always returns the same value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("current", "status", "tried", "expected"),
    [
        (FLEX, 429, (), STANDARD),
        (FLEX, 503, (), STANDARD),
        (FLEX, 400, (), None),
        (FLEX, 503, (STANDARD,), LOCAL),
        (STANDARD, 429, (), None),
        (STANDARD, 503, (), LOCAL),
        (STANDARD, "connect", (), LOCAL),
        (LOCAL, 503, (), None),
    ],
)
def test_fallback_chain_by_status(
    current: Target, status: int | str, tried: tuple, expected: Target | None
) -> None:
    assert next_fallback(CHAIN, current, status, tried) == expected


def test_fallback_chain_can_be_filtered_by_after_retries() -> None:
    assert next_fallback(CHAIN, STANDARD, 503, after_retries=False) is None
    assert next_fallback(CHAIN, STANDARD, 503, after_retries=True) == LOCAL
    keep_tier = [FallbackStep(statuses=[503], alias="other")]
    assert next_fallback(keep_tier, FLEX, 503) == Target("other", "flex")


def test_backoff_bounds_with_a_seeded_random() -> None:
    retrier = Retrier(RetrySettings(attempts=10, base_s=0.5, max_s=4), random.Random(7))
    for attempt in range(1, 9):
        ceiling = min(4.0, 0.5 * 2 ** (attempt - 1))
        delays = [retrier.delay_s(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 4  # really jittered
    again = Retrier(RetrySettings(), random.Random(7))
    assert Retrier(RetrySettings(), random.Random(7)).delay_s(1) == again.delay_s(1)


def test_next_attempt_counts_and_statuses() -> None:
    retrier = Retrier(RetrySettings(attempts=2, base_s=1, max_s=8), FixedRandom(0.0))
    first = retrier.next_attempt(1, 503)
    assert first is not None and (first.number, first.delay_s) == (2, 0.5)
    second = retrier.next_attempt(2, "connect")
    assert second is not None and (second.number, second.delay_s) == (3, 1.0)
    assert retrier.next_attempt(3, 503) is None  # two retries spent
    assert retrier.next_attempt(1, 400) is None  # not a retryable status
    assert retrier.next_attempt(1, "circuit_open") is None


def test_retry_after_is_honoured_up_to_the_maximum() -> None:
    retrier = Retrier(RetrySettings(base_s=1, max_s=8), FixedRandom(0.0))
    attempt = retrier.next_attempt(1, 429, retry_after_s=3)
    assert attempt is not None and attempt.delay_s == 3
    assert retrier.next_attempt(1, 429, retry_after_s=30) is None


def test_recover_prefers_immediate_fallback_then_retry_then_late_fallback() -> None:
    retrier = Retrier(RetrySettings(attempts=1, base_s=1, max_s=8), FixedRandom(1.0))
    moved = recover(CHAIN, retrier, FLEX, 1, 429)
    assert (moved.action, moved.target) == ("fallback", STANDARD)
    retry = recover(CHAIN, retrier, STANDARD, 1, 503)
    assert (retry.action, retry.target, retry.delay_s, retry.attempt) == ("retry", STANDARD, 1.0, 2)
    late = recover(CHAIN, retrier, STANDARD, 2, 503)
    assert (late.action, late.target) == ("fallback", LOCAL)
    assert recover(CHAIN, retrier, LOCAL, 2, 503).action == "give_up"
    assert recover(CHAIN, retrier, STANDARD, 1, 400).action == "give_up"


def test_breaker_opens_after_consecutive_failures_in_the_window() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(failures=3, window_s=10, cooldown_s=5), clock)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()  # resets the run
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 11  # the two failures leave the window
    breaker.record_failure()
    assert breaker.state == "closed" and breaker.allow()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()


def test_breaker_half_open_lets_one_probe_through() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(failures=1, window_s=10, cooldown_s=5), clock)
    breaker.record_failure()
    clock.now += 4.9
    assert breaker.state == "open" and not breaker.allow()
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one
    breaker.record_failure()  # the probe failed: open again for a full cool-down
    assert breaker.state == "open"
    clock.now += 5
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow() and breaker.allow()


def test_a_lost_probe_expires() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(failures=1, cooldown_s=5), clock)
    breaker.record_failure()
    clock.now += 5
    assert breaker.allow()
    clock.now += 4
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()  # the first probe never reported; try another


def test_a_released_probe_lets_the_next_request_probe_at_once() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(failures=1, cooldown_s=5), clock)
    breaker.record_failure()
    clock.now += 5
    assert breaker.allow()  # the probe: a request the client got wrong, refused unsent
    breaker.release()
    assert breaker.state == "half_open" and breaker.allow()  # the next one probes now
    assert not breaker.allow()


def test_failures_while_open_do_not_extend_the_cool_down() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerSettings(failures=1, cooldown_s=5), clock)
    breaker.record_failure()
    clock.now += 3
    breaker.record_failure()  # a request sent before the breaker opened
    clock.now += 2
    assert breaker.state == "half_open"


def test_breaker_board_keeps_one_breaker_per_upstream() -> None:
    clock = FakeClock()
    board = BreakerBoard(clock)
    settings = BreakerSettings(failures=1)
    board.get("https://api.openai.com", settings).record_failure()
    assert board.get("https://api.openai.com", settings).state == "open"
    assert board.get("http://vllm:8000", settings).state == "closed"
    assert board.states() == {"https://api.openai.com": "open", "http://vllm:8000": "closed"}
    assert board.find("http://vllm:8000") is board.get("http://vllm:8000", settings)
    assert board.find("http://elsewhere") is None


def test_decision_carries_route_settings_and_replans_a_fallback() -> None:
    policy = validate_policy(
        {
            "defaults": {"tier": {"choose": "flex"}, "effort": "low"},
            "routing": {
                "gpt": {
                    "fallbacks": [{"from_tier": "flex", "statuses": [429], "tier": "standard"}],
                    "timeouts": {"connect_s": 2, "first_token_s": 9, "idle_s": 3},
                    "retry": {"attempts": 1},
                    "breaker": {"failures": 2},
                },
                "local": {"capabilities": {"supports_thinking_budget": True}},
            },
        }
    )
    facts = RequestFacts.from_headers("gpt", {})
    first = plan(policy, facts, user_body(), "openai", {"supports_reasoning": True})
    assert (first.tier, first.set_fields["service_tier"]) == ("flex", "flex")
    assert first.timeouts.first_token_s == 9 and first.retry.attempts == 1
    assert first.breaker.failures == 2 and len(first.fallbacks) == 1
    target = next_fallback(first.fallbacks, Target(first.alias, first.tier), 429)
    assert target == Target("gpt", "standard")
    second = plan(policy, facts, user_body(), "openai", {"supports_reasoning": True}, target=target)
    assert second.tier == "standard" and "service_tier" not in second.set_fields
    local = plan(policy, facts, user_body(), "vllm", target=Target("local", "flex"))
    assert (local.alias, local.tier) == ("local", "standard")  # vLLM offers no flex
    assert local.set_fields["thinking_token_budget"] == 1024  # the local route's capabilities
    assert local.rule == "defaults"
