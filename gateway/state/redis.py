"""Shared state in Redis, so every gateway replica sees the same running totals."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import orjson
import redis.asyncio as aioredis

from gateway.state.base import from_units, to_units


class RedisState:
    """Running task costs as integer counters (INCRBY is atomic across replicas)."""

    def __init__(
        self, client: aioredis.Redis, namespace: str, pool: aioredis.BlockingConnectionPool
    ):
        self.client = client
        self.namespace = namespace
        self._pool = pool

    @classmethod
    async def connect(cls, url: str, namespace: str) -> RedisState:
        """Connect and ping, so a wrong URL fails at start-up, not on the first request."""
        # A blocking pool makes a burst wait for a free connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=256, timeout=5, socket_connect_timeout=5, socket_timeout=5
        )
        client = aioredis.Redis(connection_pool=pool)
        try:
            await client.ping()
        except Exception:
            await client.aclose()
            await pool.aclose()
            raise
        return cls(client, namespace, pool)

    def _key(self, task_id: str) -> str:
        return f"{self.namespace}:task-cost:{task_id}"

    async def add_task_cost(self, task_id: str, amount: Decimal, ttl_s: float) -> Decimal:
        key = self._key(task_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incrby(key, to_units(amount))
            pipe.expire(key, max(math.ceil(ttl_s), 1))
            units, _ = await pipe.execute()
        return from_units(int(units))

    async def task_cost(self, task_id: str) -> Decimal:
        value = await self.client.get(self._key(task_id))
        return from_units(int(value)) if value is not None else Decimal("0E-10")

    async def prefix_history(self, keys: list[str]) -> list[dict[str, Any]]:
        if not keys:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lrange(self._prefix_key(key), 0, -1)
            lists = await pipe.execute()
        # A request is remembered under its task and its caller: parse each record once.
        unique = dict.fromkeys(item for items in lists for item in items)
        return [orjson.loads(item) for item in unique]

    async def remember_prefix(
        self, keys: list[str], record: dict[str, Any], ttl_s: float, keep: int
    ) -> None:
        value = orjson.dumps(record)
        async with self.client.pipeline(transaction=True) as pipe:
            for key in keys:
                name = self._prefix_key(key)
                pipe.lpush(name, value)
                pipe.ltrim(name, 0, keep - 1)
                pipe.expire(name, max(math.ceil(ttl_s), 1))
            await pipe.execute()

    async def task_value(self, task_id: str, name: str) -> str | None:
        value = await self.client.get(f"{self.namespace}:task:{task_id}:{name}")
        return value.decode() if isinstance(value, bytes) else value

    async def pin_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        key = f"{self.namespace}:task:{task_id}:{name}"
        await self.client.set(key, value, ex=max(math.ceil(ttl_s), 1), nx=True)

    def _prefix_key(self, key: str) -> str:
        return f"{self.namespace}:prefix:{key}"

    async def aclose(self) -> None:
        await self.client.aclose()
        await self._pool.aclose()  # a pool we created is ours to close
