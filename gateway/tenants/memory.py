"""The engine in one process: the embedded default, and the fallback while Redis is away.

Same semantics as `RedisLimiter` step for step (the same tests run against both; see
gateway/tenants/scripts.py for the design): a hold past its deadline is given back when
its window is next touched and leaves a marker, so that a late settle still counts once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.ledger.records import utcnow
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
from gateway.tenants.outcome import Refusal, Reservation, Settlement, SoftLimitCrossed
from gateway.tenants.plan import BudgetCheck, gcra, plan

PRUNE_EVERY = 1024  # reserves between sweeps for windows and markers past their time


@dataclass
class _Bucket:
    used: int = 0  # spent + held
    spent: int = 0
    holds: dict[str, tuple[int, int]] = field(default_factory=dict)  # id: (units, deadline)
    expired: dict[str, int] = field(default_factory=dict)  # id: kept until (ms)
    keep_until_ms: int | None = None


class MemoryLimiter:
    """Budgets and rate limits of this process only."""

    def __init__(self, hold_s: float = DEFAULT_HOLD_S, clock: Callable[[], datetime] = utcnow):
        self.hold_s = hold_s
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._tats: dict[str, float] = {}
        self._live: dict[str, int] = {}  # reservations with no budget: id: deadline (ms)
        self._reserves = 0

    async def reserve(
        self,
        scopes: Sequence[ScopeLimits],
        worst_case_usd: Decimal,
        tokens: int,
        now: datetime | None = None,
    ) -> Reservation | Refusal:
        now = now or self._clock()
        now_ms = epoch_ms(now)
        checks = plan(scopes, worst_case_usd, tokens, now)
        self._prune(now_ms)
        buckets = [self._bucket(check, now_ms) for check in checks.budgets]
        for check, bucket in zip(checks.budgets, buckets, strict=True):
            if bucket.used + check.amount > check.limit:
                return budget_refusal(check, bucket.used, bucket.spent)
        tats = []
        for rate in checks.rates:
            tat, over = gcra(self._tats.get(rate.name, 0.0), now_ms, rate.cost, rate.ms_per_unit)
            if over > 0:
                return rate_refusal(rate, over)
            tats.append(tat)
        rid = uuid.uuid4().hex
        deadline = now_ms + round(self.hold_s * 1000)
        for check, bucket in zip(checks.budgets, buckets, strict=True):
            bucket.used += check.amount
            bucket.holds[rid] = (check.amount, deadline)
        self._tats.update((rate.name, tat) for rate, tat in zip(checks.rates, tats, strict=True))
        if not checks.budgets:
            self._live[rid] = deadline
        expires = now + timedelta(seconds=self.hold_s)
        return held(rid, "memory", checks, worst_case_usd, tokens, expires)

    async def settle(
        self,
        reservation: Reservation,
        actual_usd: Decimal,
        actual_tokens: int,
        now: datetime | None = None,
    ) -> Settlement:
        now = now or self._clock()
        actual = actual_units(actual_usd, actual_tokens)
        found, first = self._unhold(reservation, epoch_ms(now))
        crossed: list[SoftLimitCrossed] = []
        for check, bucket in found:
            before = bucket.spent
            bucket.used += actual
            bucket.spent += actual
            if check.soft is not None and before < check.soft <= bucket.spent:
                crossed.append(soft_crossed(check, bucket.spent))
        if first and now < reservation.expires_at:
            for rate in reservation.rates:
                delta = rate_delta(rate, actual, actual_tokens)
                self._move_tat(rate.name, delta * rate.ms_per_unit)
        return Settlement(bool(found) or first, tuple(crossed))

    async def release(self, reservation: Reservation, now: datetime | None = None) -> bool:
        now = now or self._clock()
        found, first = self._unhold(reservation, epoch_ms(now))
        if first and now < reservation.expires_at:
            for rate in reservation.rates:
                self._move_tat(rate.name, rate_delta(rate, 0, 0) * rate.ms_per_unit)
        return bool(found) or first

    async def renew(self, reservation: Reservation, now: datetime | None = None) -> bool:
        now_ms = epoch_ms(now or self._clock())
        deadline = now_ms + round(self.hold_s * 1000)
        found = False
        for check in reservation.budgets:
            bucket = self._buckets.get(check.name)
            if bucket is None:
                continue
            self._sweep(bucket, now_ms)  # a hold past its deadline is gone, not renewed
            hold = bucket.holds.get(reservation.id)
            if hold is not None:
                bucket.holds[reservation.id] = (hold[0], deadline)
                found = True
        if not reservation.budgets and self._live.get(reservation.id, 0) > now_ms:
            self._live[reservation.id] = deadline
            found = True
        return found

    async def usage(self, scope: Scope, period: Period, now: datetime) -> BudgetUsage:
        checks = plan([ScopeLimits(scope, (Budget(period, Decimal(0)),))], Decimal(0), 0, now)
        bucket = self._buckets.get(checks.budgets[0].name)
        if bucket is None:
            return BudgetUsage(from_units(0), from_units(0))
        self._sweep(bucket, epoch_ms(now))
        return BudgetUsage(from_units(bucket.spent), from_units(bucket.used - bucket.spent))

    def health(self) -> StateHealth:
        return StateHealth("memory")

    async def aclose(self) -> None:
        self._buckets.clear()
        self._tats.clear()
        self._live.clear()

    def _unhold(
        self, reservation: Reservation, now_ms: int
    ) -> tuple[list[tuple[BudgetCheck, _Bucket]], bool]:
        """Take the reservation's holds (or expiry markers) away: the windows that still
        had one, and whether this is the first settle or release while it was held."""
        found: list[tuple[BudgetCheck, _Bucket]] = []
        first = False
        for index, check in enumerate(reservation.budgets):
            bucket = self._buckets.setdefault(check.name, _Bucket())
            hold = bucket.holds.pop(reservation.id, None)
            if hold is not None:
                bucket.used -= hold[0]
                first = first or index == 0
            elif bucket.expired.pop(reservation.id, None) is None:
                continue  # settled or released already
            found.append((check, bucket))
        if not reservation.budgets:
            first = self._live.pop(reservation.id, 0) > now_ms
        return found, first

    def _bucket(self, check: BudgetCheck, now_ms: int) -> _Bucket:
        """The window's counters, kept `keep_s` from now, with expired holds given back."""
        bucket = self._buckets.setdefault(check.name, _Bucket())
        if check.keep_s is not None:
            bucket.keep_until_ms = now_ms + check.keep_s * 1000
        self._sweep(bucket, now_ms)
        return bucket

    @staticmethod
    def _sweep(bucket: _Bucket, now_ms: int) -> None:
        for rid, until in list(bucket.expired.items()):
            if until <= now_ms:
                del bucket.expired[rid]
        for rid, (units, deadline) in list(bucket.holds.items()):
            if deadline <= now_ms:
                bucket.used -= units
                del bucket.holds[rid]
                bucket.expired[rid] = now_ms + EXPIRED_KEEP_S * 1000

    def _move_tat(self, name: str, delta_ms: float) -> None:
        if delta_ms and name in self._tats:
            self._tats[name] += delta_ms

    def _prune(self, now_ms: int) -> None:
        """Now and then forget windows, rates and markers past their time (bounded memory)."""
        self._reserves += 1
        if self._reserves % PRUNE_EVERY:
            return
        for name, bucket in list(self._buckets.items()):
            if bucket.keep_until_ms is not None and bucket.keep_until_ms <= now_ms:
                del self._buckets[name]
        self._tats = {name: tat for name, tat in self._tats.items() if tat > now_ms}
        self._live = {rid: until for rid, until in self._live.items() if until > now_ms}


def epoch_ms(now: datetime) -> int:
    """Whole milliseconds since the epoch: what both engines compare deadlines in."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (use datetime.now(UTC))")
    return int(now.astimezone(UTC).timestamp() * 1000)
