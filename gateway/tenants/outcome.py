"""What the engine answers: a reservation to settle, or a refusal the API can render.

Refusal
├── BudgetExceeded     429 insufficient_quota   which budget, limit, spent, resets_at
├── RateLimited        429 rate_limit_exceeded  which limit, Retry-After
└── StateUnavailable   503 budget_state_unavailable  Redis away and the budget fails closed
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal

from gateway.pricing.money import money_str
from gateway.tenants.limits import Period, Scope
from gateway.tenants.plan import BudgetCheck, Dimension, RateCheck

PERIOD_WORDS = {"day": "a day (UTC)", "month": "a month (UTC)", "total": "in total"}
UNIT_WORDS = {"requests": "requests per min", "tokens": "tokens per min", "usd": "USD per min"}


@dataclass(frozen=True, slots=True)
class Reservation:
    """Money and tokens held for one request until it is settled or released."""

    id: str
    backend: Literal["memory", "redis"]
    budgets: tuple[BudgetCheck, ...]
    rates: tuple[RateCheck, ...]
    worst_case_usd: Decimal
    tokens: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    """The request's worst case does not fit in this budget: 429 insufficient_quota."""

    scope: Scope
    period: Period
    limit_usd: Decimal
    spent_usd: Decimal
    held_usd: Decimal  # reserved by requests still in flight
    requested_usd: Decimal
    resets_at: datetime | None
    status: int = 429
    error_type: str = "insufficient_quota"
    code: str = "insufficient_quota"

    @property
    def message(self) -> str:
        resets = (
            f"It resets at {self.resets_at:%Y-%m-%dT%H:%M:%SZ}."
            if self.resets_at
            else "It does not reset; ask an administrator to raise it."
        )
        return (
            f"Budget exceeded: {self.scope} may spend ${money_str(self.limit_usd)} "
            f"{PERIOD_WORDS[self.period]}; ${money_str(self.spent_usd)} is spent and "
            f"${money_str(self.held_usd)} held by requests in flight, and this request may "
            f"cost up to ${money_str(self.requested_usd)}. {resets}"
        )

    @property
    def headers(self) -> dict[str, str]:
        """`x-should-retry: false` when only the reset can make room (the SDKs obey it).

        While requests in flight hold part of the budget, a retry may fit once they
        settle below their worst case: the SDK's own retry is left to decide.
        """
        if self.spent_usd + self.requested_usd > self.limit_usd:
            return {"x-should-retry": "false"}
        return {}


@dataclass(frozen=True, slots=True)
class RateLimited:
    """Over a per-minute limit: 429 rate_limit_exceeded with Retry-After."""

    scope: Scope
    dimension: Dimension
    limit: Decimal
    requested: Decimal
    retry_after_s: float | None  # None: the request alone is over the whole minute's limit
    status: int = 429
    code: str = "rate_limit_exceeded"

    @property
    def error_type(self) -> str:
        return "tokens" if self.dimension == "tokens" else "requests"

    @property
    def message(self) -> str:
        head = (
            f"Rate limit reached for {self.scope} on {UNIT_WORDS[self.dimension]}: "
            f"limit {money_str(self.limit)}, requested {money_str(self.requested)}."
        )
        if self.retry_after_s is None:
            return f"{head} The request is larger than the whole limit; make it smaller."
        return f"{head} Please try again in {self.retry_after_s:.3g}s."

    @property
    def headers(self) -> dict[str, str]:
        wait = 60.0 if self.retry_after_s is None else self.retry_after_s
        return {"Retry-After": str(max(math.ceil(wait), 1))}


@dataclass(frozen=True, slots=True)
class StateUnavailable:
    """Redis cannot be reached and a budget that applies fails closed: 503."""

    scope: Scope
    period: str
    reason: str
    retry_after_s: float = 5.0
    status: int = 503
    error_type: str = "server_error"
    code: str = "budget_state_unavailable"

    @property
    def message(self) -> str:
        return (
            f"The budget of {self.scope} ({self.period}) cannot be checked: {self.reason}. "
            "It is set to fail closed (on_state_outage: fail_closed); try again shortly."
        )

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(math.ceil(self.retry_after_s), 1))}


Refusal = BudgetExceeded | RateLimited | StateUnavailable


@dataclass(frozen=True, slots=True)
class SoftLimitCrossed:
    """A settle took a budget's spend past its soft limit (once per window): alert on it."""

    scope: Scope
    period: Period
    window: str
    soft_usd: Decimal
    limit_usd: Decimal
    spent_usd: Decimal


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a settle did: `applied` is False for a repeat (nothing counted twice)."""

    applied: bool
    soft_limits_crossed: tuple[SoftLimitCrossed, ...] = ()
