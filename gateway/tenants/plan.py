"""A reservation's checks, worked out once from the limits so that every engine agrees.

Money is in integer units of 1e-10 USD (the ledger's precision), so that Redis adds it
exactly with HINCRBY. Rate limits are GCRA (the generic cell rate algorithm): each limit
keeps one number, its theoretical arrival time (TAT). A request of cost c moves it to
max(TAT, now) + c·(60 s / limit) and fits while that lies at most 60 s ahead of now.
Chosen over a sliding window because it is exact (no estimate between two fixed windows),
keeps one key per limit instead of a log of every request, takes weighted costs (tokens,
dollars) and a correction after the call (settle moves the TAT back by what was not used),
and answers Retry-After exactly: the time until the TAT is 60 s ahead again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Literal
from urllib.parse import quote

from gateway.ledger.records import MONEY_LIMIT
from gateway.state.base import to_units
from gateway.tenants.limits import Budget, Period, RateLimit, Scope, ScopeLimits
from gateway.tenants.periods import Window, keep_for_s, window

Dimension = Literal["requests", "tokens", "usd"]
WINDOW_MS = 60_000.0
PERIODS: tuple[Period, ...] = ("day", "month", "total")


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """One budget of one scope in the window `now` falls in, and what to hold against it."""

    scope: Scope
    budget: Budget
    window: Window
    name: str  # the counter's name, unique per scope and window
    limit: int
    soft: int | None
    amount: int
    keep_s: int | None


@dataclass(frozen=True, slots=True)
class RateCheck:
    """One rate limit of one scope: its limit per minute and this request's cost."""

    scope: Scope
    dimension: Dimension
    rate: RateLimit
    name: str
    limit: int
    cost: int

    @property
    def ms_per_unit(self) -> float:
        return WINDOW_MS / self.limit


@dataclass(frozen=True, slots=True)
class Plan:
    budgets: tuple[BudgetCheck, ...]
    rates: tuple[RateCheck, ...]


def plan(
    scopes: Sequence[ScopeLimits], worst_case_usd: Decimal, tokens: int, now: datetime
) -> Plan:
    """The checks a reservation of `worst_case_usd` and `tokens` makes at `now`."""
    if not isinstance(worst_case_usd, Decimal) or not 0 <= worst_case_usd < MONEY_LIMIT:
        raise ValueError(f"worst_case_usd must be a Decimal from 0 to under {MONEY_LIMIT}")
    if tokens < 0:
        raise ValueError("tokens must not be negative")
    named = [limits.scope for limits in scopes]
    if len(set(named)) != len(named):
        raise ValueError(f"a scope is given twice: {named}")
    amount = to_units(worst_case_usd)
    windows = {period: window(period, now) for period in PERIODS}
    keep = {period: keep_for_s(windows[period].resets_at, now) for period in PERIODS}
    budgets = tuple(
        BudgetCheck(
            limits.scope,
            budget,
            windows[budget.period],
            f"{prefix}:{windows[budget.period].name}",
            limit,
            soft,
            amount,
            keep[budget.period],
        )
        for limits in scopes
        for budget in limits.budgets
        for prefix, limit, soft in (_budget_constants(limits.scope, budget),)
    )
    rates = tuple(
        RateCheck(limits.scope, dimension, limits.rate, name, limit, cost)
        for limits in scopes
        if limits.rate is not None
        for dimension, name, limit in _rate_constants(limits.scope, limits.rate)
        for cost in ({"requests": 1, "tokens": tokens, "usd": amount}[dimension],)
    )
    return Plan(budgets, rates)


# What depends on the limits alone is worked out once per limit (a hot path, ~2 µs each).
@lru_cache(maxsize=65_536)
def _budget_constants(scope: Scope, budget: Budget) -> tuple[str, int, int | None]:
    """The counter's name before its window, the limit and soft limit in units."""
    soft = to_units(budget.limit_usd * budget.soft_ratio) if budget.soft_ratio else None
    return f"budget:{scope_name(scope)}", to_units(budget.limit_usd), soft


@lru_cache(maxsize=65_536)
def _rate_constants(scope: Scope, rate: RateLimit) -> tuple[tuple[Dimension, str, int], ...]:
    """Each limited dimension with its counter's name and its limit in units."""
    limits: list[tuple[Dimension, int | None]] = [
        ("requests", rate.requests_per_min),
        ("tokens", rate.tokens_per_min),
        ("usd", to_units(rate.usd_per_min) if rate.usd_per_min else None),
    ]
    return tuple(
        (dimension, f"rate:{scope_name(scope)}:{dimension}", limit)
        for dimension, limit in limits
        if limit is not None
    )


def scope_name(scope: Scope) -> str:
    """`kind:id` with the id quoted, so that no id can pose as another scope's counter."""
    return f"{scope.kind}:{quote(scope.id, safe='')}"


def gcra(tat_ms: float, now_ms: float, cost: int, ms_per_unit: float) -> tuple[float, float]:
    """The TAT after taking `cost` at `now_ms`, and how far past the window it would lie."""
    new_tat = max(tat_ms, now_ms) + cost * ms_per_unit
    return new_tat, new_tat - now_ms - WINDOW_MS
