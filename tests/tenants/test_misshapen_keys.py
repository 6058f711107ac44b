"""A budget key Redis holds as another type (written there by something else) stays that
key's problem: the requests it concerns are answered by their outage policies, every other
team's stay on Redis, and a settle or push of local spend passes over it to the others."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.settings import RedisLimits
from gateway.tenants import Budget, Reservation, Scope, ScopeLimits, StateUnavailable
from gateway.tenants.fallback import FallbackLimiter
from gateway.tenants.plan import plan
from gateway.tenants.redis import RedisLimiter
from tests.redis_service import require_redis
from tests.tenants.conftest import drop_keys, redis_limiter

pytestmark = pytest.mark.redis
NOW = datetime.now(UTC)
ACME, OTHER = Scope("team", "acme"), Scope("team", "other")
FAILURES = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10, failures=2)


@pytest.fixture
async def engine() -> AsyncIterator[FallbackLimiter]:
    redis = redis_limiter(require_redis(), f"test-{uuid.uuid4().hex}")
    limiter = FallbackLimiter(redis, FAILURES)
    yield limiter
    await drop_keys(redis)
    await limiter.aclose()


def budget(scope: Scope, outage: str = "fail_closed") -> list[ScopeLimits]:
    day = Budget("day", Decimal(1), on_state_outage=outage)  # type: ignore[arg-type]
    return [ScopeLimits(scope, (day,))]


async def _spoil(redis: RedisLimiter, team: str) -> None:
    """Overwrite the team's day window (a hash) with text, as another program might."""
    keys = [key async for key in redis.client.scan_iter(match=f"{redis.prefix}*{team}*day*")]
    window = next(key for key in keys if not key.endswith(b":holds"))
    await redis.client.delete(window)
    await redis.client.set(window, "not a hash")


async def test_a_spoiled_window_refuses_its_own_requests_alone(engine: FallbackLimiter) -> None:
    for scope in (ACME, OTHER):
        assert isinstance(await engine.reserve(budget(scope), Decimal("0.1"), 0, NOW), Reservation)
    await _spoil(engine.redis, "acme")
    for _ in range(3 * FAILURES.failures):
        refusal = await engine.reserve(budget(ACME), Decimal("0.1"), 0, NOW)
        assert isinstance(refusal, StateUnavailable)
        assert "holds a key of this budget as another type" in refusal.message
    # Redis answered each time: budget state is not degraded, other teams stay on it.
    assert not engine.degraded
    other = await engine.reserve(budget(OTHER), Decimal("0.1"), 0, NOW)
    assert isinstance(other, Reservation) and other.backend == "redis"
    # A fail_open budget on the spoiled window counts in process instead.
    local = await engine.reserve(budget(ACME, "fail_open"), Decimal("0.1"), 0, NOW)
    assert isinstance(local, Reservation) and local.backend == "memory"


async def test_local_spend_pushed_to_a_spoiled_window_leaves_the_others_counted(
    engine: FallbackLimiter,
) -> None:
    for scope in (ACME, OTHER):
        assert isinstance(await engine.reserve(budget(scope), Decimal("0.1"), 0, NOW), Reservation)
    await _spoil(engine.redis, "acme")
    spent = [(plan(budget(scope), Decimal(0), 0, NOW).budgets[0], 10**9) for scope in (ACME, OTHER)]
    await engine.redis.add_spent(spent)  # no error: the spoiled window is skipped
    assert (await engine.redis.usage(OTHER, "day", NOW)).spent_usd == Decimal("0.1")


async def test_a_reservation_that_meets_a_spoiled_window_holds_nothing_in_the_others(
    engine: FallbackLimiter,
) -> None:
    # The key's own window first, then its team's: the team's is spoiled. Refused before
    # anything is added, the key's window holds nothing, however many are refused.
    key = Scope("key", "k1")
    scopes = [*budget(key), *budget(ACME)]
    held = await engine.reserve(scopes, Decimal("0.1"), 0, NOW)
    assert isinstance(held, Reservation)
    await engine.release(held, NOW)
    await _spoil(engine.redis, "acme")
    for _ in range(3):
        assert isinstance(await engine.reserve(scopes, Decimal("0.3"), 0, NOW), StateUnavailable)
    assert await engine.redis.usage(key, "day", NOW) == (Decimal(0), Decimal(0))


async def test_a_settle_passes_over_a_spoiled_window_and_settles_the_others(
    engine: FallbackLimiter,
) -> None:
    # The team's window first, spoiled after the hold; the key's after it. The settle
    # used to stop at the team's: the key's hold expired unspent. Now the key's counts.
    key = Scope("key", "k1")
    held = await engine.reserve([*budget(ACME), *budget(key)], Decimal("0.5"), 0, NOW)
    assert isinstance(held, Reservation) and held.backend == "redis"
    await _spoil(engine.redis, "acme")
    assert (await engine.settle(held, Decimal("0.25"), 0, NOW)).applied
    assert not engine._pending and not engine.degraded  # settled in Redis, not kept
    assert await engine.redis.usage(key, "day", NOW) == (Decimal("0.25"), Decimal(0))
    # Other teams stay on Redis.
    other = await engine.reserve(budget(OTHER), Decimal("0.1"), 0, NOW)
    assert isinstance(other, Reservation) and other.backend == "redis"
