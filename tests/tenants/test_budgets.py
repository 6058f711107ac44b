"""Budgets, in process and on the real Redis: hold the worst case, settle the real cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.tenants import (
    Budget,
    BudgetExceeded,
    Limiter,
    Reservation,
    Scope,
    ScopeLimits,
)
from tests.tenants.conftest import HOLD_S

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEY = Scope("key", "fbx-abc")
TEAM = Scope("team", "acme")


def daily(scope: Scope, limit: str, soft: str | None = None) -> ScopeLimits:
    ratio = Decimal(soft) if soft else None
    return ScopeLimits(scope, (Budget("day", Decimal(limit), soft_ratio=ratio),))


async def held(
    limiter: Limiter, scopes: list[ScopeLimits], usd: str, now: datetime = NOW
) -> Reservation:
    result = await limiter.reserve(scopes, Decimal(usd), 0, now)
    assert isinstance(result, Reservation), result
    return result


async def refused(
    limiter: Limiter, scopes: list[ScopeLimits], usd: str, now: datetime = NOW
) -> BudgetExceeded:
    result = await limiter.reserve(scopes, Decimal(usd), 0, now)
    assert isinstance(result, BudgetExceeded), result
    return result


async def test_a_worst_case_that_fits_is_held_and_one_that_does_not_is_refused(
    limiter: Limiter,
) -> None:
    team = [daily(TEAM, "1")]
    await held(limiter, team, "0.6")
    assert await limiter.usage(TEAM, "day", NOW) == (Decimal("0"), Decimal("0.6"))
    refusal = await refused(limiter, team, "0.5")
    assert (refusal.status, refusal.code, refusal.error_type) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    assert refusal.scope == TEAM and refusal.period == "day"
    assert (refusal.limit_usd, refusal.spent_usd, refusal.held_usd) == (1, 0, Decimal("0.6"))
    assert refusal.requested_usd == Decimal("0.5")
    assert refusal.resets_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert refusal.message == (
        "Budget exceeded: team 'acme' may spend $1 a day (UTC); $0 is spent and $0.6 held by "
        "requests in flight, and this request may cost up to $0.5. "
        "It resets at 2026-12-01T00:00:00Z."
    )
    await held(limiter, team, "0.4")  # exactly to the limit still fits


async def test_one_budget_that_refuses_holds_nothing_anywhere(limiter: Limiter) -> None:
    scopes = [daily(KEY, "5"), daily(TEAM, "1")]
    await held(limiter, [daily(TEAM, "1")], "0.9")
    refusal = await refused(limiter, scopes, "0.2")
    assert refusal.scope == TEAM
    assert await limiter.usage(KEY, "day", NOW) == (0, 0)
    assert await limiter.usage(TEAM, "day", NOW) == (0, Decimal("0.9"))


async def test_settle_replaces_the_hold_with_the_real_cost_less_or_more(
    limiter: Limiter,
) -> None:
    team = [daily(TEAM, "1")]
    settlement = await limiter.settle(await held(limiter, team, "0.6"), Decimal("0.2"), 0, NOW)
    assert settlement.applied and settlement.soft_limits_crossed == ()
    assert await limiter.usage(TEAM, "day", NOW) == (Decimal("0.2"), 0)
    await limiter.settle(await held(limiter, team, "0.3"), Decimal("0.5"), 0, NOW)  # past it
    assert await limiter.usage(TEAM, "day", NOW) == (Decimal("0.7"), 0)
    assert (await refused(limiter, team, "0.31")).spent_usd == Decimal("0.7")
    await held(limiter, team, "0.3")


async def test_windows_roll_over_at_utc_midnight_and_month_start(limiter: Limiter) -> None:
    budgets = (Budget("day", Decimal("1")), Budget("month", Decimal("1.5")))
    team = [ScopeLimits(TEAM, budgets)]
    nov_29 = datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC)
    await limiter.settle(await held(limiter, team, "1", nov_29), Decimal("1"), 0, nov_29)
    assert (await refused(limiter, team, "0.01", nov_29)).period == "day"
    nov_30 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
    month = await refused(limiter, team, "0.6", nov_30)
    assert (month.period, month.spent_usd) == ("month", Decimal("1"))
    assert month.resets_at == datetime(2026, 12, 1, tzinfo=UTC)
    await held(limiter, team, "0.5", nov_30)
    await held(limiter, team, "1", datetime(2026, 12, 1, tzinfo=UTC))
    assert await limiter.usage(TEAM, "month", nov_30) == (1, Decimal("0.5"))


async def test_a_lifetime_budget_never_resets(limiter: Limiter) -> None:
    team = [ScopeLimits(TEAM, (Budget("total", Decimal("2")),))]
    await limiter.settle(await held(limiter, team, "2"), Decimal("2"), 0, NOW)
    refusal = await refused(limiter, team, "0.01", NOW + timedelta(days=400))
    assert refusal.resets_at is None and refusal.period == "total"
    assert refusal.message.endswith("It does not reset; ask an administrator to raise it.")


async def test_a_late_settle_counts_in_the_window_of_its_reservation(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    before_midnight = datetime(2026, 11, 30, 23, 59, tzinfo=UTC)
    reservation = await held(limiter, team, "0.8", before_midnight)
    after_midnight = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    await limiter.settle(reservation, Decimal("0.7"), 0, after_midnight)
    assert await limiter.usage(TEAM, "day", before_midnight) == (Decimal("0.7"), 0)
    assert await limiter.usage(TEAM, "day", after_midnight) == (0, 0)


async def test_settle_and_release_count_once(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    reservation = await held(limiter, team, "0.5")
    assert (await limiter.settle(reservation, Decimal("0.4"), 0, NOW)).applied
    assert not (await limiter.settle(reservation, Decimal("0.4"), 0, NOW)).applied
    assert not await limiter.release(reservation, NOW)
    assert await limiter.usage(TEAM, "day", NOW) == (Decimal("0.4"), 0)
    released = await held(limiter, team, "0.5")
    assert await limiter.release(released, NOW)
    assert not (await limiter.settle(released, Decimal("0.5"), 0, NOW)).applied
    assert await limiter.usage(TEAM, "day", NOW) == (Decimal("0.4"), 0)


async def test_a_hold_never_settled_is_given_back_after_its_ttl(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    await held(limiter, team, "0.9")  # the process holding it dies
    almost = NOW + timedelta(seconds=HOLD_S - 1)
    assert (await refused(limiter, team, "0.2", almost)).held_usd == Decimal("0.9")
    expired = NOW + timedelta(seconds=HOLD_S)
    await held(limiter, team, "0.2", expired)
    assert await limiter.usage(TEAM, "day", expired) == (0, Decimal("0.2"))


async def test_a_settle_after_the_hold_expired_still_counts_the_cost(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    slow = await held(limiter, team, "0.5")
    later = NOW + timedelta(seconds=HOLD_S * 2)
    await held(limiter, team, "0.1", later)  # touches the budget: the old hold is gone
    assert (await limiter.settle(slow, Decimal("0.45"), 0, later)).applied
    assert await limiter.usage(TEAM, "day", later) == (Decimal("0.45"), Decimal("0.1"))
    assert not (await limiter.settle(slow, Decimal("0.45"), 0, later)).applied  # once
    assert not await limiter.release(slow, later)
    assert await limiter.usage(TEAM, "day", later) == (Decimal("0.45"), Decimal("0.1"))


async def test_an_expired_hold_released_late_gives_nothing_back_twice(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    failed = await held(limiter, team, "0.5")
    later = NOW + timedelta(seconds=HOLD_S * 2)
    assert await limiter.usage(TEAM, "day", later) == (0, 0)  # given back at its deadline
    assert await limiter.release(failed, later)
    assert not await limiter.release(failed, later)
    assert await limiter.usage(TEAM, "day", later) == (0, 0)


async def test_a_settle_more_than_a_day_after_the_hold_expired_is_dropped(
    limiter: Limiter,
) -> None:
    team = [ScopeLimits(TEAM, (Budget("total", Decimal(1)),))]  # one window throughout
    lost = await held(limiter, team, "0.5")
    swept = NOW + timedelta(seconds=HOLD_S)
    await limiter.usage(TEAM, "total", swept)  # touched at the deadline: the marker is left
    much_later = swept + timedelta(days=1)
    await limiter.usage(TEAM, "total", much_later)  # touched a day later: the marker is gone
    assert not (await limiter.settle(lost, Decimal("0.5"), 0, much_later)).applied
    assert await limiter.usage(TEAM, "total", much_later) == (0, 0)


async def test_crossing_the_soft_limit_is_reported_once(limiter: Limiter) -> None:
    team = [daily(TEAM, "1", soft="0.8")]
    first = await limiter.settle(await held(limiter, team, "0.5"), Decimal("0.5"), 0, NOW)
    assert first.soft_limits_crossed == ()
    crossing = await limiter.settle(await held(limiter, team, "0.4"), Decimal("0.35"), 0, NOW)
    (event,) = crossing.soft_limits_crossed
    assert (event.scope, event.period, event.window) == (TEAM, "day", "day:2026-11-30")
    assert (event.soft_usd, event.limit_usd, event.spent_usd) == (
        Decimal("0.8"),
        1,
        Decimal("0.85"),
    )
    after = await limiter.settle(await held(limiter, team, "0.1"), Decimal("0.1"), 0, NOW)
    assert after.soft_limits_crossed == ()


async def test_money_is_exact_past_what_a_double_holds(limiter: Limiter) -> None:
    # 2,000,000 USD is 2e16 units of 1e-10: past 2^53, where a Lua number would round.
    team = [daily(TEAM, "2000000")]
    await held(limiter, team, "1999999.9999999999")
    assert (await refused(limiter, team, "0.0000000002")).held_usd == Decimal("1999999.9999999999")
    await held(limiter, team, "0.0000000001")
