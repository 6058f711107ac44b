"""The interface of the budget and rate-limit engine, and the refusals every engine builds.

A request's life: `reserve` its worst case before the call, then `settle` it to the real
cost after, or `release` it when nothing was billed. A hold lives `hold_s` unless the
request path `renew`s it (a long stream does, every `hold_s / 3`), so a reservation never
settled because its process died is released by the engine once `hold_s` has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Literal, NamedTuple, Protocol

from gateway.ledger.records import MONEY_LIMIT
from gateway.state.base import StateHealth, from_units, to_units
from gateway.tenants.limits import Period, Scope, ScopeLimits
from gateway.tenants.outcome import (
    BudgetExceeded,
    RateLimited,
    Refusal,
    Reservation,
    Settlement,
    SoftLimitCrossed,
)
from gateway.tenants.plan import WINDOW_MS, BudgetCheck, Plan, RateCheck

DEFAULT_HOLD_S = 900.0  # longer than any request may take (streams included)
EXPIRED_KEEP_S = 86_400  # a settle up to a day after its hold expired still counts


class BudgetUsage(NamedTuple):
    """A budget window's settled spend and what requests in flight hold against it."""

    spent_usd: Decimal
    held_usd: Decimal


class Limiter(Protocol):
    """Budgets and rate limits of scopes, checked and held all-or-nothing."""

    @property
    def hold_s(self) -> float:
        """How long a hold lives unless it is renewed, settled or released."""
        ...

    async def reserve(
        self,
        scopes: Sequence[ScopeLimits],
        worst_case_usd: Decimal,
        tokens: int,
        now: datetime | None = None,
    ) -> Reservation | Refusal:
        """Hold the worst case against every budget and rate limit, or refuse with the first."""
        ...

    async def settle(
        self,
        reservation: Reservation,
        actual_usd: Decimal,
        actual_tokens: int,
        now: datetime | None = None,
    ) -> Settlement:
        """Replace the hold with the real cost; a repeat does nothing."""
        ...

    async def release(self, reservation: Reservation, now: datetime | None = None) -> bool:
        """Give the hold back (the call failed, nothing was billed); False for a repeat."""
        ...

    async def renew(self, reservation: Reservation, now: datetime | None = None) -> bool:
        """Move the holds' deadline to `hold_s` from now; False when none was left (the
        reservation was settled, released or expired: nothing is held again)."""
        ...

    async def usage(self, scope: Scope, period: Period, now: datetime) -> BudgetUsage:
        """What the window of `period` at `now` has spent and holds, for reports and tests."""
        ...

    def health(self) -> StateHealth:
        """Where the counters live now, for /readyz: `degraded` means per-process only."""
        ...

    async def aclose(self) -> None: ...


def held(
    rid: str,
    backend: Literal["memory", "redis"],
    checks: Plan,
    worst_case_usd: Decimal,
    tokens: int,
    expires_at: datetime,
) -> Reservation:
    """The reservation an engine hands back once every check has its hold."""
    return Reservation(
        rid, backend, checks.budgets, checks.rates, worst_case_usd, tokens, expires_at
    )


def actual_units(actual_usd: Decimal, actual_tokens: int) -> int:
    """The settled cost in units, refusing what no call can cost."""
    if not isinstance(actual_usd, Decimal) or not 0 <= actual_usd < MONEY_LIMIT:
        raise ValueError(f"actual_usd must be a Decimal from 0 to under {MONEY_LIMIT}")
    if actual_tokens < 0:
        raise ValueError("actual_tokens must not be negative")
    return to_units(actual_usd)


def budget_refusal(check: BudgetCheck, used: int, spent: int) -> BudgetExceeded:
    """The 429 for a budget whose `used` (spent + held) leaves no room for the request."""
    return BudgetExceeded(
        check.scope,
        check.budget.period,
        check.budget.limit_usd,
        from_units(spent),
        from_units(used - spent),
        from_units(check.amount),
        check.window.resets_at,
    )


def rate_refusal(check: RateCheck, over_ms: float) -> RateLimited:
    """The 429 for a rate limit the request would pass by `over_ms` of window."""
    amount: Callable[[int], Decimal] = from_units if check.dimension == "usd" else Decimal
    never = check.cost * check.ms_per_unit > WINDOW_MS  # more than the whole minute allows
    retry = None if never else max(over_ms, 0.0) / 1000
    return RateLimited(check.scope, check.dimension, amount(check.limit), amount(check.cost), retry)


def soft_crossed(check: BudgetCheck, spent: int) -> SoftLimitCrossed:
    return SoftLimitCrossed(
        check.scope,
        check.budget.period,
        check.window.name,
        from_units(check.soft or 0),
        check.budget.limit_usd,
        from_units(spent),
    )


def rate_delta(check: RateCheck, actual: int, actual_tokens: int) -> int:
    """What the request used less (negative) or more than it reserved, in the check's units."""
    if check.dimension == "tokens":
        return actual_tokens - check.cost
    if check.dimension == "usd":
        return actual - check.cost
    return 0
