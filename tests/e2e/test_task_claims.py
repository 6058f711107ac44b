"""`claim_task_value`: one owner per task, atomically, in memory, on real Redis, and through
an outage of a redis-server of the test's own (killed with SIGKILL, started again empty)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from gateway.settings import RedisLimits
from gateway.state import MemoryState, open_state
from gateway.state.fallback import FallbackState
from tests.e2e.test_state_outage import RedisServer, redis_server  # noqa: F401 (fixture)
from tests.redis_service import require_redis

LIMITS = RedisLimits(timeout_s=2, connect_timeout_s=2, failures=1, retry_s=0.1)


async def test_memory_claim_keeps_the_first_owner_until_it_expires() -> None:
    state = MemoryState()
    assert await state.claim_task_value("t", "owner", "team:a", 60) == "team:a"
    assert await state.claim_task_value("t", "owner", "team:b", 60) == "team:a"
    assert await state.claim_task_value("t", "owner", "team:a", 60) == "team:a"
    assert await state.claim_task_value("u", "owner", "team:b", 0.05) == "team:b"
    await asyncio.sleep(0.1)
    assert await state.claim_task_value("u", "owner", "team:c", 60) == "team:c"


@pytest.mark.redis
async def test_redis_claim_has_one_winner_across_replicas() -> None:
    url, namespace = require_redis(), f"test-{uuid.uuid4().hex}"
    replicas = [await open_state(url, namespace, LIMITS) for _ in range(4)]
    try:
        claims = [
            replicas[i % 4].claim_task_value("t", "owner", f"team:{i}", 60) for i in range(64)
        ]
        answers = await asyncio.gather(*claims)
        first = replicas[0]
        assert isinstance(first, FallbackState)
        assert 0 < await first.redis.client.ttl(first.redis._pin_key("t", "owner")) <= 60
        assert len(set(answers)) == 1  # every caller was told the same owner
        winner = answers[0]
        assert sum(winner == f"team:{i}" for i in range(64)) == 1
        for replica in replicas:
            assert await replica.claim_task_value("t", "owner", "team:x", 60) == winner
        # A replica reuses the owner Redis told it for a minute (an owner never changes
        # while its claim lasts); one that never asked asks Redis.
        await first.redis.client.delete(first.redis._pin_key("t", "owner"))
        assert await replicas[0].claim_task_value("t", "owner", "team:x", 60) == winner
        fresh = await open_state(url, namespace, LIMITS)
        replicas.append(fresh)
        assert await fresh.claim_task_value("t", "owner", "team:x", 60) == "team:x"
    finally:
        for replica in replicas:
            await replica.aclose()


@pytest.mark.redis
async def test_claims_through_a_redis_outage(redis_server: RedisServer) -> None:  # noqa: F811
    redis_server.start()
    state = await FallbackState.connect(redis_server.url, "farebox", LIMITS)
    try:
        assert await state.claim_task_value("before", "owner", "team:a", 600) == "team:a"
        redis_server.kill()
        await state.task_value("any", "effort")  # the first call after the kill: degraded
        assert state.degraded
        # Known before the outage: kept here. First used during it: claimed per process.
        assert await state.claim_task_value("before", "owner", "team:b", 600) == "team:a"
        assert await state.claim_task_value("during", "owner", "team:b", 600) == "team:b"
        assert await state.claim_task_value("during", "owner", "team:c", 600) == "team:b"
        redis_server.start()  # back, and empty
        deadline = time.monotonic() + 20
        while state.degraded:
            assert time.monotonic() < deadline, "the state never recovered"
            await asyncio.sleep(0.05)
        # The claim made during the outage was pushed (SET NX) and holds for every replica.
        other = await FallbackState.connect(redis_server.url, "farebox", LIMITS)
        try:
            assert await other.claim_task_value("during", "owner", "team:c", 600) == "team:b"
        finally:
            await other.aclose()
    finally:
        await state.aclose()
