"""One engine per test, in process and on the real Redis: both must behave the same."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.settings import RedisLimits
from gateway.tenants import Limiter, MemoryLimiter
from gateway.tenants.fallback import FallbackLimiter
from gateway.tenants.redis import RedisLimiter
from tests.redis_service import require_redis

HOLD_S = 60.0
# A busy CI box must not look like an outage.
PATIENT = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10)


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("fallback", marks=pytest.mark.redis),
    ]
)
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    """A fresh engine: `MemoryLimiter`, `RedisLimiter` in a namespace of its own, or the
    `FallbackLimiter` the gateway uses with Redis (on a Redis that answers)."""
    if request.param == "memory":
        memory = MemoryLimiter(hold_s=HOLD_S)
        yield memory
        await memory.aclose()
        return
    engine = redis_limiter(require_redis(), f"test-{uuid.uuid4().hex}")
    yield engine if request.param == "redis" else FallbackLimiter(engine, PATIENT)
    await drop_keys(engine)
    await engine.aclose()


def redis_limiter(url: str, namespace: str) -> RedisLimiter:
    return RedisLimiter.from_url(url, namespace, PATIENT, hold_s=HOLD_S)


async def drop_keys(engine: RedisLimiter) -> None:
    """Delete what a test left in Redis (the namespace is the test's own)."""
    async for key in engine.client.scan_iter(match=f"{engine.prefix}*"):
        await engine.client.delete(key)
