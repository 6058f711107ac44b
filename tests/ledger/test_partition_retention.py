"""Migration 0005 on a filled ledger, daily partitions made as rows land, and retention
that forgets whole days: on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from ledger_helpers import fill_as_old_revision, record
from rollup_workload import START, assert_rollups_match_rows, base_rows, workload
from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate
from gateway.ledger.engine import alembic_config
from gateway.ledger.maintenance import LedgerMaintenance, apply_retention, create_ahead
from gateway.ledger.partitions import partition_days
from gateway.ledger.queries import spend, task_outcomes
from gateway.ledger.records import RequestRecord
from gateway.ledger.store import TASKS, apply_batch

RECORDS = [e for e in workload() if isinstance(e, RequestRecord)]
DAYS = sorted({r.created_at.date() for r in RECORDS})


async def _days(engine: AsyncEngine) -> list[date]:
    async with engine.connect() as connection:
        return await partition_days(connection)


async def _untasked(engine: AsyncEngine) -> dict[str, bool]:
    async with engine.connect() as connection:
        rows = await connection.execute(select(TASKS.c.task_id, TASKS.c.untasked))
    return {task_id: bool(flag) for task_id, flag in rows}


async def _same_through_rollups(engine: AsyncEngine) -> None:
    for group in ("team", "model", "tier"):
        assert await spend(engine, group) == await spend(engine, group, use_rollups=False)
    assert await task_outcomes(engine) == await task_outcomes(engine, use_rollups=False)


def _downgrade(connection: Connection, url: str) -> None:
    config = alembic_config(url)
    config.attributes["connection"] = connection
    command.downgrade(config, "0004")


async def test_0005_converts_a_filled_0004_ledger(db_url: str) -> None:
    await migrate(db_url, revision="0004")
    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            await fill_as_old_revision(connection, RECORDS)
        await migrate(db_url)
        assert sorted(r.id for r in await base_rows(engine)) == sorted(r.id for r in RECORDS)
        await assert_rollups_match_rows(engine)
        await _same_through_rollups(engine)
        flags = await _untasked(engine)
        assert {t for t, flag in flags.items() if flag} == {
            r.task_id for r in RECORDS if r.task_id.startswith("task-")
        }
        if engine.dialect.name == "postgresql":
            assert set(DAYS) <= set(await _days(engine))
            async with engine.begin() as connection:
                await connection.run_sync(_downgrade, db_url)
            assert len(await base_rows(engine)) == len(RECORDS)  # a plain table again
            await migrate(db_url)
            await assert_rollups_match_rows(engine)
    finally:
        await engine.dispose()


async def test_retention_forgets_whole_old_days_only(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await apply_batch(connection, RECORDS)
    cutoff = DAYS[2]
    now = datetime(cutoff.year, cutoff.month, cutoff.day, 13, tzinfo=UTC) + timedelta(days=5)
    done = await apply_retention(engine, days=5, now=now)
    assert done.cutoff == cutoff
    kept = await base_rows(engine)
    assert {r.id for r in kept} == {r.id for r in RECORDS if r.created_at.date() >= cutoff}
    assert 0 < len(kept) < len(RECORDS)
    if engine.dialect.name == "postgresql":
        assert done.partitions_dropped == DAYS[:2] and done.rows_deleted == 0
        assert [day for day in await _days(engine) if day in DAYS] == DAYS[2:]
    else:
        assert done.rows_deleted == len(RECORDS) - len(kept)
    await assert_rollups_match_rows(engine)
    await _same_through_rollups(engine)
    remaining = await _untasked(engine)
    assert all(r.task_id in remaining for r in kept)  # a task with rows left is kept


@pytest.mark.postgres
async def test_partitions_are_made_as_rows_land_and_ahead(pg_database: str, tmp_path: Path) -> None:
    from ledger_db import pg_url

    url = pg_url(pg_database)
    await migrate(url)
    engine = make_engine(url)
    try:
        far = datetime(2031, 7, 4, 12, tzinfo=UTC)
        writers = [
            LedgerWriter(
                engine,
                WriterConfig(spool_dir=tmp_path / f"s{n}", flush_interval=0.01, idle_timeout=None),
            )
            for n in range(3)
        ]
        for writer in writers:
            await writer.start()
        # Three writers need the same new day at once: one creates it, none fails.
        for n, writer in enumerate(writers):
            writer.submit(record(f"far-{n}", id=f"far-{n}", created_at=far + timedelta(hours=n)))
        assert all(await asyncio.gather(*(writer.flush() for writer in writers)))
        for writer in writers:
            await writer.close()
        assert sum(w.rows_written for w in writers) == 3 and not any(
            w.rows_rejected for w in writers
        )
        assert date(2031, 7, 4) in await _days(engine)
        await create_ahead(engine, 3, today=date(2031, 12, 30))
        assert {date(2031, 12, 30) + timedelta(d) for d in range(4)} <= set(await _days(engine))
        upkeep = LedgerMaintenance(engine, retention_days=30, interval=3600)
        await upkeep.start()
        await upkeep.close()
        assert date(2031, 7, 4) in await _days(engine)  # the future is not old
        assert min(await _days(engine)) >= START.date()
    finally:
        await engine.dispose()
