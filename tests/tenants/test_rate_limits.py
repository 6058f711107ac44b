"""Rate limits (GCRA over 60 s), in process and on the real Redis, with `now` passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.tenants import (
    Budget,
    BudgetExceeded,
    Limiter,
    RateLimit,
    RateLimited,
    Reservation,
    Scope,
    ScopeLimits,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEY = Scope("key", "fbx-abc")


def limited(**rate: int | Decimal) -> list[ScopeLimits]:
    return [ScopeLimits(KEY, rate=RateLimit(**rate))]  # type: ignore[arg-type]


async def reserve(
    limiter: Limiter, scopes: list[ScopeLimits], at: float, usd: str = "0", tokens: int = 0
) -> Reservation | RateLimited:
    result = await limiter.reserve(scopes, Decimal(usd), tokens, NOW + timedelta(seconds=at))
    assert isinstance(result, Reservation | RateLimited), result
    return result


async def test_requests_per_minute_refuse_with_the_wait_until_one_fits(limiter: Limiter) -> None:
    two = limited(requests_per_min=2)
    assert isinstance(await reserve(limiter, two, 0), Reservation)
    assert isinstance(await reserve(limiter, two, 0), Reservation)
    refusal = await reserve(limiter, two, 0)
    assert isinstance(refusal, RateLimited)
    assert (refusal.status, refusal.code, refusal.error_type) == (
        429,
        "rate_limit_exceeded",
        "requests",
    )
    assert refusal.retry_after_s == 30 and refusal.headers == {"Retry-After": "30"}
    assert refusal.message == (
        "Rate limit reached for key 'fbx-abc' on requests per min: limit 2, requested 1. "
        "Please try again in 30s."
    )
    later = await reserve(limiter, two, 10)
    assert isinstance(later, RateLimited) and later.retry_after_s == 20
    assert isinstance(await reserve(limiter, two, 30), Reservation)


async def test_settled_tokens_give_back_what_was_not_used(limiter: Limiter) -> None:
    tokens = limited(tokens_per_min=1000)
    first = await reserve(limiter, tokens, 0, tokens=800)
    assert isinstance(first, Reservation)
    refusal = await reserve(limiter, tokens, 0, tokens=800)
    assert isinstance(refusal, RateLimited) and refusal.error_type == "tokens"
    assert refusal.retry_after_s == 36  # 600 tokens past the limit, at 60 ms a token
    await limiter.settle(first, Decimal(0), 200, NOW)
    assert isinstance(await reserve(limiter, tokens, 0, tokens=800), Reservation)


async def test_a_settle_repeated_moves_the_rate_once(limiter: Limiter) -> None:
    tokens = limited(tokens_per_min=1000)
    first = await reserve(limiter, tokens, 0, tokens=1000)
    assert isinstance(first, Reservation)
    assert (await limiter.settle(first, Decimal(0), 400, NOW)).applied
    assert not (await limiter.settle(first, Decimal(0), 400, NOW)).applied
    assert not await limiter.release(first, NOW)
    assert isinstance(await reserve(limiter, tokens, 0, tokens=600), Reservation)
    assert isinstance(await reserve(limiter, tokens, 0, tokens=1), RateLimited)


async def test_a_release_gives_tokens_and_dollars_back(limiter: Limiter) -> None:
    both = limited(tokens_per_min=1000, usd_per_min=Decimal("1"))
    failed = await reserve(limiter, both, 0, usd="0.9", tokens=900)
    assert isinstance(failed, Reservation)
    dollars = await reserve(limiter, both, 0, usd="0.2", tokens=10)
    assert isinstance(dollars, RateLimited) and dollars.dimension == "usd"
    assert dollars.limit == 1 and dollars.requested == Decimal("0.2")
    assert await limiter.release(failed, NOW)
    assert isinstance(await reserve(limiter, both, 0, usd="0.9", tokens=900), Reservation)


async def test_a_request_over_the_whole_limit_never_fits(limiter: Limiter) -> None:
    refusal = await reserve(limiter, limited(tokens_per_min=1000), 0, tokens=1001)
    assert isinstance(refusal, RateLimited) and refusal.retry_after_s is None
    assert refusal.headers == {"Retry-After": "60"}
    assert refusal.message.endswith("The request is larger than the whole limit; make it smaller.")


async def test_a_rate_refusal_holds_no_budget(limiter: Limiter) -> None:
    scopes = [ScopeLimits(KEY, (Budget("day", Decimal("1")),), RateLimit(requests_per_min=1))]
    assert isinstance(await reserve(limiter, scopes, 0, usd="0.1"), Reservation)
    assert isinstance(await reserve(limiter, scopes, 1, usd="0.1"), RateLimited)
    assert await limiter.usage(KEY, "day", NOW) == (0, Decimal("0.1"))


async def test_the_budget_refusal_comes_before_the_rate_one(limiter: Limiter) -> None:
    scopes = [ScopeLimits(KEY, (Budget("day", Decimal("1")),), RateLimit(requests_per_min=1))]
    assert isinstance(await reserve(limiter, scopes, 0, usd="0.5"), Reservation)
    result = await limiter.reserve(scopes, Decimal("0.6"), 0, NOW)
    assert isinstance(result, BudgetExceeded)
