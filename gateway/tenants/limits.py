"""What a scope may spend and how fast: plain values, built from keys and configuration."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

ScopeKind = Literal["key", "team", "project"]
Period = Literal["day", "month", "total"]
# What a budget does while Redis cannot be reached (see docs/budgets.md):
# fail_closed refuses the request (503), fail_open counts it in this process only.
OutagePolicy = Literal["fail_closed", "fail_open"]
DEFAULT_SOFT_RATIO = Decimal("0.8")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a limit belongs to: a virtual key, a team or a project."""

    kind: ScopeKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind} '{self.id}'"


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `limit_usd` per UTC day, UTC month or in total; an alert at `soft_ratio`."""

    period: Period
    limit_usd: Decimal
    soft_ratio: Decimal | None = DEFAULT_SOFT_RATIO
    on_state_outage: OutagePolicy = "fail_closed"

    def __post_init__(self) -> None:
        if not isinstance(self.limit_usd, Decimal) or self.limit_usd < 0:
            raise ValueError(f"a {self.period} budget must be a non-negative Decimal amount")
        if self.soft_ratio is not None and not Decimal(0) < self.soft_ratio < Decimal(1):
            raise ValueError(f"soft_ratio {self.soft_ratio} must lie between 0 and 1")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most so many requests, tokens and dollars in any 60 seconds (None: no limit)."""

    requests_per_min: int | None = None
    tokens_per_min: int | None = None
    usd_per_min: Decimal | None = None
    on_state_outage: OutagePolicy = "fail_open"

    def __post_init__(self) -> None:
        for name in ("requests_per_min", "tokens_per_min", "usd_per_min"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive (leave it out for no limit)")


@dataclass(frozen=True, slots=True)
class ScopeLimits:
    """One scope's budgets and rate limit, as a request's key, team and project bring them."""

    scope: Scope
    budgets: tuple[Budget, ...] = ()
    rate: RateLimit | None = None

    def __post_init__(self) -> None:
        periods = tuple(budget.period for budget in self.budgets)
        if len(set(periods)) != len(periods):
            raise ValueError(f"{self.scope} has two budgets for one period: {periods}")
