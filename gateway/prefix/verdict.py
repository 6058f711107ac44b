"""After the response: did the provider read what it should have, and what did a miss cost?

Expected tokens are estimates (bytes / 4 unless a real counter is plugged in), so small
differences are noise: a miss is only called when the provider read noticeably less than
expected, by more than `tolerance` of the expectation and at least one cache step.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from gateway.frozen import mutable_twin

DEFAULT_TOLERANCE = Decimal("0.10")
_MIN_SLACK_TOKENS = 128
_ZERO = Decimal(0)


class CacheStatus(StrEnum):
    """How the provider's cache read compared with the expectation."""

    STABLE = "stable"  # nothing cacheable was expected and nothing was read
    HIT = "hit"  # the expected prefix was read
    MISS = "miss"  # less was read than expected: money lost
    UNEXPECTED_HIT = "unexpected_hit"  # more was read than we knew to expect
    UNCACHEABLE = "uncacheable"  # the request cannot be cached as sent (see cacheability)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one request's cache expectation."""

    status: CacheStatus
    expected_cached: int
    actual_cached: int
    prompt_tokens: int
    missed_tokens: int
    money_lost: Decimal


_VERDICT = mutable_twin(Verdict)  # a store per field (`gateway.frozen`)


def _money(value: object) -> Decimal:
    """Return `value` as Decimal; floats are refused because money never passes through one."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int | str) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError(f"prices must be Decimal, int or str, not {type(value).__name__}")


def verdict(
    expected_cached: int,
    actual_cached: int,
    prompt_tokens: int,
    input_price: Decimal,
    cached_price: Decimal,
    *,
    tolerance: Decimal = DEFAULT_TOLERANCE,
) -> Verdict:
    """Judge the provider's cache read; prices are per token, in any one currency.

    Money lost is the tokens that could have been read from cache times the difference
    between the input price and the cached-read price; it is never negative.
    """
    expected = max(min(expected_cached, prompt_tokens), 0)
    actual = max(actual_cached, 0)
    # Nothing expected (a prompt below the cache's minimum): the floor, no Decimal made.
    slack = (
        max(int(Decimal(expected) * tolerance), _MIN_SLACK_TOKENS)
        if expected
        else _MIN_SLACK_TOKENS
    )
    if expected == 0 and actual == 0:
        status = CacheStatus.STABLE
    elif actual + slack < expected:
        status = CacheStatus.MISS
    elif actual > expected + slack:
        status = CacheStatus.UNEXPECTED_HIT
    else:
        status = CacheStatus.HIT
    if type(input_price) is not Decimal or type(cached_price) is not Decimal:
        input_price, cached_price = _money(input_price), _money(cached_price)  # or refused
    if status is not CacheStatus.MISS:  # nothing missed, nothing lost: no Decimal to make
        return _VERDICT(status, expected, actual, prompt_tokens, 0, _ZERO)
    missed = expected - actual
    saving = max(input_price - cached_price, _ZERO)
    return _VERDICT(status, expected, actual, prompt_tokens, missed, Decimal(missed) * saving)
