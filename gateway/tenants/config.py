"""Budgets and rate limits as the YAML configuration and a key's attributes write them.

Teams and projects take theirs from the configuration (`tenants:`), a key from its record
(`budget`, `rate_limit`); both use the same models, `KeyBudget` and `KeyRateLimit`, so a
team's budget reads like a key's. `scope_limits` turns either into the engine's values.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.keys.model import KeyBudget, KeyRateLimit
from gateway.tenants.limits import Budget, Period, RateLimit, Scope, ScopeLimits


class ScopeQuota(BaseModel):
    """One team's or project's budget and rate limit (each optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget: KeyBudget | None = None
    rate_limit: KeyRateLimit | None = None


class TenantLimits(BaseModel):
    """The `tenants:` section: budgets and rate limits per team and per project."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: dict[str, ScopeQuota] = Field(default_factory=dict)
    projects: dict[str, ScopeQuota] = Field(default_factory=dict)


PERIOD_FIELDS: tuple[tuple[Period, str], ...] = (
    ("day", "daily_usd"),
    ("month", "monthly_usd"),
    ("total", "total_usd"),
)


def budgets_of(budget: KeyBudget | None) -> tuple[Budget, ...]:
    """The engine's budgets for the periods `budget` sets."""
    if budget is None:
        return ()
    found = []
    for period, name in PERIOD_FIELDS:
        limit = getattr(budget, name)
        if limit is not None:
            found.append(Budget(period, limit, budget.soft_ratio, budget.on_state_outage))
    return tuple(found)


def rate_of(rate: KeyRateLimit | None) -> RateLimit | None:
    """The engine's rate limit, or None when nothing is limited."""
    if rate is None:
        return None
    limits = (rate.requests_per_min, rate.tokens_per_min, rate.usd_per_min)
    if all(limit is None for limit in limits):
        return None
    return RateLimit(*limits, on_state_outage=rate.on_state_outage)


def scope_limits(
    scope: Scope, budget: KeyBudget | None, rate: KeyRateLimit | None
) -> ScopeLimits | None:
    """What the engine checks for `scope`, or None when it has no limit at all."""
    budgets, limit = budgets_of(budget), rate_of(rate)
    if not budgets and limit is None:
        return None
    return ScopeLimits(scope, budgets, limit)
