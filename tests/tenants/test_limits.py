"""The pure parts: UTC windows, the checks a reservation makes, and what is refused as input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from gateway.tenants import Budget, Limiter, RateLimit, Reservation, Scope, ScopeLimits
from gateway.tenants.periods import window
from gateway.tenants.plan import plan

TEAM = ScopeLimits(Scope("team", "acme"), (Budget("day", Decimal(1)),))
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "now", "name", "resets_at"),
    [
        (
            "day",
            datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
            "day:2026-11-30",
            datetime(2026, 12, 1, tzinfo=UTC),
        ),
        (
            "day",
            datetime(2026, 12, 31, 12, tzinfo=UTC),
            "day:2026-12-31",
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
        (
            "month",
            datetime(2026, 12, 31, 23, 59, tzinfo=UTC),
            "month:2026-12",
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
        (
            "month",
            datetime(2028, 2, 29, tzinfo=UTC),
            "month:2028-02",
            datetime(2028, 3, 1, tzinfo=UTC),
        ),
        ("total", NOW, "total", None),
        # 01:30 in UTC+2 is the day before in UTC: windows follow UTC, whatever zone `now` has.
        (
            "day",
            datetime(2026, 12, 1, 1, 30, tzinfo=timezone(timedelta(hours=2))),
            "day:2026-11-30",
            datetime(2026, 12, 1, tzinfo=UTC),
        ),
    ],
)
def test_windows_follow_utc_calendar_boundaries(
    period: str, now: datetime, name: str, resets_at: datetime | None
) -> None:
    current = window(period, now)  # type: ignore[arg-type]
    assert (current.name, current.resets_at) == (name, resets_at)


def test_a_scope_id_cannot_pose_as_another_scopes_counter() -> None:
    tricky = ScopeLimits(Scope("key", "a:day:2026-11-30"), (Budget("day", Decimal(1)),))
    plain = ScopeLimits(Scope("key", "a"), (Budget("day", Decimal(1)),))
    names = {
        check.name
        for limits in (tricky, plain)
        for check in plan([limits], Decimal(0), 0, NOW).budgets
    }
    assert names == {
        "budget:key:a%3Aday%3A2026-11-30:day:2026-11-30",
        "budget:key:a:day:2026-11-30",
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Budget("day", Decimal(-1)), "non-negative Decimal"),
        (lambda: Budget("day", 5), "non-negative Decimal"),  # type: ignore[arg-type]
        (lambda: Budget("day", Decimal(5), soft_ratio=Decimal("1.2")), "soft_ratio 1.2"),
        (lambda: RateLimit(tokens_per_min=0), "tokens_per_min must be positive"),
        (
            lambda: ScopeLimits(
                Scope("team", "t"), (Budget("day", Decimal(1)), Budget("day", Decimal(2)))
            ),
            "two budgets for one period",
        ),
        (lambda: plan([TEAM, TEAM], Decimal(1), 0, NOW), "a scope is given twice"),
        (lambda: plan([TEAM], Decimal(-1), 0, NOW), "worst_case_usd must be a Decimal"),
        (lambda: plan([TEAM], 0.5, 0, NOW), "worst_case_usd must be a Decimal"),  # type: ignore[arg-type]
        (lambda: plan([TEAM], Decimal(1), -1, NOW), "tokens must not be negative"),
        (lambda: plan([TEAM], Decimal(1), 0, datetime(2026, 11, 30)), "timezone-aware"),
    ],
)
def test_limits_and_requests_no_engine_could_count_are_refused(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


async def test_a_settle_of_a_negative_or_float_cost_is_refused(limiter: Limiter) -> None:
    reservation = await limiter.reserve([TEAM], Decimal("0.5"), 0, NOW)
    assert isinstance(reservation, Reservation)
    with pytest.raises(ValueError, match="actual_usd must be a Decimal"):
        await limiter.settle(reservation, Decimal("-0.1"), 0, NOW)
    with pytest.raises(ValueError, match="actual_usd must be a Decimal"):
        await limiter.settle(reservation, 0.1, 0, NOW)  # type: ignore[arg-type]
    assert (await limiter.settle(reservation, Decimal("0.1"), 0, NOW)).applied


async def test_open_limiter_is_in_process_without_redis_and_shared_with_it() -> None:
    from gateway.tenants import MemoryLimiter, open_limiter
    from gateway.tenants.fallback import FallbackLimiter

    embedded = open_limiter(None)
    assert isinstance(embedded, MemoryLimiter)
    shared = open_limiter("redis://127.0.0.1:6379/0", namespace="unused")  # connects lazily
    assert isinstance(shared, FallbackLimiter) and not shared.degraded
    await shared.aclose()
    await embedded.aclose()
