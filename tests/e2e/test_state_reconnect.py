"""The Redis probe's reconnect and killed connections under load: no call breaks, none escapes.

The probe of `FallbackState` reconnects while calls begun before the outage may still
hold pooled connections (their deadline, 1.5 s by default, is longer than the 1 s probe
interval). It used to close those too, so a call about to write met a closed transport
(RuntimeError) or none (AttributeError: 'NoneType' object has no attribute
'writelines'), which escaped the fallback as a 500 under `farebox serve --workers 2`.
Each test runs a redis-server of its own (CLIENT PAUSE and CLIENT KILL would disturb the
shared one).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal

import pytest
import redis.asyncio as aioredis
import uvloop

from gateway.settings import RedisLimits
from gateway.state import outage
from gateway.state.base import from_units, to_units
from gateway.state.fallback import FallbackState
from tests.e2e.test_state_outage import RedisServer
from tests.servers import free_port

pytestmark = pytest.mark.redis


class Fallbacks:
    """A StateObserver that counts the calls answered locally."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.degraded: list[bool] = []

    def state_fallback(self, operation: str) -> None:
        self.count[operation] += 1

    def state_degraded(self, degraded: bool) -> None:
        self.degraded.append(degraded)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed; run `make services`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(binary, free_port())
    server.start()
    yield server
    server.kill()


def test_reconnect_leaves_a_call_in_flight_alone(own_redis: RedisServer) -> None:
    """A call waiting on its reply while the probe reconnects gets Redis's answer."""

    async def scenario() -> tuple[Decimal, Counter[str]]:
        observer = Fallbacks()
        limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=5, pool_size=4)
        state = await FallbackState.connect(own_redis.url, "farebox", limits, observer)
        admin = aioredis.Redis(port=own_redis.port)
        try:
            await state.add_task_cost("held", Decimal("0.25"), 600)
            # Writes (the cost script) wait while Redis is paused; PING does not.
            await admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
            call = asyncio.create_task(state.add_task_cost("held", Decimal("0.5"), 600))
            await asyncio.sleep(0.3)  # the call has its connection and waits on the reply
            await state.redis.reconnect()
            total = await call
        finally:
            await admin.aclose()
            await state.aclose()
        return total, observer.count

    total, fallbacks = uvloop.run(scenario())
    assert fallbacks == Counter()  # answered by Redis, not locally
    assert total == Decimal("0.75")
    assert own_redis.units("held") == to_units(Decimal("0.75"))


def test_connections_killed_under_load_never_escape(own_redis: RedisServer) -> None:
    """CLIENT KILL every few ms under 32 concurrent callers: each call answers, none is lost."""
    workers, rounds, amount = 32, 60, Decimal("0.001")
    limits = RedisLimits(timeout_s=1, connect_timeout_s=1, failures=2, retry_s=0.02, pool_size=8)

    async def scenario() -> tuple[list[str], Counter[str], dict[str, Decimal]]:
        observer = Fallbacks()
        state = await FallbackState.connect(own_redis.url, "farebox", limits, observer)
        killer = aioredis.Redis(port=own_redis.port)
        escaped: list[str] = []
        stop = asyncio.Event()

        async def kill() -> None:
            while not stop.is_set():
                await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                await asyncio.sleep(random.uniform(0.001, 0.01))

        async def call(index: int) -> None:
            for turn in range(rounds):
                try:
                    await state.add_task_cost(f"task-{index % 8}", amount, 600)
                    await state.prefix_history([f"k{index}", f"k{turn}"])
                    await state.remember_prefix([f"k{index}"], {"turn": turn}, 600, 4)
                    await state.claim_task_value(f"claim-{index}-{turn}", "team", "a", 600)
                except Exception as exc:  # any escape is the failure
                    escaped.append(f"{type(exc).__name__}: {exc}")

        killing = asyncio.create_task(kill())
        await asyncio.gather(*(call(i) for i in range(workers)))
        stop.set()
        await killing
        for _ in range(400):  # the probe brings it back once nothing kills it
            if not state.degraded:
                break
            await asyncio.sleep(0.02)
        assert not state.degraded
        await state.task_cost("task-0")  # a call on Redis pushes what is left
        local = {f"task-{i}": await state.local.task_cost(f"task-{i}") for i in range(8)}
        await killer.aclose()
        await state.aclose()
        return escaped, observer.count, local

    escaped, fallbacks, local = uvloop.run(scenario())
    assert escaped == []
    assert sum(fallbacks.values()) > 0  # the kills did cost calls their Redis answer
    per_task = amount * workers * rounds / 8
    for task_id, seen in local.items():
        # A kill can land after Redis applied an addition and before its reply, which
        # the process then also counts locally and pushes: never less, at most more.
        assert from_units(own_redis.units(task_id)) >= per_task, task_id
        assert seen > 0, task_id  # the local view follows Redis's replies, in any order


async def _unconnected_write() -> AttributeError:
    """redis-py's own error for a write on a connection that was closed under it."""
    connection = aioredis.Connection(host="127.0.0.1", port=free_port())
    try:
        await connection._send_packed_command([b"PING\r\n"])
    except AttributeError as exc:
        return exc
    raise AssertionError("redis-py wrote on a connection it never opened")


def test_an_error_inside_redis_py_connection_is_an_outage() -> None:
    error = asyncio.run(_unconnected_write())
    assert "writelines" in str(error)
    assert isinstance(error, outage.CAUGHT) and outage.is_outage(error)


def test_an_attribute_error_of_ours_is_not_hidden() -> None:
    try:
        None.writelines  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert not outage.is_outage(exc)
