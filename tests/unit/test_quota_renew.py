"""The quota stage's renewal timer on the in-process engine: a hold outlives hold_s while
its request is open, and once the request ends nothing renews it (it expires as before)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from gateway.ledger.records import utcnow
from gateway.pipeline.quota import QuotaHold, _schedule_renewal, _stop_renewal
from gateway.tenants import Budget, MemoryLimiter, Reservation, Scope, ScopeLimits

HOLD_S = 0.6  # renewed every 0.2 s
TEAM = Scope("team", "acme")


async def _held(limiter: MemoryLimiter) -> Decimal:
    return (await limiter.usage(TEAM, "day", utcnow())).held_usd


async def test_an_open_hold_is_renewed_and_an_ended_one_is_not() -> None:
    limiter = MemoryLimiter(hold_s=HOLD_S)
    scopes = (ScopeLimits(TEAM, (Budget("day", Decimal(1)),)),)
    reservation = await limiter.reserve(scopes, Decimal("0.5"), 0)
    assert isinstance(reservation, Reservation)
    hold = QuotaHold(limiter, scopes, reservation)
    _schedule_renewal(hold)
    assert hold.renewal is not None  # a timer only, until a third of hold_s has passed
    await asyncio.sleep(HOLD_S * 2.5)
    assert await _held(limiter) == Decimal("0.5")
    assert hold.reservation.expires_at > reservation.expires_at  # the settle sees it live
    hold.closed = True  # what settle and release do first
    _stop_renewal(hold)
    assert hold.renewal is None and hold.renewing is None
    await asyncio.sleep(HOLD_S * 1.5)
    assert await _held(limiter) == 0
