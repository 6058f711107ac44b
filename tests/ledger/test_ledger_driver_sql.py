"""The flush's driver-level statements store exactly what SQLAlchemy's own execute stored.

gateway/ledger/driver.py runs the request insert, the task upsert and the six rollup
upserts with prebuilt SQL and tuples (on SQLite the request rows many to a statement,
money and time encoded directly). Here the same records go through both ways into the
same database (on SQLite and PostgreSQL), and the raw stored rows of every table the
flush writes are compared, column by column; then a replay writes nothing either way.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from ledger_helpers import T0, record
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.ledger import batch, rollup
from gateway.ledger.driver import SQLITE_MAX_ROWS, prepare, sqlite_insert_sql
from gateway.ledger.partitions import ensure_partitions
from gateway.ledger.records import RequestRecord
from gateway.ledger.store import (
    _REQUEST_COLUMNS,
    _request_insert,
    _request_values,
    _task_upsert,
    apply_batch,
    insert_requests,
    task_deltas,
    upsert_tasks,
)

TABLES = ("requests", "tasks", *(table.name for f in rollup.FAMILIES for table, _ in f.grains()))


def _records(prefix: str, n: int) -> list[RequestRecord]:
    """Varied records: nulls and values in every nullable column, whole-second times."""
    out = []
    for i in range(n):
        untasked = i % 3 == 0
        token = f"{prefix}{i:05d}"
        out.append(
            record(
                f"task-{token}" if untasked else f"task-{prefix}{i % 7}",
                request_id=f"req-{token}",
                id=f"{token}-id",
                attempt=i % 2,
                created_at=T0 + timedelta(minutes=13 * i, microseconds=0 if i % 4 else 123456),
                model_alias=("smart", "fast")[i % 2],
                task_step=None if i % 5 == 0 else f"step-{i % 3}",
                step_kind=None if i % 6 == 0 else "plan",
                prefix_status=None if i % 4 == 0 else "fresh",
                prefix_lost_usd=None if i % 2 else Decimal("0.0000000001") * i,
                expected_cached_tokens=None if i % 3 else i,
                decode_tps=None if i % 2 else 10.5 + i,
                tier_confirmed=(None, True, False)[i % 3],
                ttft_ms=None if i % 5 else i,
                cost_input=Decimal("0.0000123456") * (i + 1),
                cost_output=Decimal("12.3456789012"),
                cost_total=Decimal("0.0000123456") * (i + 1) + Decimal("12.3456789012"),
                streamed=bool(i % 2),
                usage_suspect=i % 9 == 0,
            )
        )
    return out


async def _through_sqlalchemy(connection: AsyncConnection, records: list[RequestRecord]) -> int:
    """What the flush did before driver.py: `connection.execute` with dicts."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        await ensure_partitions(connection, {r.created_at.date() for r in records})
    rows = [dict(zip(_REQUEST_COLUMNS, _request_values(r), strict=True)) for r in records]
    written_ids = {row[0] for row in await connection.execute(_request_insert(dialect), rows)}
    written = [r for r in records if r.id in written_ids]
    if written:
        await connection.execute(_task_upsert(dialect), task_deltas(written))
        groups = rollup._group(written)
        for family in rollup.FAMILIES:
            for table, floor in family.grains():
                deltas = rollup._rollup_rows(groups, floor, family.dimensions, family.extra)
                await connection.execute(rollup._upsert(dialect, family, table), deltas)
    return len(written)


async def _through_driver(connection: AsyncConnection, records: list[RequestRecord]) -> int:
    """The flush's path now: the batch planned (gateway.ledger.batch), then applied."""
    return (await apply_batch(connection, records)).inserted


async def _through_statements(connection: AsyncConnection, records: list[RequestRecord]) -> int:
    """The driver-level statements one by one (store.insert_requests, store.upsert_tasks)."""
    written = await insert_requests(connection, records)
    await upsert_tasks(connection, task_deltas(written))
    return len(written)


async def _dump(connection: AsyncConnection) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's raw rows as the driver returns them, in a fixed order."""
    dump = {}
    for table in TABLES:
        rows = (await connection.exec_driver_sql(f"SELECT * FROM {table}")).all()
        dump[table] = sorted((tuple(row) for row in rows), key=repr)
    return dump


async def _clear(connection: AsyncConnection) -> None:
    for table in TABLES:
        await connection.exec_driver_sql(f"DELETE FROM {table}")


PATHS = {"batch": _through_driver, "statements": _through_statements}


@pytest.mark.parametrize("path", PATHS)
async def test_driver_statements_store_what_sqlalchemy_stored(
    engine: AsyncEngine, path: str
) -> None:
    through = PATHS[path]
    records = _records("r", SQLITE_MAX_ROWS * 2 + 37)  # three multi-row statements on SQLite
    async with engine.begin() as connection:
        assert await _through_sqlalchemy(connection, records) == len(records)
        expected = await _dump(connection)
        await _clear(connection)
    async with engine.begin() as connection:
        assert await through(connection, records) == len(records)
        assert await _dump(connection) == expected
    assert len(expected["requests"]) == len(records)
    assert all(expected[table] for table in TABLES)
    # A replay (the spool after a crash) writes nothing: not a row, not a sum.
    async with engine.begin() as connection:
        assert await through(connection, records[::-1]) == 0
        assert await _dump(connection) == expected


@pytest.mark.parametrize("path", PATHS)
async def test_driver_statements_add_to_existing_rows(engine: AsyncEngine, path: str) -> None:
    """Two batches of the same tasks and rollup keys: the upserts add, both ways alike."""
    through = PATHS[path]
    first, second = _records("a", 40), _records("a", 80)[40:]
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, first)
        await _through_sqlalchemy(connection, second)
        expected = await _dump(connection)
        await _clear(connection)
    async with engine.begin() as connection:
        await through(connection, first)
        await through(connection, second)
        assert await _dump(connection) == expected


async def test_batch_partly_stored_adds_only_the_new_rows(engine: AsyncEngine) -> None:
    """A segment replayed after part of it was stored (a bisected half committed, or a
    sibling worker's replay): the task and rollup sums count only the rows written now."""
    records = _records("p", 90)
    stored = records[10:60:3]
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, stored)
        await _through_sqlalchemy(connection, [r for r in records if r not in stored])
        expected = await _dump(connection)
        await _clear(connection)
    async with engine.begin() as connection:
        assert await _through_driver(connection, stored) == len(stored)
    async with engine.begin() as connection:
        result = await apply_batch(connection, records + records[:5])  # and repeated ids
        assert (result.inserted, result.duplicates) == (90 - len(stored), len(stored) + 5)
        assert await _dump(connection) == expected


async def test_sqlite_batch_without_aiosqlites_queue(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where aiosqlite's queue is not reachable, the same statements run one by one."""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")
    monkeypatch.setattr(batch, "_thread_of", lambda driver: None)
    records = _records("f", 50)
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, records)
        expected = await _dump(connection)
        await _clear(connection)
    async with engine.begin() as connection:
        assert await _through_driver(connection, records) == len(records)
        assert await _through_driver(connection, records) == 0
        assert await _dump(connection) == expected


async def test_sqlite_insert_text_is_sqlalchemys_for_one_row(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        dialect = connection.dialect
        prepared = prepare(dialect, _request_insert(dialect.name), _REQUEST_COLUMNS)
        if dialect.name == "sqlite":
            assert prepared.names == _REQUEST_COLUMNS
            assert sqlite_insert_sql("requests", _REQUEST_COLUMNS, "id", 1) == prepared.sql
        else:
            assert prepared.sql.startswith("INSERT INTO requests")


async def test_text_and_floats_json_cannot_carry_store_as_sqlalchemy_stores(
    engine: AsyncEngine,
) -> None:
    """PostgreSQL gets the rows as one JSON text (gateway.ledger.pgjson): quotes,
    backslashes, control characters and non-ASCII text come back as they were, and a batch
    with an infinite float (JSON has none) takes the typed statement instead."""
    odd = 'q"uo\\te\n\ttab \u00e9\u4e2d \U0001f600 \x01'
    records = [
        replace(r, team=odd, project=odd[::-1], task_step=odd, dropped_params=odd)
        for r in _records("j", 30)
    ]
    infinite = [replace(r, decode_tps=float("inf")) for r in _records("k", 5)]
    for batch_records in (records, infinite):
        async with engine.begin() as connection:
            await _through_sqlalchemy(connection, batch_records)
            expected = await _dump(connection)
            await _clear(connection)
        async with engine.begin() as connection:
            assert await _through_driver(connection, batch_records) == len(batch_records)
            assert await _dump(connection) == expected
            await _clear(connection)
