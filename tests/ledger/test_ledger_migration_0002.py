"""Migration 0002 upgrades a ledger that 0001 created and filled, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from ledger_helpers import fill_as_old_revision, record
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger import get_task, make_engine, migrate
from gateway.ledger.engine import alembic_config
from gateway.ledger.records import TOKEN_FIELDS
from gateway.ledger.store import insert_requests, task_deltas, upsert_tasks

# Just under the 32-bit limit of 0001's columns.
OLD_ROWS = [record("old", id=f"old-{i}", prompt_tokens=2_000_000_000 + i) for i in range(3)]


def _columns(connection: Connection, table: str) -> dict[str, str]:
    """Column name -> declared type, as the database reports it."""
    return {c["name"]: str(c["type"]).upper() for c in inspect(connection).get_columns(table)}


async def _fill_as_0001(connection: AsyncConnection) -> None:
    """Write rows with only the columns 0001 created, as the previous release did."""
    await fill_as_old_revision(connection, OLD_ROWS)


async def test_0002_upgrades_a_filled_0001_ledger(db_url: str) -> None:
    await migrate(db_url, revision="0001")
    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            assert "usage_suspect" not in await connection.run_sync(_columns, "requests")
            await _fill_as_0001(connection)
        await migrate(db_url)
        async with engine.connect() as connection:
            requests = await connection.run_sync(_columns, "requests")
            tasks = await connection.run_sync(_columns, "tasks")
        for name in (*TOKEN_FIELDS, "duration_ms", "ttft_ms", "ttfat_ms", "expected_cached_tokens"):
            assert requests[name] == "BIGINT", name
        assert tasks["first_ttft_ms"] == "BIGINT"
        detail = await get_task(engine, "old")
        assert detail is not None and detail.task.request_count == 3
        assert [r.prompt_tokens for r in detail.requests] == [r.prompt_tokens for r in OLD_ROWS]
        assert not any(r.usage_suspect or r.usage_reported for r in detail.requests)

        # What 0001 refused now fits, with the audit columns.
        wide = record(
            "old", id="wide", prompt_tokens=3_000_000_000, usage_suspect=True, usage_reported="{}"
        )
        async with engine.begin() as connection:
            written = await insert_requests(connection, [wide])
            await upsert_tasks(connection, task_deltas(written))
        detail = await get_task(engine, "old")
        assert detail is not None
        assert detail.task.prompt_tokens == sum(r.prompt_tokens for r in [*OLD_ROWS, wide])
        assert {r.id: (r.usage_suspect, r.usage_reported) for r in detail.requests}["wide"] == (
            True,
            "{}",
        )
    finally:
        await engine.dispose()


async def test_0002_downgrades_to_0001(db_url: str) -> None:
    await migrate(db_url)
    config = alembic_config(db_url)

    def downgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.downgrade(config, "0001")

    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(downgrade)
        async with engine.connect() as connection:
            columns = await connection.run_sync(_columns, "requests")
        assert "usage_suspect" not in columns and columns["prompt_tokens"] == "INTEGER"
    finally:
        await engine.dispose()
