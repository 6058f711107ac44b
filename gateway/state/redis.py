"""Shared state in Redis, so every gateway replica sees the same running totals."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from gateway.settings import RedisLimits
from gateway.state.base import StateHealth, from_units, to_units
from gateway.state.batch import CommandBatch
from gateway.state.outage import is_misshapen_key

PUSH_BATCH = 500
# Per key: INCRBY, then raise the total to a floor (the caller's own view of it, which a
# Redis restarted without its data would otherwise forget), then EXPIRE. Totals are
# non-negative integers, compared as strings so that none is rounded through a double.
# A key that holds no integer (written by something else, or of another type: WRONGTYPE,
# "not an integer", an overflow) takes the floor: the error would otherwise fail every
# caller whose addition shares the call, and every later push of the local totals with it.
# Any other error (OOM: Redis refuses writes) ends the call, the total kept.
# Three args a key and a total a key, in order: the additions of concurrent requests
# (`CommandBatch.script_gathering`) go in one call, a key twice if two name one task.
_ADD_WITH_FLOOR = """
local totals = {}
for i, key in ipairs(KEYS) do
  local at = (i - 1) * 3
  local floor = ARGV[at + 2]
  local added, total = redis.pcall('INCRBY', key, ARGV[at + 1]), ''
  if type(added) == 'number' then
    total = redis.call('GET', key)
  elseif string.sub(added.err, 1, 9) ~= 'WRONGTYPE' and string.sub(added.err, 1, 4) ~= 'ERR ' then
    return added
  end
  if #total < #floor or (#total == #floor and total < floor) then
    redis.call('SET', key, floor)
    total = floor
  end
  redis.call('EXPIRE', key, ARGV[at + 3])
  totals[i] = total
end
return totals
"""
# The lists of a request's keys (its task's and its caller's) in one reply.
_HISTORY = """
local lists = {}
for i, key in ipairs(KEYS) do
  lists[i] = redis.call('LRANGE', key, 0, -1)
end
return lists
"""
# Push records onto lists, keep the newest ARGV[1] of each, expire each after ARGV[2]
# seconds: atomic as MULTI/EXEC was, in one command with one reply. After the two, each
# push is its key count n, n indices into KEYS, its record (`appending.Pushes`): the
# records of concurrent requests, whatever their keys, go in one call
# (`CommandBatch.script_appending`), pushed in the order they were made. A key that holds
# no list (WRONGTYPE: written by something else) is started anew: the error would
# otherwise fail every caller whose record shares the call. Any other error (OOM: Redis
# refuses writes) ends the call as before, the list kept.
_REMEMBER = """
local at, last = 3, #ARGV
while at <= last do
  local n = tonumber(ARGV[at])
  local record = ARGV[at + n + 1]
  for i = at + 1, at + n do
    local key = KEYS[tonumber(ARGV[i])]
    local pushed = redis.pcall('LPUSH', key, record)
    if type(pushed) == 'table' then
      if string.sub(pushed.err, 1, 9) ~= 'WRONGTYPE' then
        return pushed
      end
      redis.call('DEL', key)
      redis.call('LPUSH', key, record)
    end
  end
  at = at + n + 2
end
for _, key in ipairs(KEYS) do
  redis.call('LTRIM', key, 0, ARGV[1] - 1)
  redis.call('EXPIRE', key, ARGV[2])
end
return #KEYS
"""
# Parsed history records, by their stored bytes (see `RedisState._parse`).
PARSED_KEEP = 512
PARSED_MAX_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class CostDelta:
    """An addition to a task's total in 1e-10 USD units, the least total after it, its TTL."""

    units: int
    floor: int
    ttl_s: float


class RedisState:
    """Running task costs as integer counters (INCRBY is atomic across replicas)."""

    def __init__(
        self, client: aioredis.Redis, namespace: str, pool: aioredis.BlockingConnectionPool
    ):
        self.client = client
        self.namespace = namespace
        self._pool = pool
        self._add = client.register_script(_ADD_WITH_FLOOR)
        self._history = client.register_script(_HISTORY)
        self._remember = client.register_script(_REMEMBER)
        self._parsed: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._batch = CommandBatch(client)

    @classmethod
    def from_url(cls, url: str, namespace: str, limits: RedisLimits) -> RedisState:
        """A client that connects on first use; every call is bounded by `limits`."""
        # A blocking pool makes a burst queue for a free connection (a wait that is ours,
        # not Redis's, so it gets longer than a reply); few connections, few handshakes.
        # No retries: the caller falls back to per-process state instead of waiting.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=limits.pool_size,
            timeout=limits.pool_wait_s,
            socket_connect_timeout=limits.connect_timeout_s,
            socket_timeout=limits.timeout_s,
        )
        return cls(
            aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0)), namespace, pool
        )

    def bound_batched_calls(self, deadline_s: float) -> None:
        """Answer every batched call (the calls that go through `CommandBatch`: the prefix
        history, task values and task costs) within `deadline_s` of its making, a
        `TimeoutError` if Redis has not answered by then; the others stay unbounded here."""
        self._batch.deadline_s = deadline_s

    @property
    def address(self) -> str:
        """host:port/db, for log lines (never the password)."""
        kwargs = self._pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        return f"{where}/{kwargs.get('db', 0)}"

    async def ping(self) -> None:
        """Raise unless Redis answers."""
        await self.client.ping()

    async def reconnect(self) -> None:
        """Drop the idle pooled connections (after an outage they are dead), then ping.

        Only the idle ones: a call begun before the outage may still hold a connection
        (its deadline is longer than the probe interval), and closing a socket under a
        call that is about to write made redis-py write to a closed transport (RuntimeError)
        or to none at all (AttributeError: 'NoneType' object has no attribute 'writelines').
        A connection in use closes itself on its own error, and the pool reconnects a
        closed one when it is next taken.
        """
        await self._batch.release_idle()  # the batch's idle connection: dropped with the rest
        await self._pool.disconnect(inuse_connections=False)
        await self.client.ping()

    async def add_units(self, deltas: dict[str, CostDelta]) -> dict[str, int]:
        """Add to each task's total, at least up to its floor; return the new totals."""
        if not deltas:
            return {}
        totals: dict[str, int] = {}
        items = list(deltas.items())
        for start in range(0, len(items), PUSH_BATCH):  # a script blocks Redis while it runs
            batch = items[start : start + PUSH_BATCH]
            keys = [self._key(task_id) for task_id, _ in batch]
            args = [
                value
                for _, delta in batch
                for value in (delta.units, max(delta.floor, 0), max(math.ceil(delta.ttl_s), 1))
            ]
            replies = await self._add(keys=keys, args=args)
            totals.update((task_id, int(r)) for (task_id, _), r in zip(batch, replies, strict=True))
        return totals

    async def pin_all(self, pins: dict[tuple[str, str], tuple[str, float]]) -> None:
        """Pin each (task, name) to (value, ttl) unless already pinned, in one round trip."""
        if not pins:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            for (task_id, name), (value, ttl_s) in pins.items():
                pipe.set(self._pin_key(task_id, name), value, ex=max(math.ceil(ttl_s), 1), nx=True)
            await pipe.execute()

    def _key(self, task_id: str) -> str:
        return f"{self.namespace}:task-cost:{task_id}"

    def _pin_key(self, task_id: str, name: str) -> str:
        return f"{self.namespace}:task:{task_id}:{name}"

    async def add_task_cost(
        self, task_id: str, amount: Decimal, ttl_s: float, floor: Decimal | None = None
    ) -> Decimal:
        """Add to the task's total; with `floor`, the total is at least that afterwards."""
        floor_units = max(to_units(floor), 0) if floor is not None else 0
        args = [to_units(amount), floor_units, max(math.ceil(ttl_s), 1)]
        # Concurrent requests' additions, whatever their tasks, go in one script call.
        (total,) = await self._batch.script_gathering(self._add, [self._key(task_id)], args)
        return from_units(int(total))

    async def task_cost(self, task_id: str) -> Decimal:
        value = await self.client.get(self._key(task_id))
        return from_units(int(value)) if value is not None else Decimal("0E-10")

    async def prefix_history(self, keys: list[str]) -> list[dict[str, Any]]:
        if not keys:
            return []
        if len(keys) == 1:
            # A request without a task reads one key, its caller's: a plain LRANGE. As a
            # script Redis spent 15 µs of CPU reading one list of 8 records, against 4.5
            # (bench/redis_history.py), and the gateway 4,000 instructions more.
            lists = [await self._batch.command("LRANGE", self._prefix_key(keys[0]), 0, -1)]
        else:
            # Its task's too: one script, one reply. Two LRANGE replies (tried, not kept)
            # cost the gateway 41,000 instructions more a request (bench/state_calls.py
            # --task --callgrind). Concurrent requests' reads go in one call.
            names = [self._prefix_key(key) for key in keys]
            lists = await self._batch.script_reading(self._history, names)
        # A request is remembered under its task and its caller: parse each record once.
        unique = dict.fromkeys(item for items in lists for item in items)
        return [self._parse(item) for item in unique]

    def _parse(self, item: bytes) -> dict[str, Any]:
        """A stored record as a dict: the same dict for the same bytes while it is kept.

        Every request of a caller reads the same few records back; parsing them again was
        most of what reading the history cost, and handing back the same dict lets the
        prefix stage reuse what it rebuilt from it (as with the in-process state, whose
        dicts are never changed once stored). Bytes are their own key, so nothing can go
        stale; large records are parsed each time rather than pinned in memory.
        """
        record = self._parsed.get(item)
        if record is not None:
            self._parsed.move_to_end(item)
            return record
        record = orjson.loads(item)
        if len(item) <= PARSED_MAX_BYTES:
            self._parsed[item] = record
            if len(self._parsed) > PARSED_KEEP:
                self._parsed.popitem(last=False)
        return record

    async def remember_prefix(
        self, keys: list[str], record: dict[str, Any], ttl_s: float, keep: int
    ) -> None:
        if not keys:
            return
        names = [self._prefix_key(key) for key in keys]
        ttl = max(math.ceil(ttl_s), 1)
        await self._batch.script_appending(self._remember, [keep, ttl], names, orjson.dumps(record))

    async def task_value(self, task_id: str, name: str) -> str | None:
        key = self._pin_key(task_id, name)
        value = await self._batch.command("GET", key)
        return value.decode() if isinstance(value, bytes) else value

    async def pin_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        key, ex = self._pin_key(task_id, name), max(math.ceil(ttl_s), 1)
        await self._batch.command("SET", key, value, "EX", ex, "NX")

    async def claim_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> str:
        # SET NX GET (Redis 7.0+): one atomic command sets ours or returns the earlier value.
        key, ex = self._pin_key(task_id, name), max(math.ceil(ttl_s), 1)
        claim = ("SET", key, value, "EX", ex, "NX", "GET")
        try:
            held = await self._batch.command(*claim)
        except ResponseError as exc:
            if not is_misshapen_key(exc):
                raise
            # A key of another type (written by something else) holds no claim: the task
            # is claimed afresh, as after a Redis that lost its data; of two replicas
            # doing so at once, the first SET NX wins and the other reads its owner.
            await self._batch.command("DEL", key)
            held = await self._batch.command(*claim)
        if held is None:
            return value
        return held.decode() if isinstance(held, bytes) else str(held)

    async def forget_task_value(self, task_id: str, name: str) -> bool:
        return bool(await self.client.delete(self._pin_key(task_id, name)))

    def _prefix_key(self, key: str) -> str:
        return f"{self.namespace}:prefix:{key}"

    def health(self) -> StateHealth:
        return StateHealth("redis")

    async def aclose(self) -> None:
        await self._batch.aclose()
        await self.client.aclose()
        await self._pool.aclose()  # a pool we created is ours to close
