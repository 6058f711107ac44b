"""Redis while it answers; while it does not, each budget's `on_state_outage` decides.

    up   --(`failures` consecutive failed calls)-->  down
    down --(`retry_s` later, the next call tries Redis again and it answers)-->  up

While down, a reservation whose scopes have any budget or rate limit set to
`fail_closed` is refused with `StateUnavailable` (503); otherwise it is held by this
process's `MemoryLimiter` alone, which knows only what this process saw while Redis was
away (each replica enforces the budget on its own). What such reservations settle is
added to the Redis windows once Redis answers again (at least once: a push whose reply
was lost is sent again, so a window may count it twice, never zero times). A settle or
release of a Redis reservation that fails is kept and sent before the next call that
reaches Redis (settles are idempotent, so a retry never counts twice); until then its
hold keeps the money reserved in Redis. Soft-limit crossings of such deferred settles and
of pushed local spend are not reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TypeVar

from gateway.ledger.records import utcnow
from gateway.settings import RedisLimits
from gateway.state import outage
from gateway.state.base import StateHealth, to_units
from gateway.tenants.base import BudgetUsage
from gateway.tenants.limits import Period, Scope, ScopeLimits
from gateway.tenants.memory import MemoryLimiter
from gateway.tenants.outcome import Refusal, Reservation, Settlement, StateUnavailable
from gateway.tenants.plan import BudgetCheck
from gateway.tenants.redis import RedisLimiter

log = logging.getLogger("farebox.tenants")
T = TypeVar("T")
MAX_PENDING = 100_000  # settles waiting for Redis; the oldest go first (their holds expire)
PENDING_PER_CALL = 32  # sent before each call, so that no one request waits for a backlog


MISSHAPEN = (
    "Redis holds a key of this budget as another type than Farebox writes "
    "(written there by something else); delete the key to start its window anew"
)


class _Unavailable(Exception):
    """Internal: Redis did not answer this call, or said that a key it needs is of another
    type; `reason` says which, for a refusal's message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Finish = tuple[Reservation, Decimal | None, int, datetime]  # actual None: a release


class FallbackLimiter:
    """The engine the gateway uses with Redis configured."""

    def __init__(
        self,
        redis: RedisLimiter,
        limits: RedisLimits | None = None,
        local: MemoryLimiter | None = None,
        clock: Callable[[], datetime] = utcnow,
    ):
        self.redis = redis
        self.local = local or MemoryLimiter(redis.hold_s, clock)
        self.limits = limits or RedisLimits()
        self._clock = clock
        self._failures = 0
        self._down_until: float | None = None  # monotonic time of the next try
        self._reason = ""
        self._down_since: float | None = None  # wall-clock time the outage began
        self._pending: OrderedDict[str, Finish] = OrderedDict()
        self._unpushed: dict[str, tuple[BudgetCheck, int]] = {}  # spent here, not in Redis

    @property
    def degraded(self) -> bool:
        """True while Redis is treated as away."""
        return self._down_until is not None

    def health(self) -> StateHealth:
        degraded = self._down_until is not None
        return StateHealth("redis", degraded, self._reason if degraded else None, self._down_since)

    async def reserve(
        self,
        scopes: Sequence[ScopeLimits],
        worst_case_usd: Decimal,
        tokens: int,
        now: datetime | None = None,
    ) -> Reservation | Refusal:
        now = now or self._clock()
        try:
            return await self._call(lambda: self.redis.reserve(scopes, worst_case_usd, tokens, now))
        except _Unavailable as exc:
            reason = exc.reason
        closed = _first_fail_closed(scopes)
        if closed is not None:
            return StateUnavailable(closed[0], closed[1], reason, self.limits.retry_s)
        return await self.local.reserve(scopes, worst_case_usd, tokens, now)

    async def settle(
        self,
        reservation: Reservation,
        actual_usd: Decimal,
        actual_tokens: int,
        now: datetime | None = None,
    ) -> Settlement:
        now = now or self._clock()
        if reservation.backend == "memory":
            settlement = await self.local.settle(reservation, actual_usd, actual_tokens, now)
            if settlement.applied:
                self._count_locally(reservation, to_units(actual_usd))
            return settlement
        try:
            return await self._call(
                lambda: self.redis.settle(reservation, actual_usd, actual_tokens, now)
            )
        except _Unavailable:
            self._keep((reservation, actual_usd, actual_tokens, now))
            return Settlement(True)  # counted once Redis answers again

    async def release(self, reservation: Reservation, now: datetime | None = None) -> bool:
        now = now or self._clock()
        if reservation.backend == "memory":
            return await self.local.release(reservation, now)
        try:
            return await self._call(lambda: self.redis.release(reservation, now))
        except _Unavailable:
            self._keep((reservation, None, 0, now))
            return True

    @property
    def hold_s(self) -> float:
        return self.redis.hold_s

    async def renew(self, reservation: Reservation, now: datetime | None = None) -> bool:
        """Renew where the reservation lives; a Redis hold Redis cannot be asked about is
        not renewed (logged, False): it may expire, and a late settle still counts once."""
        now = now or self._clock()
        if reservation.backend == "memory":
            return await self.local.renew(reservation, now)
        try:
            return await self._call(lambda: self.redis.renew(reservation, now))
        except _Unavailable as exc:
            log.warning("budget state: hold %s not renewed: %s", reservation.id, exc.reason)
            return False

    async def usage(self, scope: Scope, period: Period, now: datetime) -> BudgetUsage:
        try:
            return await self._call(lambda: self.redis.usage(scope, period, now))
        except _Unavailable:
            return await self.local.usage(scope, period, now)

    async def aclose(self) -> None:
        if self._pending or self._unpushed:
            log.warning(
                "budget state: %d settles and %d windows' local spend never reached Redis",
                len(self._pending),
                len(self._unpushed),
            )
        await self.redis.aclose()
        await self.local.aclose()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """The settles waiting for Redis, then one bounded call (none while down)."""
        if self._down_until is not None and time.monotonic() < self._down_until:
            raise _Unavailable(self._reason)
        try:
            await self._send_pending()
            await self._push_spent()
            async with asyncio.timeout(self._deadline):
                result = await call()
        except outage.CAUGHT as exc:
            if outage.is_misshapen_key(exc):  # Redis answered: this call alone is refused
                raise _Unavailable(MISSHAPEN) from exc
            if not outage.is_outage(exc):
                raise
            self._failed(exc)
            raise _Unavailable(self._reason) from exc
        if self._down_until is not None:
            log.warning("budget state: Redis answers again")
        self._failures, self._down_until, self._down_since = 0, None, None
        return result

    @property
    def _deadline(self) -> float:
        limits = self.limits
        return limits.pool_wait_s + limits.connect_timeout_s + limits.timeout_s

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        self._reason = f"Redis unreachable ({type(exc).__name__})"
        if self._failures >= self.limits.failures or self._down_until is not None:
            if self._down_until is None:
                log.warning("budget state degraded: %s; outage policies apply", self._reason)
                self._down_since = time.time()
            self._down_until = time.monotonic() + self.limits.retry_s

    def _keep(self, finish: Finish) -> None:
        self._pending[finish[0].id] = finish
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)

    async def _send_pending(self) -> None:
        """Send some settles kept while Redis was away, oldest first; raise if one fails."""
        for _ in range(min(PENDING_PER_CALL, len(self._pending))):
            rid, (reservation, actual, tokens, now) = next(iter(self._pending.items()))
            async with asyncio.timeout(self._deadline):
                if actual is None:
                    await self.redis.release(reservation, now)
                else:
                    await self.redis.settle(reservation, actual, tokens, now)
            self._pending.pop(rid, None)

    def _count_locally(self, reservation: Reservation, units: int) -> None:
        for check in reservation.budgets:
            self._add_unpushed(check, units)

    def _add_unpushed(self, check: BudgetCheck, units: int) -> None:
        _, before = self._unpushed.get(check.name, (check, 0))
        self._unpushed[check.name] = (check, before + units)

    async def _push_spent(self) -> None:
        """Add what reservations held here spent to the Redis windows; raise if it fails."""
        if not self._unpushed:
            return
        spent, self._unpushed = self._unpushed, {}
        try:
            async with asyncio.timeout(self._deadline):
                await self.redis.add_spent(list(spent.values()))
        except BaseException:
            for check, units in spent.values():  # kept for the next try
                self._add_unpushed(check, units)
            raise


def _first_fail_closed(scopes: Sequence[ScopeLimits]) -> tuple[Scope, str] | None:
    """The first budget or rate limit that refuses while its state cannot be reached."""
    for limits in scopes:
        for budget in limits.budgets:
            if budget.on_state_outage == "fail_closed":
                return limits.scope, f"{budget.period} budget"
        if limits.rate is not None and limits.rate.on_state_outage == "fail_closed":
            return limits.scope, "rate limit"
    return None
