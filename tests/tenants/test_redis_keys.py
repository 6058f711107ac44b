"""What the engine leaves in the real Redis: one hash tag, windows that expire, no leaks."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.tenants import Budget, RateLimit, Reservation, Scope, ScopeLimits
from tests.redis_service import require_redis
from tests.tenants.conftest import drop_keys, redis_limiter

pytestmark = pytest.mark.redis
NOW = datetime.now(UTC)  # Redis expires keys on its own clock: windows must be current


@pytest.fixture
async def engine() -> AsyncIterator[object]:
    limiter = redis_limiter(require_redis(), f"test-{uuid.uuid4().hex}")
    yield limiter
    await drop_keys(limiter)
    await limiter.aclose()


async def test_every_key_shares_one_hash_tag_and_windows_expire(engine: object) -> None:
    from gateway.tenants.redis import RedisLimiter

    assert isinstance(engine, RedisLimiter)
    budgets = (Budget("day", Decimal(5)), Budget("total", Decimal(50)))
    scopes = [
        ScopeLimits(Scope("key", "fbx:odd{id}"), budgets, RateLimit(tokens_per_min=10_000)),
        ScopeLimits(Scope("team", "acme"), budgets),
    ]
    reservation = await engine.reserve(scopes, Decimal("0.25"), 100, NOW)
    assert isinstance(reservation, Reservation)
    await engine.settle(reservation, Decimal("0.125"), 50, NOW)
    keys = sorted([key.decode() async for key in engine.client.scan_iter(f"{engine.prefix}*")])
    tag = engine.prefix  # "{test-...:tenants}:", the only braces Redis Cluster reads
    day = f"day:{NOW:%Y-%m-%d}"
    assert keys == sorted(
        [
            f"{tag}budget:key:fbx%3Aodd%7Bid%7D:{day}",
            f"{tag}budget:key:fbx%3Aodd%7Bid%7D:total",
            f"{tag}budget:team:acme:{day}",
            f"{tag}budget:team:acme:total",
            f"{tag}rate:key:fbx%3Aodd%7Bid%7D:tokens",
        ]
    )  # nothing per request is left once it is settled: its holds' deadline sets are empty
    day_ttl = await engine.client.ttl(f"{tag}budget:team:acme:{day}")
    assert 2 * 86_400 < day_ttl <= 3 * 86_400  # until the reset, then two days
    assert await engine.client.ttl(f"{tag}budget:team:acme:total") == -1  # lifetime
    assert 0 < await engine.client.pttl(f"{tag}rate:key:fbx%3Aodd%7Bid%7D:tokens") <= 61_000
    assert await engine.client.hgetall(f"{tag}budget:team:acme:{day}") == {
        b"used": b"1250000000",
        b"spent": b"1250000000",
    }


async def test_a_reservation_without_a_budget_keeps_a_live_key_while_held(engine: object) -> None:
    from gateway.tenants.redis import RedisLimiter

    assert isinstance(engine, RedisLimiter)
    scopes = [ScopeLimits(Scope("key", "k"), rate=RateLimit(requests_per_min=10))]
    reservation = await engine.reserve(scopes, Decimal("0.25"), 100, NOW)
    assert isinstance(reservation, Reservation)
    live = f"{engine.prefix}live:{reservation.id}"
    assert 0 < await engine.client.pttl(live) <= 60_000  # the hold time (HOLD_S)
    assert await engine.release(reservation, NOW)
    assert await engine.client.exists(live) == 0
