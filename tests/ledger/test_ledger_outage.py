"""PostgreSQL outages, simulated with a TCP proxy (the real server serves other tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from ledger_db import PG_HOST, PG_PORT, pg_url
from ledger_helpers import count_requests, record, sums, wait_until
from ledger_proxy import TcpProxy
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig, get_task, make_engine, migrate

pytestmark = pytest.mark.postgres

FAST = WriterConfig(flush_interval=0.02, retry_initial=0.05, retry_max=0.2, idle_timeout=None)


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    """A running proxy to the test PostgreSQL."""
    proxy = TcpProxy(PG_HOST, PG_PORT)
    await proxy.start()
    yield proxy
    await proxy.stop()


@pytest.fixture
async def direct(pg_database: str) -> AsyncIterator[AsyncEngine]:
    """A migrated database, reached directly (to look at it while the proxy is down)."""
    await migrate(pg_url(pg_database))
    engine = make_engine(pg_url(pg_database))
    yield engine
    await engine.dispose()


@pytest.fixture
async def through(pg_database: str, proxy: TcpProxy) -> AsyncIterator[AsyncEngine]:
    """The same database, reached through the proxy."""
    engine = make_engine(pg_url(pg_database, proxy.port), connect_args={"timeout": 2})
    yield engine
    await engine.dispose()


def spooled_lines(spool_dir: Path) -> int:
    """Count the entries in spool files on disk (a log's frame headers are not entries).

    The writer deletes an idle committed log in its own time: a file listed, then gone
    before it is read, holds nothing."""
    return sum(_entries(path) for path in spool_dir.glob("*.jsonl"))


def _entries(path: Path) -> int:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return data.count(b'\n{"kind":') + data.startswith(b'{"kind":')


async def test_spool_holds_rows_while_postgres_is_down_and_flushes_when_back(
    proxy: TcpProxy, direct: AsyncEngine, through: AsyncEngine, spool_dir: Path
) -> None:
    writer = LedgerWriter(through, replace(FAST, spool_dir=spool_dir))
    await writer.start()
    try:
        before = [record("outage", request_id=f"before-{i}") for i in range(20)]
        for item in before:
            writer.submit(item)
        await wait_until(lambda: writer.rows_written == 20)
        # Committed and idle: the log is deleted, so what follows is all the outage's.
        await wait_until(lambda: spooled_lines(spool_dir) == 0)

        await proxy.stop()
        during = [record("outage", request_id=f"during-{i}") for i in range(30)]
        for item in during:
            writer.submit(item)
        await wait_until(lambda: writer.flush_failures >= 2 and writer.pending == 0)
        assert writer.spooled == 30 == spooled_lines(spool_dir)
        assert await count_requests(direct) == 20

        await proxy.start()
        await wait_until(lambda: writer.spooled == 0)
        assert await count_requests(direct) == 50
        await wait_until(lambda: spooled_lines(spool_dir) == 0)  # the idle log deleted
    finally:
        await writer.close()
    detail = await get_task(direct, "outage")
    assert detail is not None
    assert detail.task.request_count == 50
    assert detail.task.cost_total == sums(before + during)["cost_total"]


async def test_closing_during_an_outage_leaves_the_spool_for_the_next_start(
    proxy: TcpProxy, direct: AsyncEngine, through: AsyncEngine, spool_dir: Path
) -> None:
    config = replace(FAST, spool_dir=spool_dir, close_timeout=0.3)
    writer = LedgerWriter(through, config)
    await writer.start()
    await proxy.stop()
    for i in range(15):
        writer.submit(record("shutdown", request_id=f"r{i}"))
    await writer.close()  # gives up on the database after close_timeout
    assert spooled_lines(spool_dir) == 15
    assert await count_requests(direct) == 0

    await proxy.start()
    successor = LedgerWriter(through, config)
    await successor.start()
    try:
        await wait_until(lambda: successor.spooled == 0)
    finally:
        await successor.close()
    assert await count_requests(direct) == 15
