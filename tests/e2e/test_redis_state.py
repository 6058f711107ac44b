"""Shared state in the real Redis: running task costs agree across gateway replicas."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import pytest

from gateway.settings import RedisLimits
from gateway.state import MemoryState, open_state
from gateway.state.fallback import FallbackState
from tests.e2e.conftest import GatewayFactory
from tests.redis_service import commands_sent, require_redis

pytestmark = pytest.mark.redis


async def test_redis_task_costs_are_exact_atomic_and_expire() -> None:
    # Generous limits: 200 connections at once on a busy CI box must not look like an outage.
    patient = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10)
    state = await open_state(require_redis(), f"test-{uuid.uuid4().hex}", patient)
    assert isinstance(state, FallbackState) and not state.degraded
    try:
        adds = [state.add_task_cost("t", Decimal("0.0000000001"), 60) for _ in range(200)]
        await asyncio.gather(*adds)
        assert await state.task_cost("t") == Decimal("0.00000002")
        # The local view (the floor pushed after an outage) ends at the shared total, in
        # whatever order the 200 answers came back.
        assert await state.local.task_cost("t") == Decimal("0.00000002")
        assert await state.add_task_cost("t", Decimal("1.5"), 60) == Decimal("1.50000002")
        await state.add_task_cost("short", Decimal("1"), 1)
        await asyncio.sleep(2.1)
        assert await state.task_cost("short") == 0
    finally:
        await state.redis.client.delete(state.redis._key("t"))
        await state.aclose()


async def test_a_total_learned_from_redis_never_lowers_the_local_one() -> None:
    local = MemoryState()
    await local.set_task_cost("t", Decimal("0.75"), 60)
    await local.set_task_cost("t", Decimal("0.5"), 60)  # an older answer, stored late
    assert await local.task_cost("t") == Decimal("0.75")
    assert await local.add_task_cost("t", Decimal("0.25"), 60) == Decimal("1")


async def test_memory_state_is_the_embedded_default() -> None:
    state = await open_state(None)
    assert isinstance(state, MemoryState)
    assert await state.add_task_cost("t", Decimal("0.25"), 60) == Decimal("0.25")
    assert await state.add_task_cost("t", Decimal("0.5"), 60) == Decimal("0.75")
    assert await state.task_cost("missing") == 0


def test_two_gateways_share_a_task_total(make_gateway: GatewayFactory) -> None:
    url = require_redis()
    first, second = make_gateway(redis_url=url), make_gateway(redis_url=url)
    task = f"task-{uuid.uuid4().hex}"
    costs = []
    for gateway in (first, second, first):
        client = gateway.sdk()
        raw = client.chat.completions.with_raw_response.create(
            model="chat",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Task-Id": task},
        )
        costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
        assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == sum(costs)
    assert all(cost > 0 for cost in costs)


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_record_kept_under_two_keys_comes_back_once(backend: str) -> None:
    url = require_redis() if backend == "redis" else None
    state = await open_state(url, namespace=f"test-{uuid.uuid4().hex}")
    first, second = {"stable_count": 1}, {"stable_count": 2}
    try:
        await state.remember_prefix(["task:t", "caller:c"], first, 60, 4)
        await state.remember_prefix(["task:t", "caller:c"], second, 60, 4)
        await state.remember_prefix(["caller:c"], {"stable_count": 3}, 60, 4)
        history = await state.prefix_history(["task:t", "caller:c"])
        assert [record["stable_count"] for record in history] == [2, 1, 3]
        alone = await state.prefix_history(["caller:c"])  # a request without a task
        assert [record["stable_count"] for record in alone] == [3, 2, 1]
        assert await state.prefix_history(["caller:never-seen"]) == []
    finally:
        if isinstance(state, FallbackState):
            redis = state.redis
            await redis.client.delete(redis._prefix_key("task:t"), redis._prefix_key("caller:c"))
        await state.aclose()


async def test_a_callers_history_is_one_lrange_and_a_tasks_one_script() -> None:
    # What Redis receives (MONITOR): a request without a task reads its caller's list
    # with LRANGE (as a script, Redis spent three times the CPU: bench/redis_history.py);
    # with a task, both lists come in one script's reply.
    url = require_redis()
    namespace = f"test-{uuid.uuid4().hex}"
    state = await open_state(url, namespace=namespace)
    assert isinstance(state, FallbackState)
    redis = state.redis
    try:
        await state.remember_prefix(["task:t", "caller:c"], {"stable_count": 1}, 60, 4)
        await state.prefix_history(["task:t", "caller:c"])  # its script loaded (a fresh Redis)
        reads: dict[str, list[dict[str, object]]] = {}

        async def read() -> None:
            reads["alone"] = await state.prefix_history(["caller:c"])
            reads["both"] = await state.prefix_history(["task:t", "caller:c"])

        ours = await commands_sent(redis.client, namespace, read)
        alone, both = reads["alone"], reads["both"]
        assert [record["stable_count"] for record in alone + both] == [1, 1]
        assert len(ours) == 2, ours
        assert ours[0].startswith("LRANGE ") and "caller:c" in ours[0]
        assert ours[1].startswith("EVALSHA ") and "task:t" in ours[1] and "caller:c" in ours[1]
    finally:
        await redis.client.delete(redis._prefix_key("task:t"), redis._prefix_key("caller:c"))
        await state.aclose()
