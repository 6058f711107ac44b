"""Redis as an accelerator: shared state through Redis while it answers, per process while not.

    up   --(`failures` consecutive failed calls, or no answer at start-up)-->  down
    down --(a probe every `retry_s` answers and the local deltas are pushed)-->  up

Every Redis call is bounded (socket timeouts and one deadline), and a call that fails is
answered from the in-process `MemoryState` at once, so no request fails or waits on Redis.
While down, nothing calls Redis but the probe, and:

- task costs add up locally, on top of the last total Redis gave for the task; what was
  added locally is pushed with INCRBY on recovery, so the shared totals end exact (a
  process that exits while Redis is still away loses its deltas; the ledger has them);
- prefix history is local: a task's next request may look new here, and nothing is pushed
  back (the history is short-lived and only advice);
- effort pins are local, and pushed with SET NX on recovery (a pin made meanwhile wins);
- task claims (which team a task id belongs to) answered by Redis are remembered locally,
  so a task seen before the outage keeps its owner here; a task first used during it is
  claimed per process and pushed with SET NX on recovery (a claim made meanwhile wins).

A call that meets a key of another type than it reads (WRONGTYPE: written there by
something else) is answered locally too, but Redis answered: it does not count towards
`failures`, so one bad key never switches every request to per-process state.

Exactly one log line marks each transition; `StateObserver` gets the degraded flag and
one call per request served locally (the metrics `farebox_state_degraded` and
`farebox_state_fallbacks_total`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, TypeVar

from gateway.settings import RedisLimits
from gateway.state import outage
from gateway.state.base import StateHealth, StateObserver, from_units, to_units
from gateway.state.memory import MemoryState
from gateway.state.redis import CostDelta, RedisState

log = logging.getLogger("farebox.state")
T = TypeVar("T")
CLAIM_REUSE_S = 60.0
BATCHED = True
"""`_call`'s flag for a call that goes through `RedisState`'s command batch."""


class _Unavailable(Exception):
    """Internal: this Redis call failed, answer locally."""


class FallbackState:
    """The `SharedState` the gateway uses with Redis configured: Redis, else per-process."""

    def __init__(
        self, redis: RedisState, limits: RedisLimits, observer: StateObserver | None = None
    ):
        self.redis = redis
        self.local = MemoryState()
        self.limits = limits
        self._observer = observer
        self._up = True
        self._failures = 0
        self._reason: str | None = None
        self._down_since: float | None = None
        self._unsynced_costs: dict[str, tuple[int, float]] = {}
        self._pushing: dict[str, int] = {}  # units of the push in flight (one at a time)
        self._push_lock = asyncio.Lock()
        self._unsynced_pins: dict[tuple[str, str], tuple[str, float]] = {}
        # Owners Redis answered, reused for a minute: a claim's owner never changes while
        # it lasts, so most requests of a task skip the round trip.
        self._claimed: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._probe: asyncio.Task[None] | None = None
        self._pushed = 0  # task totals pushed since the last transition, for its log line
        self._closing = False
        # Calls through Redis's command batch are bounded there, one timer per batch.
        redis.bound_batched_calls(self._deadline)

    @classmethod
    async def connect(
        cls, url: str, namespace: str, limits: RedisLimits, observer: StateObserver | None = None
    ) -> FallbackState:
        """Start on Redis if it answers a ping now, else degraded (and probing)."""
        state = cls(RedisState.from_url(url, namespace, limits), limits, observer)
        try:
            await state._call(lambda redis: redis.ping())
        except _Unavailable as exc:
            if state._up:  # (one failure may already have been enough)
                state._mark_down(exc.__cause__)
        return state

    @property
    def _deadline(self) -> float:
        """The most one call may take: a wait for a pooled connection, a connect, a reply.

        Each socket operation has its own (shorter) timeout; this only bounds the sum.
        """
        return self.limits.pool_wait_s + self.limits.connect_timeout_s + self.limits.timeout_s

    @property
    def degraded(self) -> bool:
        return not self._up

    def health(self) -> StateHealth:
        return StateHealth("redis", not self._up, self._reason, self._down_since)

    async def add_task_cost(self, task_id: str, amount: Decimal, ttl_s: float) -> Decimal:
        if self._up:
            # This process's own view is a floor for the shared total (see RedisState),
            # less what it added locally that Redis has not (surely) taken yet.
            known = await self.local.task_cost(task_id) - from_units(self._unconfirmed(task_id))
            floor = known + amount
            try:
                total = await self._call(
                    lambda redis: redis.add_task_cost(task_id, amount, ttl_s, floor), BATCHED
                )
            except _Unavailable:
                pass
            else:
                # Remembered, so that local additions continue from the shared total.
                await self.local.set_task_cost(task_id, total, ttl_s)
                return total
        self._fell_back("add_task_cost")
        units, _ = self._unsynced_costs.get(task_id, (0, 0.0))
        self._unsynced_costs[task_id] = (units + to_units(amount), ttl_s)
        return await self.local.add_task_cost(task_id, amount, ttl_s)

    async def task_cost(self, task_id: str) -> Decimal:
        return await self._either("task_cost", lambda state: state.task_cost(task_id))

    async def prefix_history(self, keys: list[str]) -> list[dict[str, Any]]:
        return await self._either(
            "prefix_history", lambda state: state.prefix_history(keys), BATCHED
        )

    async def remember_prefix(
        self, keys: list[str], record: dict[str, Any], ttl_s: float, keep: int
    ) -> None:
        await self._either(
            "remember_prefix",
            lambda state: state.remember_prefix(keys, record, ttl_s, keep),
            BATCHED,
        )

    async def task_value(self, task_id: str, name: str) -> str | None:
        return await self._either(
            "task_value", lambda state: state.task_value(task_id, name), BATCHED
        )

    async def pin_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        if self._up:
            try:
                await self._call(
                    lambda redis: redis.pin_task_value(task_id, name, value, ttl_s), BATCHED
                )
                return
            except _Unavailable:
                pass
        self._fell_back("pin_task_value")
        if await self.local.task_value(task_id, name) is None:
            self._unsynced_pins[(task_id, name)] = (value, ttl_s)
        await self.local.pin_task_value(task_id, name, value, ttl_s)

    async def forget_task_value(self, task_id: str, name: str) -> bool:
        # Local too: a copy kept there through an outage must not answer after a delete.
        self._unsynced_pins.pop((task_id, name), None)
        held_here = await self.local.forget_task_value(task_id, name)
        held = await self._either(
            "forget_task_value", lambda state: state.forget_task_value(task_id, name)
        )
        return held or held_here

    async def claim_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> str:
        if self._up:
            known = self._claimed.get((task_id, name))
            if known is not None and known[1] > time.monotonic():
                return known[0]
            try:
                held = await self._call(
                    lambda redis: redis.claim_task_value(task_id, name, value, ttl_s), BATCHED
                )
            except _Unavailable:
                pass
            else:
                self.local.set_task_value(task_id, name, held, ttl_s)  # kept through an outage
                self._remember_claim((task_id, name), held, min(ttl_s, CLAIM_REUSE_S))
                return held
        self._fell_back("claim_task_value")
        held = await self.local.claim_task_value(task_id, name, value, ttl_s)
        if held == value:  # pushed with SET NX on recovery: a claim made in Redis meanwhile wins
            self._unsynced_pins.setdefault((task_id, name), (value, ttl_s))
        return held

    def _remember_claim(self, key: tuple[str, str], held: str, for_s: float) -> None:
        self._claimed[key] = (held, time.monotonic() + for_s)
        self._claimed.move_to_end(key)
        while len(self._claimed) > self.local.max_tasks:
            self._claimed.popitem(last=False)

    async def aclose(self) -> None:
        self._closing = True  # no new probe from here on
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        if self._unsynced_costs or self._unsynced_pins:
            # One bounded try, so a short blip does not cost the shared totals their deltas.
            with contextlib.suppress(_Unavailable):
                await self._call(lambda redis: redis.ping())
        await self.redis.aclose()
        await self.local.aclose()

    async def _either(
        self, operation: str, call: Callable[[Any], Awaitable[T]], batched: bool = False
    ) -> T:
        """Ask Redis while it is up; the local state when it is down or this call fails."""
        if self._up:
            try:
                return await self._call(call, batched)
            except _Unavailable:
                pass
        self._fell_back(operation)
        return await call(self.local)

    async def _call(self, call: Callable[[RedisState], Awaitable[T]], batched: bool = False) -> T:
        """One bounded Redis call, then a push of local deltas; `_Unavailable` on failure.

        `batched`: `call` only waits on Redis's command batch, which bounds it by the same
        deadline (`RedisState.bound_batched_calls`), so it needs no timer of its own.
        """
        try:
            if batched:
                result = await call(self.redis)
            else:
                async with asyncio.timeout(self._deadline):
                    result = await call(self.redis)
        except outage.CAUGHT as exc:
            if outage.is_misshapen_key(exc):  # Redis is up: this call alone is answered here
                raise _Unavailable from exc
            if not outage.is_outage(exc):
                raise
            self._failed(exc)
            raise _Unavailable from exc
        self._failures = 0
        if self._unsynced_costs or self._unsynced_pins:
            await self._push()  # the call succeeded whether or not the push does
        return result

    async def _push(self) -> bool:
        """Push what was added locally; False (the rest kept for later) if Redis refused."""
        return await self._push_costs() and await self._push_pins()

    def _unconfirmed(self, task_id: str) -> int:
        """Units added locally to the task that Redis may not have yet."""
        return self._unsynced_costs.get(task_id, (0, 0.0))[0] + self._pushing.get(task_id, 0)

    async def _push_costs(self) -> bool:
        """INCRBY the local deltas, each with this process's total as its floor."""
        if not self._unsynced_costs or self._push_lock.locked():
            return True  # nothing to push, or a push is on its way
        async with self._push_lock:
            costs, self._unsynced_costs = self._unsynced_costs, {}
            self._pushing = {task_id: units for task_id, (units, _) in costs.items()}
            deltas = {
                task_id: CostDelta(units, to_units(await self.local.task_cost(task_id)), ttl_s)
                for task_id, (units, ttl_s) in costs.items()
            }
            try:
                async with asyncio.timeout(self._deadline):
                    await self.redis.add_units(deltas)
            except BaseException as exc:  # kept for the next push, cancelled or not
                for task_id, (units, ttl_s) in costs.items():
                    newer, _ = self._unsynced_costs.get(task_id, (0, 0.0))
                    self._unsynced_costs[task_id] = (units + newer, ttl_s)
                if not outage.is_outage(exc):
                    raise
                self._failed(exc)
                return False
            finally:
                self._pushing = {}
        self._pushed += len(costs)
        return True

    async def _push_pins(self) -> bool:
        if not self._unsynced_pins:
            return True
        pins, self._unsynced_pins = self._unsynced_pins, {}
        try:
            async with asyncio.timeout(self._deadline):
                await self.redis.pin_all(pins)
        except BaseException as exc:
            self._unsynced_pins = pins | self._unsynced_pins
            if not outage.is_outage(exc):
                raise
            self._failed(exc)
            return False
        return True

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._up and not self._closing and self._failures >= self.limits.failures:
            self._mark_down(exc)

    def _fell_back(self, operation: str) -> None:
        if self._observer is not None:
            self._observer.state_fallback(operation)

    def _mark_down(self, exc: BaseException | None) -> None:
        self._up = False
        self._reason = f"Redis at {self.redis.address} unreachable: {_describe(exc)}"
        self._down_since = time.time()
        log.warning(
            "shared state degraded: %s; serving per-process state, probing every %gs",
            self._reason,
            self.limits.retry_s,
        )
        if self._observer is not None:
            self._observer.state_degraded(True)
        self._probe = asyncio.create_task(self._probe_until_back(), name="redis-probe")

    async def _probe_until_back(self) -> None:
        """While down: every `retry_s`, reconnect, ping and push the local deltas."""
        while True:
            await asyncio.sleep(self.limits.retry_s)
            try:
                # Connections from before the outage are dead: start afresh, then push.
                await self._call(lambda redis: redis.reconnect())
            except _Unavailable:
                continue
            if await self._push():
                # Deltas added during this push go out with the next call, which pushes too.
                self._mark_up()
                return

    def _mark_up(self) -> None:
        away = time.time() - (self._down_since or time.time())
        log.info(
            "shared state recovered: Redis at %s is back after %.1fs; pushed %d task totals",
            self.redis.address,
            away,
            self._pushed,
        )
        self._pushed = 0
        self._up, self._failures = True, 0
        self._reason = self._down_since = None
        self._probe = None
        if self._observer is not None:
            self._observer.state_degraded(False)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
