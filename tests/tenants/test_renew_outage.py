"""Renewing while Redis is away (a real TCP proxy cut): a hold made in process renews in
process, a Redis hold is not renewed but nothing raises, and renewals reach Redis again
once it answers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gateway.tenants import Reservation
from gateway.tenants.fallback import FallbackLimiter
from tests.ledger.ledger_proxy import TcpProxy
from tests.tenants.test_state_outage import NOW, QUICK, TEAM, engine, proxy, team

pytestmark = pytest.mark.redis
__all__ = ["engine", "proxy"]  # the outage tests' fixtures, shared


async def test_renewals_during_an_outage_never_raise(
    engine: FallbackLimiter, proxy: TcpProxy
) -> None:
    hold_s = engine.hold_s
    start = one_day_window(NOW, timedelta(seconds=hold_s * 1.5))
    shared = await engine.reserve(team("fail_open"), Decimal("0.3"), 0, start)
    assert isinstance(shared, Reservation) and shared.backend == "redis"
    await proxy.stop()
    local = await engine.reserve(team("fail_open"), Decimal("0.4"), 0, start)
    assert isinstance(local, Reservation) and local.backend == "memory"
    soon = start + timedelta(seconds=hold_s * 0.9)
    assert not await engine.renew(shared, soon)  # Redis cannot be asked: logged, False
    assert await engine.renew(local, soon)  # held in this process: renewed here
    past = start + timedelta(seconds=hold_s * 1.5)
    assert await engine.local.usage(TEAM, "day", past) == (0, Decimal("0.4"))
    await proxy.start()
    await asyncio.sleep(QUICK.retry_s)
    assert await engine.renew(shared, soon)
    assert await engine.usage(TEAM, "day", past) == (0, Decimal("0.3"))


def one_day_window(now: datetime, span: timedelta) -> datetime:
    """`now`, or earlier the same day, so that `now + span` is still in that UTC day: the
    day's budget window must not turn over mid-test (it did for a run started at 23:59)."""
    if (now + span).date() == now.date():
        return now
    return now - span


def test_the_window_never_turns_over_mid_test() -> None:
    span = timedelta(minutes=22, seconds=30)
    for start in (
        datetime(2026, 12, 1, 23, 59, 50, tzinfo=UTC),
        datetime(2026, 12, 2, 0, 1, tzinfo=UTC),
    ):
        begun = one_day_window(start, span)
        assert begun.date() == (begun + span).date() == start.date()
