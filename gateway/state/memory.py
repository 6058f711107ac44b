"""In-process shared state: the embedded default, for a single gateway process."""

from __future__ import annotations

import time
from collections import OrderedDict
from decimal import Decimal
from typing import Any

from gateway.state.base import StateHealth, from_units, to_units


class MemoryState:
    """Running task costs in a bounded LRU, expired after their TTL."""

    def __init__(self, max_tasks: int = 100_000, max_prefix_keys: int = 100_000):
        self.max_tasks = max_tasks
        self.max_prefix_keys = max_prefix_keys
        self._costs: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._prefixes: OrderedDict[str, tuple[list[dict[str, Any]], float]] = OrderedDict()
        self._values: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def _live(self, task_id: str) -> int:
        entry = self._costs.get(task_id)
        if entry is None:
            return 0
        units, expires = entry
        if expires < time.monotonic():
            del self._costs[task_id]
            return 0
        return units

    async def add_task_cost(self, task_id: str, amount: Decimal, ttl_s: float) -> Decimal:
        units = self._live(task_id) + to_units(amount)
        self._store_cost(task_id, units, ttl_s)
        return from_units(units)

    async def set_task_cost(self, task_id: str, total: Decimal, ttl_s: float) -> None:
        """Take a total learned elsewhere (from Redis), so later local adds continue from it.

        Never lower: two calls of one task answered by Redis in one order can store their
        totals in the other, and this total is the floor pushed to a Redis that restarted
        empty; a stale lower one lost a request's cost there.
        """
        self._store_cost(task_id, max(to_units(total), self._live(task_id)), ttl_s)

    def _store_cost(self, task_id: str, units: int, ttl_s: float) -> None:
        self._costs[task_id] = (units, time.monotonic() + ttl_s)
        self._costs.move_to_end(task_id)
        while len(self._costs) > self.max_tasks:
            self._costs.popitem(last=False)

    async def task_cost(self, task_id: str) -> Decimal:
        return from_units(self._live(task_id))

    async def prefix_history(self, keys: list[str]) -> list[dict[str, Any]]:
        now = time.monotonic()
        found: dict[int, dict[str, Any]] = {}  # by identity: one record is kept under two keys
        prefixes = self._prefixes
        for key in keys:
            entry = prefixes.get(key)
            if entry is not None and entry[1] >= now:
                for record in entry[0]:  # a loop, not a generator per key
                    found[id(record)] = record
        return list(found.values())

    async def remember_prefix(
        self, keys: list[str], record: dict[str, Any], ttl_s: float, keep: int
    ) -> None:
        expires = time.monotonic() + ttl_s
        prefixes = self._prefixes
        for key in keys:
            entry = prefixes.get(key)
            if entry is None:  # a new key goes last, as move_to_end would put it
                prefixes[key] = ([record][:keep], expires)
            else:
                prefixes[key] = ([record, *entry[0]][:keep], expires)
                prefixes.move_to_end(key)
        while len(prefixes) > self.max_prefix_keys:
            prefixes.popitem(last=False)

    async def task_value(self, task_id: str, name: str) -> str | None:
        entry = self._values.get(f"{task_id}:{name}")
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    async def pin_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        if await self.task_value(task_id, name) is None:
            self._values[f"{task_id}:{name}"] = (value, time.monotonic() + ttl_s)
            while len(self._values) > self.max_tasks:
                self._values.popitem(last=False)

    async def claim_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> str:
        # No await between the look and the store: atomic on the event loop.
        held = self._value(task_id, name)
        if held is not None:
            return held
        self.set_task_value(task_id, name, value, ttl_s)
        return value

    async def forget_task_value(self, task_id: str, name: str) -> bool:
        held = self._value(task_id, name) is not None
        self._values.pop(f"{task_id}:{name}", None)
        return held

    def set_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        """Take a value learned elsewhere (Redis), so an outage keeps what was known."""
        key = f"{task_id}:{name}"
        self._values[key] = (value, time.monotonic() + ttl_s)
        self._values.move_to_end(key)
        while len(self._values) > self.max_tasks:
            self._values.popitem(last=False)

    def _value(self, task_id: str, name: str) -> str | None:
        entry = self._values.get(f"{task_id}:{name}")
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def health(self) -> StateHealth:
        return StateHealth("memory")

    async def aclose(self) -> None:
        self._values.clear()
        self._costs.clear()
        self._prefixes.clear()
