"""The key cache on a real ledger: lookups without I/O, refresh across replicas, floods and outages."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.keys.cache import KeyCache
from gateway.keys.model import KeyAttributes
from gateway.keys.secrets import new_secret
from gateway.keys.store import KeyStore
from gateway.ledger import make_engine, migrate
from tests.ledger.ledger_proxy import TcpProxy
from tests.pg import PG_HOST, PG_PORT, fresh_pg_database, pg_url


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_made_on_one_replica_is_found_by_the_other_after_a_refresh(
    engine: AsyncEngine,
) -> None:
    here = KeyCache(KeyStore(engine), refresh_s=3600)
    there = KeyCache(KeyStore(engine), refresh_s=3600)
    await here.refresh()
    await there.refresh()
    made = await here.store.create(KeyAttributes(team="research"))
    here.put(made.record)
    assert here.lookup(made.secret) == made.record
    assert await there.refresh() is True
    assert there.lookup(made.secret) == made.record
    assert await there.refresh() is False  # nothing changed: one fingerprint query, no load
    revoked = await here.store.revoke(made.record.id)
    await there.refresh()
    found = there.lookup(made.secret)
    assert found is not None and revoked is not None and found.revoked_at == revoked.revoked_at


async def test_the_poller_picks_up_changes_every_refresh_s(engine: AsyncEngine) -> None:
    store = KeyStore(engine)
    async with KeyCache(KeyStore(engine), refresh_s=0.05) as cache:
        made = await store.create(KeyAttributes(team="research"))
        for _ in range(200):
            if cache.lookup(made.secret) is not None:
                break
            await asyncio.sleep(0.01)
        assert cache.lookup(made.secret) == made.record


async def test_a_flood_of_unknown_keys_refreshes_at_most_once_per_interval(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    cache = KeyCache(KeyStore(engine), refresh_s=3600, clock=clock)
    await cache.refresh()
    polls = cache.polls
    for _ in range(2000):
        assert cache.lookup(new_secret()) is None
    await asyncio.sleep(0.05)  # let the one refresh it started finish
    for _ in range(50):
        assert await cache.resolve(new_secret()) is None
    assert cache.polls == polls + 1
    # A key made on another replica: the first miss after the interval finds it at once.
    made = await KeyStore(engine).create(KeyAttributes(team="research"))
    clock.now += 1.0
    assert await cache.resolve(made.secret) == made.record
    assert cache.polls == polls + 2


async def test_an_admin_change_is_seen_at_once_even_during_a_reload(engine: AsyncEngine) -> None:
    cache = KeyCache(KeyStore(engine), refresh_s=3600)
    await cache.refresh()
    reload = asyncio.create_task(cache.refresh())
    made = await cache.store.create(KeyAttributes(team="research"))
    cache.put(made.record)
    await reload
    assert cache.lookup(made.secret) == made.record


@pytest.mark.postgres
async def test_a_database_outage_keeps_the_keys_last_read(caplog: pytest.LogCaptureFixture) -> None:
    async with fresh_pg_database("keys_outage") as name:
        await migrate(pg_url(name))
        proxy = TcpProxy(PG_HOST, PG_PORT)
        await proxy.start()
        engine = make_engine(pg_url(name, proxy.port), connect_args={"timeout": 1})
        try:
            cache = KeyCache(KeyStore(engine), refresh_s=3600)
            made = await cache.store.create(KeyAttributes(team="research"))
            await cache.refresh()
            await proxy.stop()
            with caplog.at_level(logging.WARNING, logger="farebox.keys"):
                assert await cache.refresh() is False
                assert await cache.refresh() is False
            assert cache.lookup(made.secret) == made.record
            warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
            assert len(warnings) == 1  # said once, not every poll
            await proxy.start()
            other = await cache.store.create(KeyAttributes(team="other"))
            assert await cache.refresh() is True
            assert cache.lookup(other.secret) == other.record
        finally:
            await engine.dispose()
            await proxy.stop()
