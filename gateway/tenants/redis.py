"""The engine shared by every replica: one Lua script checks and holds all-or-nothing.

Keys (namespace `farebox`):

    {farebox:tenants}:budget:<kind>:<id>:day:2026-11-30        hash: used, spent, h:/x:<id>
    {farebox:tenants}:budget:<kind>:<id>:day:2026-11-30:holds  zset: hold deadlines
    {farebox:tenants}:rate:<kind>:<id>:<requests|tokens|usd>    the GCRA TAT (ms)
    {farebox:tenants}:live:<reservation id>    a reservation with no budget, while held

Every key carries one hash tag, so that a script touching a key's, its team's and its
project's counters runs on one Redis Cluster shard (a script may only touch one slot).
The price is that all budget traffic lands on that shard; per-team tags would spread it,
but only if every project belonged to one team, which nothing guarantees yet. Windows are
kept two days past their reset and lifetime counters for good (the ledger stays the
record: a Redis that loses its data forgets lifetime spend). Deadlines and windows use the
caller's clock (NTP-synced replicas), so tests can pass `now`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.ledger.records import utcnow
from gateway.settings import RedisLimits
from gateway.state.base import StateHealth, from_units
from gateway.tenants.base import (
    DEFAULT_HOLD_S,
    EXPIRED_KEEP_S,
    BudgetUsage,
    actual_units,
    budget_refusal,
    held,
    rate_delta,
    rate_refusal,
    soft_crossed,
)
from gateway.tenants.limits import Budget, Period, Scope, ScopeLimits
from gateway.tenants.memory import epoch_ms
from gateway.tenants.outcome import Refusal, Reservation, Settlement
from gateway.tenants.plan import BudgetCheck, Plan, plan
from gateway.tenants.scripts import ADD_SPENT, RENEW, RESERVE, SETTLE, USAGE


class RedisLimiter:
    """Budgets and rate limits in Redis; a failing call raises RedisError or OSError."""

    def __init__(
        self,
        client: aioredis.Redis,
        namespace: str = "farebox",
        hold_s: float = DEFAULT_HOLD_S,
        clock: Callable[[], datetime] = utcnow,
        own_pool: aioredis.BlockingConnectionPool | None = None,
    ):
        self.client = client
        self._own_pool = own_pool  # closed with the engine; a shared client's is not
        self.hold_s = hold_s
        self.prefix = f"{{{namespace}:tenants}}:"
        self._clock = clock
        self._reserve = client.register_script(RESERVE)
        self._settle = client.register_script(SETTLE)
        self._usage = client.register_script(USAGE)
        self._renew = client.register_script(RENEW)
        self._add_spent = client.register_script(ADD_SPENT)

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "farebox",
        limits: RedisLimits | None = None,
        hold_s: float = DEFAULT_HOLD_S,
    ) -> RedisLimiter:
        """A client bounded like gateway/state's: no retries, short timeouts, a blocking pool."""
        limits = limits or RedisLimits()
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=limits.pool_size,
            timeout=limits.pool_wait_s,
            socket_connect_timeout=limits.connect_timeout_s,
            socket_timeout=limits.timeout_s,
        )
        client = aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))
        return cls(client, namespace, hold_s, own_pool=pool)

    async def reserve(
        self,
        scopes: Sequence[ScopeLimits],
        worst_case_usd: Decimal,
        tokens: int,
        now: datetime | None = None,
    ) -> Reservation | Refusal:
        now = now or self._clock()
        checks = plan(scopes, worst_case_usd, tokens, now)
        rid = uuid.uuid4().hex
        now_ms = epoch_ms(now)
        hold_ms = round(self.hold_s * 1000)
        args: list[str | int] = [now_ms, rid, now_ms + hold_ms, len(checks.budgets)]
        args += [len(checks.rates), hold_ms, EXPIRED_KEEP_S * 1000]
        for check in checks.budgets:
            args += [check.amount, check.limit, check.keep_s or 0]
        for rate in checks.rates:
            args += [rate.cost, repr(rate.ms_per_unit)]
        keys = [*self._keys(checks), f"{self.prefix}live:{rid}"]
        reply = await self._reserve(keys=keys, args=args)
        if int(reply[0]) == 0:
            return budget_refusal(checks.budgets[int(reply[1]) - 1], int(reply[2]), int(reply[3]))
        if int(reply[0]) == 1:
            return rate_refusal(checks.rates[int(reply[1]) - 1], float(reply[2]))
        expires = now + timedelta(seconds=self.hold_s)
        return held(rid, "redis", checks, worst_case_usd, tokens, expires)

    async def settle(
        self,
        reservation: Reservation,
        actual_usd: Decimal,
        actual_tokens: int,
        now: datetime | None = None,
    ) -> Settlement:
        now = now or self._clock()
        actual = actual_units(actual_usd, actual_tokens)
        reply = await self._finish(reservation, actual, actual_tokens, now)
        if int(reply[0]) == 0:
            return Settlement(False)
        crossed = tuple(
            soft_crossed(reservation.budgets[int(reply[at]) - 1], int(reply[at + 1]))
            for at in range(1, len(reply), 2)
        )
        return Settlement(True, crossed)

    async def release(self, reservation: Reservation, now: datetime | None = None) -> bool:
        reply = await self._finish(reservation, 0, 0, now or self._clock())
        return int(reply[0]) == 1

    async def renew(self, reservation: Reservation, now: datetime | None = None) -> bool:
        now_ms = epoch_ms(now or self._clock())
        budgets = Plan(reservation.budgets, ())
        keys = [f"{self.prefix}live:{reservation.id}", *self._keys(budgets)]
        args: list[str | int] = [reservation.id, now_ms, round(self.hold_s * 1000)]
        args.append(EXPIRED_KEEP_S * 1000)
        return int(await self._renew(keys=keys, args=args)) > 0

    async def usage(self, scope: Scope, period: Period, now: datetime) -> BudgetUsage:
        checks = plan([ScopeLimits(scope, (Budget(period, Decimal(0)),))], Decimal(0), 0, now)
        key = self.prefix + checks.budgets[0].name
        args = [epoch_ms(now), EXPIRED_KEEP_S * 1000]
        used, spent = await self._usage(keys=[key, f"{key}:holds"], args=args)
        return BudgetUsage(from_units(int(spent)), from_units(int(used) - int(spent)))

    async def add_spent(self, spent: Sequence[tuple[BudgetCheck, int]]) -> None:
        """Add spend counted elsewhere to each check's window (no hold, no soft-limit event)."""
        if spent:
            keys = [self.prefix + check.name for check, _ in spent]
            args = [value for check, units in spent for value in (units, check.keep_s or 0)]
            await self._add_spent(keys=keys, args=args)

    def health(self) -> StateHealth:
        return StateHealth("redis")

    async def aclose(self) -> None:
        if self._own_pool is not None:
            await self.client.aclose()
            await self._own_pool.aclose()

    async def _finish(
        self, reservation: Reservation, actual: int, actual_tokens: int, now: datetime
    ) -> list[bytes | int]:
        """Settle (actual > 0) or release (actual 0, nothing spent) in one script call."""
        checks = Plan(reservation.budgets, reservation.rates)
        move_rates = 1 if now < reservation.expires_at else 0
        args: list[str | int] = [reservation.id, epoch_ms(now), actual]
        args += [len(checks.budgets), len(checks.rates), move_rates]
        for check in checks.budgets:
            args += ["" if check.soft is None else check.soft, check.keep_s or 0]
        for rate in checks.rates:
            args += [rate_delta(rate, actual, actual_tokens), repr(rate.ms_per_unit)]
        keys = [f"{self.prefix}live:{reservation.id}", *self._keys(checks)]
        return list(await self._settle(keys=keys, args=args))

    def _keys(self, checks: Plan) -> list[str]:
        budget_keys = [
            key
            for check in checks.budgets
            for key in (self.prefix + check.name, f"{self.prefix}{check.name}:holds")
        ]
        return budget_keys + [self.prefix + rate.name for rate in checks.rates]
