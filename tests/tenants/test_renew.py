"""Renewing a live hold, in process and on the real Redis: a renewed hold outlives its
first deadline, one not renewed expires as before, and nothing ended is held again. Time
moves through the engine's `now`, never by sleeping."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from gateway.tenants import Limiter, RateLimit, Reservation, Scope, ScopeLimits
from tests.tenants.conftest import HOLD_S
from tests.tenants.test_budgets import NOW, TEAM, daily, held


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


async def test_a_renewed_hold_outlives_its_first_deadline(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    reservation = await held(limiter, team, "0.6")
    assert await limiter.renew(reservation, later(HOLD_S * 0.9))
    # Past the first deadline the hold still counts, until hold_s after the renewal.
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 1.5)) == (0, Decimal("0.6"))
    assert await limiter.renew(reservation, later(HOLD_S * 1.8))
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 2.7)) == (0, Decimal("0.6"))
    settlement = await limiter.settle(reservation, Decimal("0.5"), 0, later(HOLD_S * 2.7))
    assert settlement.applied
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 2.7)) == (Decimal("0.5"), 0)
    # The renewed deadline passes too once renewals stop: nothing is held for ever.
    other = await held(limiter, team, "0.2", later(HOLD_S * 3))
    assert await limiter.renew(other, later(HOLD_S * 3.5))
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 4.5)) == (Decimal("0.5"), 0)


async def test_a_hold_not_renewed_expires_and_is_not_brought_back(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    reservation = await held(limiter, team, "0.6")
    assert await limiter.usage(TEAM, "day", later(HOLD_S + 1)) == (0, 0)
    assert not await limiter.renew(reservation, later(HOLD_S + 2))
    assert await limiter.usage(TEAM, "day", later(HOLD_S + 2)) == (0, 0)
    # Expired before anything swept it: the renewal still finds it gone.
    late = await held(limiter, team, "0.3", later(HOLD_S * 2))
    assert not await limiter.renew(late, later(HOLD_S * 3 + 1))
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 3 + 1)) == (0, 0)
    # A late settle still counts its cost once.
    assert (await limiter.settle(late, Decimal("0.25"), 0, later(HOLD_S * 3 + 2))).applied
    assert await limiter.usage(TEAM, "day", later(HOLD_S * 3 + 2)) == (Decimal("0.25"), 0)


async def test_a_renewal_after_settle_or_release_holds_nothing(limiter: Limiter) -> None:
    team = [daily(TEAM, "1")]
    settled = await held(limiter, team, "0.4")
    released = await held(limiter, team, "0.4")
    await limiter.settle(settled, Decimal("0.1"), 0, later(1))
    assert await limiter.release(released, later(1))
    assert not await limiter.renew(settled, later(2))
    assert not await limiter.renew(released, later(2))
    assert await limiter.usage(TEAM, "day", later(2)) == (Decimal("0.1"), 0)


async def test_a_reservation_with_no_budget_renews_until_it_ends(limiter: Limiter) -> None:
    # Only a rate limit: the engine keeps the reservation live without a budget window.
    scopes = [ScopeLimits(TEAM, rate=RateLimit(requests_per_min=100))]
    reservation = await limiter.reserve(scopes, Decimal("0.1"), 0, NOW)
    assert isinstance(reservation, Reservation)
    assert await limiter.renew(reservation, later(1))
    assert await limiter.release(reservation, later(2))
    assert not await limiter.renew(reservation, later(3))


async def test_every_window_of_the_reservation_is_renewed(limiter: Limiter) -> None:
    key = Scope("key", "fbx-renew")
    scopes = [daily(key, "1"), daily(TEAM, "1")]
    reservation = await held(limiter, scopes, "0.6")
    assert await limiter.renew(reservation, later(HOLD_S * 0.9))
    for scope in (key, TEAM):
        assert await limiter.usage(scope, "day", later(HOLD_S * 1.5)) == (0, Decimal("0.6"))
