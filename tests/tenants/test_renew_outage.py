"""Renewing while Redis is away (a real TCP proxy cut): a hold made in process renews in
process, a Redis hold is not renewed but nothing raises, and renewals reach Redis again
once it answers."""

from __future__ import annotations

import asyncio
from datetime import timedelta
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
    shared = await engine.reserve(team("fail_open"), Decimal("0.3"), 0, NOW)
    assert isinstance(shared, Reservation) and shared.backend == "redis"
    await proxy.stop()
    local = await engine.reserve(team("fail_open"), Decimal("0.4"), 0, NOW)
    assert isinstance(local, Reservation) and local.backend == "memory"
    hold_s = engine.hold_s
    soon = NOW + timedelta(seconds=hold_s * 0.9)
    assert not await engine.renew(shared, soon)  # Redis cannot be asked: logged, False
    assert await engine.renew(local, soon)  # held in this process: renewed here
    past = NOW + timedelta(seconds=hold_s * 1.5)
    assert await engine.local.usage(TEAM, "day", past) == (0, Decimal("0.4"))
    await proxy.start()
    await asyncio.sleep(QUICK.retry_s)
    assert await engine.renew(shared, soon)
    assert await engine.usage(TEAM, "day", past) == (0, Decimal("0.3"))
