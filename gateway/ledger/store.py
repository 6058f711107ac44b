"""Apply ledger entries to the database: idempotent request inserts and task aggregates.

Everything here runs inside one transaction the caller opens. Replaying the same entries
changes nothing: request rows are keyed by their uuid (ON CONFLICT DO NOTHING; on
PostgreSQL, whose partitioned table can only have keys holding the partition column, by
(id, created_at), which a replayed record repeats exactly), task aggregates and the
rollups (gateway.ledger.rollup) only add the rows that insert actually wrote (RETURNING
tells which), and a finish only moves a task that is still open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from operator import attrgetter
from typing import Any

from sqlalchemy import Table, case, func, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.ledger.driver import (
    SQLITE_MAX_ROWS,
    prepare,
    sqlite_insert_sql,
    sqlite_money,
    sqlite_time,
)
from gateway.ledger.models import REQUESTS, TASKS, Money, UTCDateTime
from gateway.ledger.partitions import ensure_partitions
from gateway.ledger.records import (
    ABANDONED,
    COST_FIELDS,
    OPEN,
    TOKEN_FIELDS,
    UNTASKED,
    FinishedTask,
    LedgerEntry,
    RequestRecord,
    TaskFinish,
    utcnow,
)
from gateway.ledger.rollup import add_to_rollups, is_untasked

_REQUEST_COLUMNS = tuple(column.name for column in REQUESTS.columns)
_SUMMED = ("request_count", *TOKEN_FIELDS, *COST_FIELDS)
_request_values = attrgetter(*_REQUEST_COLUMNS)
_TASK_SUMS = (*TOKEN_FIELDS, *COST_FIELDS)
_TASK_SUM_GETTERS = tuple(attrgetter(name) for name in _TASK_SUMS)
_batch_order = attrgetter("created_at", "attempt")


@dataclass(slots=True)
class BatchResult:
    """What one applied batch did."""

    inserted: int = 0
    duplicates: int = 0
    finished: list[FinishedTask] = field(default_factory=list)


def _insert(dialect: AsyncConnection | str, table: Table) -> Any:
    """Return the dialect's INSERT, the one that knows ON CONFLICT."""
    name = dialect if isinstance(dialect, str) else dialect.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects import postgresql  # here: a SQLite ledger never loads it

        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"the ledger supports SQLite and PostgreSQL, not {name}")


async def insert_requests(
    connection: AsyncConnection, records: Sequence[RequestRecord]
) -> list[RequestRecord]:
    """Insert request rows, skipping ids already stored; return the records actually written."""
    by_id: dict[str, RequestRecord] = {}
    for record in records:
        by_id.setdefault(record.id, record)
    unique = list(by_id.values())
    if not unique:
        return []
    dialect = connection.dialect.name
    if dialect == "postgresql":
        await ensure_partitions(connection, {record.created_at.date() for record in unique})
    if dialect == "sqlite":
        written_ids = await _insert_sqlite(connection, unique)
    elif connection.dialect.driver == "asyncpg":
        # One statement text for every batch size (asyncpg prepares it once per connection).
        arrays = tuple(map(list, zip(*map(_request_values, unique), strict=True)))
        result = await connection.exec_driver_sql(_postgresql_request_insert(), arrays)
        written_ids = {row[0] for row in result}
    else:
        columns = _REQUEST_COLUMNS
        rows = [dict(zip(columns, _request_values(record), strict=True)) for record in unique]
        result = await connection.execute(_request_insert(dialect), rows)
        written_ids = {row[0] for row in result}
    written = [record for record in unique if record.id in written_ids]
    await add_to_rollups(connection, written)
    return written


async def _insert_sqlite(connection: AsyncConnection, records: list[RequestRecord]) -> set[str]:
    """Insert on SQLite at the driver level, many rows a statement; return the ids written."""
    encoders = _sqlite_request_encoders(connection.dialect)
    written: set[str] = set()
    for start in range(0, len(records), SQLITE_MAX_ROWS):
        chunk = records[start : start + SQLITE_MAX_ROWS]
        params: list[Any] = []
        for record in chunk:
            values = list(_request_values(record))
            for position, encode in encoders:
                values[position] = encode(values[position])
            params += values
        sql = sqlite_insert_sql("requests", _REQUEST_COLUMNS, "id", len(chunk))
        result = await connection.exec_driver_sql(sql, tuple(params))
        written.update(row[0] for row in result)
    return written


_sqlite_encoders: dict[str, tuple[tuple[int, Callable[[Any], Any]], ...]] = {}


def _sqlite_request_encoders(dialect: Dialect) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
    """SQLAlchemy's bind processors of the request columns, money and time done directly.

    A record's money is already quantized and its `created_at` already UTC, so `Money` and
    `UTCDateTime` would only check again what `RequestRecord` checked; the rest (booleans,
    the float) keep SQLAlchemy's own processors.
    """
    encoders = _sqlite_encoders.get(dialect.driver)
    if encoders is None:
        prepared = prepare(dialect, _request_insert("sqlite"), _REQUEST_COLUMNS)
        chosen = []
        for position, process in prepared.converted:
            column_type = REQUESTS.c[prepared.names[position]].type
            if isinstance(column_type, Money):
                process = sqlite_money
            elif isinstance(column_type, UTCDateTime):
                process = sqlite_time
            chosen.append((_REQUEST_COLUMNS.index(prepared.names[position]), process))
        encoders = _sqlite_encoders[dialect.driver] = tuple(chosen)
    return encoders


# The request rows' conflict clause on PostgreSQL, known without compiling the statement
# (which loads SQLAlchemy's PostgreSQL dialect: a SQLite ledger never does).
REQUEST_CONFLICT = "ON CONFLICT (id, created_at) DO NOTHING RETURNING id"


@cache
def _postgresql_request_insert() -> str:
    """`INSERT ... SELECT * FROM unnest($1::type[], ...)`: a column's values as one array.

    The array types are the columns' own (`NUMERIC(20, 10)`, `TIMESTAMP WITH TIME ZONE`,
    ...), so PostgreSQL stores what a row-by-row insert would; the records' money is
    already quantized and their times UTC, which is all `Money` and `UTCDateTime` do here.
    """
    from sqlalchemy.dialects import postgresql  # here: a SQLite ledger never loads it

    dialect = postgresql.asyncpg.dialect()
    types = [column.type.compile(dialect) for column in REQUESTS.columns]
    arrays = ", ".join(f"${n}::{name}[]" for n, name in enumerate(types, 1))
    return (
        f"INSERT INTO requests ({', '.join(_REQUEST_COLUMNS)}) SELECT * FROM unnest({arrays})"
        f" {REQUEST_CONFLICT}"
    )


@cache
def _request_insert(dialect: str) -> Any:
    """The request rows' INSERT ... ON CONFLICT DO NOTHING RETURNING id, built once per dialect.

    PostgreSQL's partitioned table can only have keys holding the partition column.
    """
    key = ["id", "created_at"] if dialect == "postgresql" else ["id"]
    statement = _insert(dialect, REQUESTS).on_conflict_do_nothing(index_elements=key)
    return statement.returning(REQUESTS.c.id)


def task_deltas(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    """Sum records per task into the row an upsert adds to `tasks`, sorted by task id."""
    by_task: dict[str, list[RequestRecord]] = {}
    for record in records:
        group = by_task.get(record.task_id)
        if group is None:
            by_task[record.task_id] = [record]
        else:
            group.append(record)
    # A fixed order makes concurrent upserts lock rows in the same order: no deadlocks.
    return [_task_delta(by_task[task_id]) for task_id in sorted(by_task)]


def _task_delta(group: list[RequestRecord]) -> dict[str, Any]:
    """The sums of one task's records in a batch (most tasks have one: a request without id)."""
    if len(group) > 1:
        group = sorted(group, key=_batch_order)
    first = group[0]
    delta = _new_delta(first)
    delta["request_count"] = len(group)
    for name, getter in zip(_TASK_SUMS, _TASK_SUM_GETTERS, strict=True):
        delta[name] = sum(map(getter, group))
    delta["last_activity_at"] = max(record.created_at for record in group)
    delta["first_ttft_ms"] = next((r.ttft_ms for r in group if r.ttft_ms is not None), None)
    delta["untasked"] = any(is_untasked(record) for record in group)
    return delta


def _new_delta(record: RequestRecord) -> dict[str, Any]:
    """Start the aggregate of a task at its earliest record in the batch."""
    delta: dict[str, Any] = {
        "task_id": record.task_id,
        "team": record.team,
        "project": record.project,
        "status": OPEN,
        "started_at": record.created_at,
        "last_activity_at": record.created_at,
        "finished_at": None,
        "first_ttft_ms": None,
        "untasked": False,
    }
    if is_untasked(record):  # one request without a task id: ended as it is written
        delta.update(status=UNTASKED, finished_at=record.created_at)
    return delta


async def upsert_tasks(connection: AsyncConnection, deltas: list[dict[str, Any]]) -> None:
    """Create each task on its first request, else add the batch's sums to its row."""
    if not deltas:
        return
    statement = _task_upsert(connection.dialect.name)
    await prepare(connection.dialect, statement, tuple(deltas[0])).executemany(connection, deltas)


@cache
def _task_upsert(dialect: str) -> Any:
    """The tasks' INSERT ... ON CONFLICT DO UPDATE, built once per dialect (not per flush)."""
    statement = _insert(dialect, TASKS)
    new = statement.excluded
    old = TASKS.c
    changes: dict[str, Any] = {name: old[name] + new[name] for name in _SUMMED}
    changes.update(
        team=func.coalesce(old.team, new.team),
        project=func.coalesce(old.project, new.project),
        first_ttft_ms=func.coalesce(old.first_ttft_ms, new.first_ttft_ms),
        untasked=old.untasked | new.untasked,
        started_at=case((new.started_at < old.started_at, new.started_at), else_=old.started_at),
        last_activity_at=case(
            (new.last_activity_at > old.last_activity_at, new.last_activity_at),
            else_=old.last_activity_at,
        ),
    )
    return statement.on_conflict_do_update(index_elements=["task_id"], set_=changes)


async def finish_task(connection: AsyncConnection, finish: TaskFinish) -> FinishedTask | None:
    """Record a client's outcome; return the task if this moved it out of `open`."""
    where_id = TASKS.c.task_id == finish.task_id
    values = {"status": finish.outcome, "finished_at": finish.at}
    moved = await connection.execute(
        update(TASKS)
        .where(where_id, TASKS.c.status == OPEN)
        .values(**values)
        .returning(TASKS.c.team, TASKS.c.cost_total)
    )
    row = moved.first()
    if row is not None:
        return FinishedTask(finish.task_id, row.team or "", finish.outcome, row.cost_total)
    # The client's word beats our idle guess, but the histogram already saw this task.
    overridden = await connection.execute(
        update(TASKS).where(where_id, TASKS.c.status == ABANDONED).values(**values)
    )
    if overridden.rowcount == 0:
        await _insert_finished_placeholder(connection, finish)
    return None


async def _insert_finished_placeholder(connection: AsyncConnection, finish: TaskFinish) -> None:
    """Keep the outcome of a task whose requests have not reached the database (yet)."""
    row: dict[str, Any] = {
        "task_id": finish.task_id,
        "team": None,
        "project": None,
        "status": finish.outcome,
        "started_at": finish.at,
        "last_activity_at": finish.at,
        "finished_at": finish.at,
        "first_ttft_ms": None,
        "untasked": False,
    }
    row.update({name: 0 for name in ("request_count", *TOKEN_FIELDS)})
    row.update({name: Decimal(0) for name in COST_FIELDS})
    statement = _insert(connection, TASKS).on_conflict_do_nothing(index_elements=["task_id"])
    await connection.execute(statement, row)


async def apply_batch(connection: AsyncConnection, entries: Sequence[LedgerEntry]) -> BatchResult:
    """Apply one batch: requests first, then their tasks' sums, then finishes, in order.

    The writer plans a batch before its transaction (`gateway.ledger.batch`); this plans
    it inside the caller's.
    """
    from gateway.ledger import batch  # batch builds on this module

    return await batch.apply(connection, await batch.plan(connection.dialect, entries))


async def close_idle_tasks(
    engine: AsyncEngine, idle_seconds: float, now: datetime | None = None
) -> list[FinishedTask]:
    """Mark open tasks idle for longer than `idle_seconds` as abandoned; return them."""
    cutoff = (now or utcnow()) - timedelta(seconds=idle_seconds)
    statement = (
        update(TASKS)
        .where(TASKS.c.status == OPEN, TASKS.c.last_activity_at < cutoff)
        # The task ended at its last request, not when we noticed.
        .values(status=ABANDONED, finished_at=TASKS.c.last_activity_at)
        .returning(TASKS.c.task_id, TASKS.c.team, TASKS.c.cost_total)
    )
    async with engine.begin() as connection:
        rows = (await connection.execute(statement)).all()
    return [FinishedTask(row.task_id, row.team or "", ABANDONED, row.cost_total) for row in rows]
