"""A flush's statements and parameters, built before its transaction, a slice at a time.

A flush runs in the serving process beside the requests. Built in one go, a batch of a
few hundred rows held the event loop for several milliseconds (the task rows' dicts and
bind processors alone 5 ms for 140 rows), and a multi-row `INSERT ... VALUES` bound tens
of thousands of parameters in one C call in aiosqlite's thread, holding the interpreter
lock throughout (the switch interval cannot interrupt a C call): every request that woke
meanwhile waited (bench/ledger_stall.py). Here the Python work runs on the loop
`SLICE_ROWS` records at a time, yielding between slices, and the database gets only
tuples: on SQLite one call into the connection's thread runs every statement with
sqlite3's `executemany` (which lets go of the lock while SQLite steps each row), a slice of
rows at a time with a short sleep between slices (`_execute_paced`); on
PostgreSQL the request and task rows go as one JSON text each (`gateway.ledger.pgjson`).

The rows are built assuming every request row is new (a replayed segment is the rare
case): if the database already holds some ids, the task and rollup rows are built again
for the rows actually written, before anything is added.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from operator import attrgetter, itemgetter
from typing import Any

import orjson
from sqlalchemy import Boolean
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger import pgjson, rollup, store
from gateway.ledger.driver import MONEY_UNITS, Prepared, prepare, sqlite_money, sqlite_time
from gateway.ledger.partitions import ensure_partitions
from gateway.ledger.records import (
    COST_FIELDS,
    OPEN,
    TOKEN_FIELDS,
    UNTASKED,
    LedgerEntry,
    RequestRecord,
    TaskFinish,
)

SLICE_ROWS = 32
"""Records handled between two yields to the loop: ~0.1-0.2 ms of Python here."""

THREAD_SLICE_ROWS = 16
"""Rows the SQLite thread writes per statement between two pauses (`_sqlite_write`), at
`SLICE_ROWS`: a writer that has fallen behind (larger steps) writes more per pause."""

THREAD_PAUSE_S = 1e-6
"""The SQLite thread's pause between slices: any sleep blocks the thread (the kernel's
timer slack makes it ~50-60 us here), which is what lets a waiting loop in."""

TASK_KEYS = (
    "task_id", "team", "project", "status", "started_at", "last_activity_at", "finished_at",
    "first_ttft_ms", "untasked", "request_count", *TOKEN_FIELDS, *COST_FIELDS,
)  # fmt: skip
"""The task upsert's parameters (the keys of `store.task_deltas`' rows)."""

Rows = list[tuple[Any, ...]]
Statement = tuple[str, Rows]
"""SQL run with `executemany` over the rows (driver-level parameters)."""


async def pause() -> None:
    """Let the loop run what is ready (requests) before the next slice."""
    await asyncio.sleep(0)


@dataclass(slots=True)
class Plan:
    """One batch: its request rows, their task and rollup rows, its finishes."""

    records: list[RequestRecord]  # unique by id, in batch order
    rows: Rows  # each record's request row: encoded on SQLite, raw values on PostgreSQL
    requests: int  # request entries in the batch, repeated ids included
    finishes: list[TaskFinish]
    statements: list[Statement]  # the task upsert's and the rollups'
    times: TimeText = field(default_factory=lambda: TimeText())
    json: str | None = None  # asyncpg: the request rows as one JSON text (see pgjson)
    step: int = SLICE_ROWS  # records between two yields to the loop


async def plan(dialect: Dialect, entries: Sequence[LedgerEntry], step: int = SLICE_ROWS) -> Plan:
    """Split `entries`, drop repeated ids, build every statement's rows, `step` records at
    a time (a writer that has fallen behind takes larger slices, fewer turns of the loop)."""
    by_id: dict[str, RequestRecord] = {}
    finishes: list[TaskFinish] = []
    requests = 0
    for start in range(0, len(entries), step * 8):
        for entry in entries[start : start + step * 8]:
            if isinstance(entry, RequestRecord):
                requests += 1
                by_id.setdefault(entry.id, entry)
            else:
                finishes.append(entry)
        await pause()
    records = list(by_id.values())
    times = TimeText()
    rows = await _request_rows(dialect, records, times, step)
    statements = await derived(dialect, records, times, step, rows)
    json = None
    if _json_rows(dialect) and pgjson.finite(rows, _DECODE_TPS):
        json = await _json(rows, step)
    return Plan(records, rows, requests, finishes, statements, times, json, step)


_DECODE_TPS = store._REQUEST_COLUMNS.index("decode_tps")


def _json_rows(dialect: Dialect) -> bool:
    """Whether rows go to the database as one JSON text (PostgreSQL through asyncpg)."""
    return dialect.name == "postgresql" and dialect.driver == "asyncpg"


async def _json(rows: Rows, step: int) -> str | None:
    """The rows as one JSON array, encoded a slice at a time; None if JSON cannot carry
    them (a lone surrogate: the typed parameters then meet the driver's own refusal)."""
    parts = []
    for start in range(0, len(rows), step * 2):
        try:
            parts.append(pgjson.encode_rows(rows[start : start + step * 2]))
        except orjson.JSONEncodeError:
            return None
        await pause()
    return pgjson.json_text(parts)


async def _request_rows(
    dialect: Dialect, records: list[RequestRecord], times: TimeText, step: int
) -> Rows:
    """The request rows: on SQLite encoded as `store._insert_sqlite` encodes them."""
    rows: Rows = []
    if dialect.name != "sqlite":
        for start in range(0, len(records), step * 4):
            rows += map(store._request_values, records[start : start + step * 4])
            await pause()
        return rows
    encode = _sqlite_request_row(dialect)
    for start in range(0, len(records), step):
        for record in records[start : start + step]:
            rows.append(encode(record, times[record.created_at]))
        await pause()
    return rows


def _as_int(process: Callable[[Any], Any]) -> bool:
    """Whether a bool's bind processor writes 1 and 0 (SQLite's, without native booleans)."""
    return all(type(process(flag)) is int and process(flag) == flag for flag in (True, False))


_SqliteRow = Callable[[RequestRecord, str], tuple[Any, ...]]
_sqlite_rows: dict[str, _SqliteRow] = {}


def _sqlite_request_row(dialect: Dialect) -> _SqliteRow:
    """`row(record, created_at_text)`: the record's request row as `store._insert_sqlite`
    encodes it (`store._sqlite_request_encoders`), with the two encoders a row calls most
    done inline: `sqlite_money` (seven amounts) and SQLAlchemy's `Boolean` processor (five
    flags) for a real bool or None, which it passes through `int` (a dict look-up here;
    any other value still meets the processor and its TypeError or ValueError).
    """
    made = _sqlite_rows.get(dialect.driver)
    if made is not None:
        return made
    columns = store._REQUEST_COLUMNS
    created_at = columns.index("created_at")
    money: list[int] = []
    flags: list[tuple[int, Callable[[Any], Any]]] = []
    others: list[tuple[int, Callable[[Any], Any]]] = []
    for position, process in store._sqlite_request_encoders(dialect):
        column_type = store.REQUESTS.c[columns[position]].type
        if position == created_at:
            continue  # the caller's `TimeText`
        if process is sqlite_money:
            money.append(position)
        elif isinstance(column_type, Boolean) and _as_int(process):
            flags.append((position, process))
        else:
            others.append((position, process))
    as_int: dict[Any, Any] = {True: 1, False: 0, None: None}
    units = MONEY_UNITS
    values_of = store._request_values

    def row(record: RequestRecord, created_text: str) -> tuple[Any, ...]:
        values = list(values_of(record))
        for position in money:
            amount = values[position]
            if amount:  # as `sqlite_money`: exact (see there)
                values[position] = int(amount * units)
            elif amount is not None:
                values[position] = 0
        for position, process in flags:
            flag = values[position]
            values[position] = (
                as_int[flag] if flag is None or flag.__class__ is bool else process(flag)
            )
        for position, process in others:
            values[position] = process(values[position])
        values[created_at] = created_text
        return tuple(values)

    _sqlite_rows[dialect.driver] = row
    return row


async def derived(
    dialect: Dialect,
    records: list[RequestRecord],
    times: TimeText,
    step: int,
    rows: Rows | None = None,
) -> list[Statement]:
    """The task upsert's rows and the six rollup upserts' rows for `records` (`rows`: their
    request rows as `_request_rows` built them, if at hand)."""
    if not records:
        return []
    statements = [await _task_rows(dialect, records, times, step, rows)]
    groups: dict[tuple[Any, ...], rollup._Group] = {}
    for start in range(0, len(records), step):
        rollup.group_into(groups, records[start : start + step])
        await pause()
    for group in groups.values():
        for start in range(0, len(group.records), step * 2):
            group.add(group.records[start : start + step * 2])
            await pause()
    for prepared, rows in rollup.statements(dialect, groups):
        statements.append((prepared.sql, rows))
        await pause()
    return statements


async def _task_rows(
    dialect: Dialect,
    records: list[RequestRecord],
    times: TimeText,
    step: int,
    request_rows: Rows | None = None,
) -> Statement:
    """One row per task, sorted by task id; a task with one record in the batch (every
    request without a task id) straight from the record, without a dict, or on SQLite from
    its request row, whose values are already encoded."""
    prepared = prepare(dialect, store._task_upsert(dialect.name), TASK_KEYS)
    counts = Counter(record.task_id for record in records)
    rows: Rows = []
    grouped: dict[str, list[RequestRecord]] = {}
    from_request = None
    if request_rows is not None and dialect.name == "sqlite":
        from_request = _task_row_of_request(prepared)
    if from_request is not None and request_rows is not None:
        for start in range(0, len(records), step):
            for record, request_row in zip(
                records[start : start + step], request_rows[start : start + step], strict=True
            ):
                if counts[record.task_id] == 1:
                    rows.append(from_request(request_row, rollup.is_untasked(record)))
                else:
                    grouped.setdefault(record.task_id, []).append(record)
            await pause()
    else:
        single = _single_task_row(dialect, prepared, times)
        for start in range(0, len(records), step):
            for record in records[start : start + step]:
                if counts[record.task_id] == 1:
                    rows.append(single(record))
                else:
                    grouped.setdefault(record.task_id, []).append(record)
            await pause()
    if grouped:
        rows += prepared.tuples([store._task_delta(group) for group in grouped.values()])
    rows.sort(key=itemgetter(prepared.names.index("task_id")))
    if _json_rows(dialect):  # one JSON text, not a row of 22 parameters per task
        json = await _json(rows, step)
        if json is not None:
            tail = pgjson.conflict_tail(prepared.sql)
            return pgjson.insert_sql(store.TASKS, prepared.names, tail), [(json,)]
    return prepared.sql, rows


def _single_task_row(
    dialect: Dialect, prepared: Prepared, times: TimeText
) -> Callable[[RequestRecord], tuple[Any, ...]]:
    """Build one task row from one record, as `_task_delta` of a one-record group would.

    The record's money is already quantized and in range and its time UTC (checked by
    `RequestRecord`), so `Money` and `UTCDateTime` only encode: integer units and naive
    text on SQLite (`sqlite_money`, `sqlite_time`), the values as they are on PostgreSQL.
    The other columns' bind processors are SQLAlchemy's.
    """
    names = prepared.names
    at = {name: position for position, name in enumerate(names)}
    get = attrgetter(*(_TASK_ATTRIBUTES.get(name, "created_at") for name in names))
    started, last, finished = at["started_at"], at["last_activity_at"], at["finished_at"]
    status, count, untasked_at = at["status"], at["request_count"], at["untasked"]
    money = [at[name] for name in COST_FIELDS]
    encoded = {started, last, finished, *money}
    others = [
        (position, process) for position, process in prepared.converted if position not in encoded
    ]
    sqlite = dialect.name == "sqlite"

    def row(record: RequestRecord) -> tuple[Any, ...]:
        values = list(get(record))
        untasked = rollup.is_untasked(record)
        moment = times[record.created_at] if sqlite else record.created_at
        values[started] = values[last] = moment
        values[finished] = moment if untasked else None
        values[status] = UNTASKED if untasked else OPEN
        values[count] = 1
        values[untasked_at] = untasked
        if sqlite:
            for position in money:
                values[position] = sqlite_money(values[position])
        for position, process in others:
            value = values[position]
            if value is not None:
                values[position] = process(value)
        return tuple(values)

    return row


_TaskRowOfRequest = Callable[[tuple[Any, ...], bool], tuple[Any, ...]]
_task_row_makers: dict[Prepared, _TaskRowOfRequest | None] = {}


def _task_row_of_request(prepared: Prepared) -> _TaskRowOfRequest | None:
    """`row(request_row, untasked)`: a one-record task's row taken from the record's SQLite
    request row (`_request_rows`), which holds every value the task row repeats already
    encoded as the task upsert encodes it: money as `sqlite_money` integers, the time as
    `TimeText`, the rest as they are. None if the task upsert encodes another column.

    `_single_task_row` read 22 attributes and encoded the six amounts and the time again.
    """
    if prepared in _task_row_makers:
        return _task_row_makers[prepared]
    names = prepared.names
    at = {name: position for position, name in enumerate(names)}
    started, last, finished = at["started_at"], at["last_activity_at"], at["finished_at"]
    status, count, untasked_at = at["status"], at["request_count"], at["untasked"]
    encoded = {started, last, finished, untasked_at, *(at[name] for name in COST_FIELDS)}
    flags: dict[bool, Any] = {True: True, False: False}
    make: _TaskRowOfRequest | None = None
    if all(position in encoded for position, _ in prepared.converted):
        for position, process in prepared.converted:
            if position == untasked_at:
                flags = {True: process(True), False: process(False)}
        columns = store._REQUEST_COLUMNS
        get = itemgetter(
            *(columns.index(_TASK_ATTRIBUTES.get(name, "created_at")) for name in names)
        )

        def make(request_row: tuple[Any, ...], untasked: bool) -> tuple[Any, ...]:
            values = list(get(request_row))  # created_at's text where no attribute maps
            values[finished] = values[started] if untasked else None
            values[status] = UNTASKED if untasked else OPEN
            values[count] = 1
            values[untasked_at] = flags[untasked]
            return tuple(values)

    _task_row_makers[prepared] = make
    return make


_TASK_ATTRIBUTES = {
    name: name for name in ("task_id", "team", "project", *TOKEN_FIELDS, *COST_FIELDS)
} | {"first_ttft_ms": "ttft_ms"}
"""A one-record task row's columns taken from the record as they are."""


class TimeText(dict[datetime, str]):
    """`sqlite_time` of each datetime, computed once (a record's time goes in up to four
    columns of two tables; formatting it costs ~2 us)."""

    def __missing__(self, moment: datetime) -> str:
        text = self[moment] = sqlite_time(moment)
        return text


class LedgerRaceError(RuntimeError):
    """Another writer stored some of the batch's ids meanwhile: retry the batch (transient)."""


async def apply(connection: AsyncConnection, plan: Plan) -> store.BatchResult:
    """Apply a planned batch in the caller's transaction: rows, tasks, rollups, finishes."""
    written = plan.records
    if written:
        dialect = connection.dialect
        if dialect.name == "sqlite":
            written = await _apply_sqlite(connection, plan)
        elif dialect.driver == "asyncpg":
            written = await _apply_asyncpg(connection, plan)
        else:  # another PostgreSQL driver: SQLAlchemy's statements
            written = await store.insert_requests(connection, written)
            await store.upsert_tasks(connection, store.task_deltas(written))
    result = store.BatchResult(inserted=len(written), duplicates=plan.requests - len(written))
    for finish in plan.finishes:
        finished = await store.finish_task(connection, finish)
        if finished is not None:
            result.finished.append(finished)
    return result


async def _apply_asyncpg(connection: AsyncConnection, plan: Plan) -> list[RequestRecord]:
    """The request rows as column arrays in one statement, then the task and rollup rows."""
    records = plan.records
    await ensure_partitions(connection, {record.created_at.date() for record in records})
    arrays = tuple(map(list, zip(*plan.rows, strict=True))) if plan.json is None else ()
    if plan.json is not None:
        sql = pgjson.insert_sql(store.REQUESTS, store._REQUEST_COLUMNS, _REQUEST_TAIL)
        result = await connection.exec_driver_sql(sql, (plan.json,))
    else:
        result = await connection.exec_driver_sql(store._postgresql_request_insert(), arrays)
    written_ids = {row[0] for row in result}
    statements = plan.statements
    if len(written_ids) != len(records):  # a replay: add only what was written
        records = [record for record in records if record.id in written_ids]
        statements = await derived(connection.dialect, records, plan.times, plan.step)
    for sql, rows in statements:
        await connection.exec_driver_sql(sql, rows)
    return records


_REQUEST_TAIL = store.REQUEST_CONFLICT  # conflict_tail(store._postgresql_request_insert())


async def _apply_sqlite(connection: AsyncConnection, plan: Plan) -> list[RequestRecord]:
    """Every statement in one call into the connection's thread (see `_sqlite_write`)."""
    records, rows, statements = plan.records, plan.rows, plan.statements
    while True:
        ids = [record.id for record in records]
        existing = await _in_sqlite_thread(connection, ids, rows, statements, plan.step)
        if not existing:
            return records
        # A replay: nothing was written; again with the rows the database lacks.
        kept = [index for index, record in enumerate(records) if record.id not in existing]
        records, rows = [records[i] for i in kept], [rows[i] for i in kept]
        if not records:
            return []
        statements = await derived(connection.dialect, records, plan.times, plan.step, rows)


async def _in_sqlite_thread(
    connection: AsyncConnection,
    ids: list[str],
    rows: Rows,
    statements: list[Statement],
    step: int = SLICE_ROWS,
) -> set[str]:
    """Run `_sqlite_write` in aiosqlite's thread with one hop (its queue, as SQLAlchemy's
    aiosqlite dialect reaches it), paced for a plan of `step` records a slice, or statement
    by statement where that is not there."""
    raw = await connection.get_raw_connection()
    run = _thread_of(raw.driver_connection)
    if run is not None:
        paced = _thread_pacing(step)
        existing: set[str] = await run(_sqlite_write, ids, rows, statements, paced)
        return existing
    # On the loop's own thread (SQLAlchemy's greenlet): a pause would stop the loop.
    return await connection.run_sync(
        lambda sync: _sqlite_write(sync.connection.dbapi_connection, ids, rows, statements)
    )


@dataclass(frozen=True, slots=True)
class _Pacing:
    """How `_sqlite_write` spreads its statements: `rows` per `executemany`, then a sleep."""

    rows: int
    pause_s: float


def _thread_pacing(step: int) -> _Pacing:
    """`THREAD_SLICE_ROWS` for a plan of `SLICE_ROWS` records a loop slice, in proportion
    for a writer that has fallen behind (larger steps: fewer pauses per row)."""
    return _Pacing(max(THREAD_SLICE_ROWS * step // SLICE_ROWS, 1), THREAD_PAUSE_S)


def _thread_of(driver: Any) -> Callable[..., Any] | None:
    """`run(function, *args)`: `function(sqlite3_connection, *args)` in aiosqlite's thread."""
    execute, sqlite_connection = getattr(driver, "_execute", None), getattr(driver, "_conn", None)
    if execute is None or sqlite_connection is None:
        return None
    return lambda function, *args: execute(function, sqlite_connection, *args)


def _sqlite_write(
    dbapi: Any,
    ids: list[str],
    rows: Rows,
    statements: list[Statement],
    paced: _Pacing | None = None,
) -> set[str]:
    """The ids already stored; if none, insert the rows and run the statements.

    Runs in the connection's thread: C calls only. sqlite3's `executemany` binds a row
    (holding the interpreter lock for microseconds) and lets go of it while SQLite steps.
    `BEGIN IMMEDIATE` takes the write lock before the look-up, so the ids cannot appear
    meanwhile; the insert's row count checks it anyway.
    """
    cursor = dbapi.cursor()
    try:
        if getattr(dbapi, "in_transaction", True) is False:
            cursor.execute("BEGIN IMMEDIATE")
        existing: set[str] = set()
        for start in range(0, len(ids), SQLITE_IDS_PER_LOOKUP):
            chunk = ids[start : start + SQLITE_IDS_PER_LOOKUP]
            cursor.execute(_existing_sql(len(chunk)), chunk)
            existing.update(row[0] for row in cursor.fetchall())
        if existing:
            return existing
        inserted = _execute_paced(cursor, _sqlite_insert_one(), rows, paced)
        if inserted != len(rows):
            raise LedgerRaceError(f"{len(rows) - inserted} request ids appeared meanwhile")
        for sql, statement_rows in statements:
            _execute_paced(cursor, sql, statement_rows, paced)
        return existing
    finally:
        cursor.close()


def _execute_paced(cursor: Any, sql: str, rows: Rows, paced: _Pacing | None) -> int:
    """`executemany` of `rows`, a slice at a time with a sleep before each but the first;
    return the rows changed.

    A long `executemany` keeps a loop that woke meanwhile waiting to its end (4-5 ms per
    flush at concurrency 1): it lets go of the interpreter lock while SQLite steps a row,
    but takes it back before the loop's thread, woken on the same core, gets to run, and a
    waiter that sees the lock change hands does not ask for it. A sleep hands both over.
    """
    if paced is None or len(rows) <= paced.rows:
        cursor.executemany(sql, rows)
        return int(cursor.rowcount)
    changed = 0
    for start in range(0, len(rows), paced.rows):
        if start:
            time.sleep(paced.pause_s)
        cursor.executemany(sql, rows[start : start + paced.rows])
        changed += cursor.rowcount
    return changed


SQLITE_IDS_PER_LOOKUP = 500


@cache
def _existing_sql(count: int) -> str:
    return f"SELECT id FROM requests WHERE id IN ({', '.join('?' * count)})"


@cache
def _sqlite_insert_one() -> str:
    """One request row; `executemany` runs it per row (no RETURNING: ids are looked up)."""
    columns = store._REQUEST_COLUMNS
    return (
        f"INSERT INTO requests ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        " ON CONFLICT (id) DO NOTHING"
    )
