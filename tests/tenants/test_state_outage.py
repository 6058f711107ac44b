"""Redis away: fail_closed budgets refuse (503), fail_open ones count in process; settles
and local spend made meanwhile reach Redis once it answers. The outage is a real TCP
proxy cut."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.settings import RedisLimits
from gateway.state.base import StateHealth
from gateway.tenants import (
    Budget,
    BudgetExceeded,
    RateLimit,
    Reservation,
    Scope,
    ScopeLimits,
    StateUnavailable,
)
from gateway.tenants.fallback import FallbackLimiter
from gateway.tenants.redis import RedisLimiter
from tests.ledger.ledger_proxy import TcpProxy
from tests.redis_service import require_redis
from tests.tenants.conftest import drop_keys, redis_limiter

pytestmark = pytest.mark.redis
NOW = datetime.now(UTC)
TEAM = Scope("team", "acme")
QUICK = RedisLimits(timeout_s=2, connect_timeout_s=2, pool_wait_s=2, failures=1, retry_s=0.01)


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    require_redis()
    tcp = TcpProxy("127.0.0.1", 6379)
    await tcp.start()
    yield tcp
    await tcp.stop()


@pytest.fixture
async def engine(proxy: TcpProxy) -> AsyncIterator[FallbackLimiter]:
    url, namespace = f"redis://127.0.0.1:{proxy.port}/0", f"test-{uuid.uuid4().hex}"
    limiter = FallbackLimiter(RedisLimiter.from_url(url, namespace, QUICK), QUICK)
    yield limiter
    await limiter.aclose()
    direct = redis_limiter(require_redis(), namespace)  # past the proxy, which may be down
    await drop_keys(direct)
    await direct.aclose()


def team(outage: str) -> list[ScopeLimits]:
    budget = Budget("day", Decimal(1), on_state_outage=outage)  # type: ignore[arg-type]
    return [ScopeLimits(TEAM, (budget,))]


async def test_a_fail_closed_budget_refuses_while_redis_is_away(
    engine: FallbackLimiter, proxy: TcpProxy
) -> None:
    assert isinstance(
        await engine.reserve(team("fail_closed"), Decimal("0.1"), 0, NOW), Reservation
    )
    await proxy.stop()
    refusal = await engine.reserve(team("fail_closed"), Decimal("0.1"), 0, NOW)
    assert isinstance(refusal, StateUnavailable) and engine.degraded
    health = engine.health()
    assert (health.backend, health.degraded) == ("redis", True)
    assert health.reason == refusal.reason and health.since is not None
    assert (refusal.status, refusal.code) == (503, "budget_state_unavailable")
    assert refusal.headers == {"Retry-After": "1"}
    assert refusal.message.startswith(
        "The budget of team 'acme' (day budget) cannot be checked: Redis unreachable ("
    )
    await proxy.start()
    await asyncio.sleep(QUICK.retry_s)  # Redis is not asked again before retry_s
    assert isinstance(
        await engine.reserve(team("fail_closed"), Decimal("0.1"), 0, NOW), Reservation
    )
    assert not engine.degraded and engine.health() == StateHealth("redis")


async def test_a_fail_open_budget_counts_in_process_while_redis_is_away(
    engine: FallbackLimiter, proxy: TcpProxy
) -> None:
    await proxy.stop()
    local = await engine.reserve(team("fail_open"), Decimal("0.7"), 0, NOW)
    assert isinstance(local, Reservation) and local.backend == "memory"
    assert not isinstance(
        await engine.reserve(team("fail_open"), Decimal("0.7"), 0, NOW), Reservation
    )
    await engine.settle(local, Decimal("0.5"), 0, NOW)
    assert await engine.local.usage(TEAM, "day", NOW) == (Decimal("0.5"), 0)
    await proxy.start()
    await asyncio.sleep(QUICK.retry_s)
    # Once Redis answers, what this process spent meanwhile is added to the shared window.
    assert await engine.usage(TEAM, "day", NOW) == (Decimal("0.5"), 0)
    shared = await engine.reserve(team("fail_open"), Decimal("0.6"), 0, NOW)
    assert isinstance(shared, BudgetExceeded) and shared.spent_usd == Decimal("0.5")


async def test_a_rate_limit_set_to_fail_closed_refuses_too(
    engine: FallbackLimiter, proxy: TcpProxy
) -> None:
    await proxy.stop()
    scopes = [ScopeLimits(TEAM, rate=RateLimit(requests_per_min=5, on_state_outage="fail_closed"))]
    refusal = await engine.reserve(scopes, Decimal("0.1"), 0, NOW)
    assert isinstance(refusal, StateUnavailable) and "(rate limit)" in refusal.message


async def test_a_settle_made_during_the_outage_reaches_redis_once_back(
    engine: FallbackLimiter, proxy: TcpProxy
) -> None:
    reservation = await engine.reserve(team("fail_closed"), Decimal("0.6"), 0, NOW)
    assert isinstance(reservation, Reservation) and reservation.backend == "redis"
    await proxy.stop()
    assert (await engine.settle(reservation, Decimal("0.25"), 0, NOW)).applied
    await proxy.start()
    await asyncio.sleep(QUICK.retry_s)
    # The next call that reaches Redis sends the kept settle first.
    assert await engine.usage(TEAM, "day", NOW) == (Decimal("0.25"), 0)
    assert not (await engine.redis.settle(reservation, Decimal("0.25"), 0, NOW)).applied
