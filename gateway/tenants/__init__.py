"""Budgets and rate limits per virtual key, team and project (the engine; see docs/budgets.md).

The request path (`gateway.pipeline.quota`) reserves before the upstream call and
settles after it. `open_limiter` picks the engine the way `gateway.state.open_state` does.
"""

from __future__ import annotations

from gateway.settings import RedisLimits
from gateway.tenants.base import DEFAULT_HOLD_S, BudgetUsage, Limiter
from gateway.tenants.limits import Budget, RateLimit, Scope, ScopeLimits
from gateway.tenants.memory import MemoryLimiter
from gateway.tenants.outcome import (
    BudgetExceeded,
    RateLimited,
    Refusal,
    Reservation,
    Settlement,
    SoftLimitCrossed,
    StateUnavailable,
)

__all__ = [
    "Budget",
    "BudgetExceeded",
    "BudgetUsage",
    "Limiter",
    "MemoryLimiter",
    "RateLimit",
    "RateLimited",
    "Refusal",
    "Reservation",
    "Scope",
    "ScopeLimits",
    "Settlement",
    "SoftLimitCrossed",
    "StateUnavailable",
    "open_limiter",
]


def open_limiter(
    redis_url: str | None,
    namespace: str = "farebox",
    limits: RedisLimits | None = None,
    hold_s: float = DEFAULT_HOLD_S,
) -> Limiter:
    """Redis (with the outage policies) when a URL is given, else this process alone."""
    if not redis_url:
        return MemoryLimiter(hold_s)
    from gateway.tenants.fallback import FallbackLimiter
    from gateway.tenants.redis import RedisLimiter

    redis = RedisLimiter.from_url(redis_url, namespace, limits, hold_s)
    return FallbackLimiter(redis, limits)
