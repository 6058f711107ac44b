"""A flush's statements and parameters, built before its transaction, a slice at a time.

A flush runs in the serving process beside the requests. Built in one go, a batch of a
few hundred rows held the event loop for several milliseconds (the task rows' dicts and
bind processors alone 5 ms for 140 rows), and a multi-row `INSERT ... VALUES` bound tens
of thousands of parameters in one C call in aiosqlite's thread, holding the interpreter
lock throughout (the switch interval cannot interrupt a C call): every request that woke
meanwhile waited (bench/ledger_stall.py). Here the Python work runs on the loop in
short slices (`pause`, `turn`: a slice runs in a quiet turn of the loop, ~`LOOP_SLICE_S`
long, or gets a bounded share of a busy one), and the database gets only tuples. On a
SQLite file the rows go in with sqlite3's `executemany` on the loop's own thread, in the
same slices (`_on_loop`): aiosqlite's thread writing them made a request that woke
meanwhile wait for the interpreter lock and the core (a GIL convoy, even with its slices
paced by short sleeps, `_execute_paced`, which stays for a connection that checks its
thread). Taking the write lock (which may wait for a sibling worker) and COMMIT stay in
aiosqlite's thread. On PostgreSQL the request and task rows go as one JSON text each
(`gateway.ledger.pgjson`).

The rows are built assuming every request row is new (a replayed segment is the rare
case): if the database already holds some ids, the task and rollup rows are built again
for the rows actually written, before anything is added.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from operator import attrgetter, itemgetter
from typing import Any

import orjson
from sqlalchemy import Boolean
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

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

SLICE_ROWS = 4
"""Records planned between two looks at the slice's time (`pause`): ~15-40 us of Python
here; the loop gets a turn once a slice has had its budget."""

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


LOOP_SLICE_S = 1e-4
"""How long a slice of the flush's work on the loop (planning, writing rows to SQLite: at
least a row) runs between two turns of the loop when the loop is idle: a request that
arrives meanwhile waits about this long (`pause`, `_on_loop`)."""

QUIET_TURN_S = 15e-6
"""A turn of the loop (`asyncio.sleep(0)` and back: ~2-3 us) that took less ran nothing
else: the loop is idle (a request, if any, waits for its upstream or its client) and a
slice may run. By the wall clock, or where that says more, by the loop's CPU time: on a
shared core a turn that was preempted is no busier, and spinning through such turns only
burns the core."""

MAX_DEFER_S = 1.5e-3
"""How much of the loop's CPU time other work may take before the flush, which gives way
to it, takes a slice anyway. Long enough that at concurrency 1, where quiet turns come
between requests, it is seldom reached (0.4 ms put a busy slice inside ~1% of requests'
busy phases: bench/ledger_intrusion.py p99 156-203 us, against 126-147 at 1.5 ms)."""

BUSY_SHARE = 0.25
"""A slice taken from a busy loop lasts this share of the loop's CPU time the other work
took meanwhile (from ~0.4 ms at `MAX_DEFER_S` up to `MAX_SLICE_S`): at high concurrency the
flush gets about a fifth of the loop and its transaction (SQLite's write lock, which sibling
workers share) stays short."""

MAX_SLICE_S = 1e-3
"""The longest slice."""

BUSY_TURNS = 2
"""Busy turns in a row after which the flush naps `BUSY_NAP_S` between looks."""

BUSY_NAP_S = 5e-4
"""The nap between looks at a busy loop (uvloop's timers round it up to 1 ms)."""


async def turn() -> float:
    """Give way to the loop (the caller's slice has just ended) until the next slice may
    run; return that slice's time budget.

    A slice runs after a quiet turn of the loop (nothing else ran), for `LOOP_SLICE_S`;
    after busy turns (napping `BUSY_NAP_S` between looks after `BUSY_TURNS` of them) it
    waits until other work has had `MAX_DEFER_S` of the loop's CPU time and then runs for
    `BUSY_SHARE` of that. At concurrency 1 the flush's work so
    lands in the loop's idle gaps (the upstream's work, the client's turnaround) and a
    request waits for one short slice at most; at high concurrency the flush takes a
    bounded share of the loop. The loop's CPU time, not the wall clock, measures the
    loop's other work (`QUIET_TURN_S`).
    """
    wall, cpu = time.perf_counter, time.thread_time
    since = used = cpu()
    yielded = wall()
    busy = 0
    while True:
        if busy >= BUSY_TURNS:
            # A nap (a timer: ~1 ms on uvloop) rather than a callback at every turn of a
            # busy loop (at high concurrency thousands a second); then one turn to look.
            await asyncio.sleep(BUSY_NAP_S)
            yielded, used = wall(), cpu()
        await asyncio.sleep(0)
        now = wall()
        if now - yielded < QUIET_TURN_S:
            return LOOP_SLICE_S  # quick by the wall clock: quiet (no system call)
        spent = cpu()
        if spent - used < QUIET_TURN_S:
            return LOOP_SLICE_S  # preempted, not busy
        others = spent - since
        if others >= MAX_DEFER_S:
            return min(others * BUSY_SHARE, MAX_SLICE_S)
        yielded, used = now, spent
        busy += 1


_slice_ends = 0.0
"""When the flush's slice of work on the loop now running has had its budget."""


async def pause() -> None:
    """Between two pieces of the flush's work on the loop: once the slice has had its
    budget, let the loop run what is ready (requests) before the next slice (`turn`)."""
    global _slice_ends
    if time.perf_counter() < _slice_ends:
        return
    budget = await turn()
    _slice_ends = time.perf_counter() + budget


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

    async def write(ids: list[str], rows: Rows, statements: list[Statement]) -> set[str]:
        return await _in_sqlite_thread(connection, ids, rows, statements, plan.step)

    return await _replaying(connection.dialect, plan, write)


_Write = Callable[[list[str], Rows, list[Statement]], Awaitable[set[str]]]
"""`write(ids, rows, statements)`: the ids already stored, or (none) the rows written."""


async def _replaying(dialect: Dialect, plan: Plan, write: _Write) -> list[RequestRecord]:
    """Write the plan's rows; where some ids are stored already (a replay), nothing was
    written: again with the rows the database lacks and their task and rollup rows."""
    records, rows, statements = plan.records, plan.rows, plan.statements
    while True:
        ids = [record.id for record in records]
        existing = await write(ids, rows, statements)
        if not existing:
            return records
        kept = [index for index, record in enumerate(records) if record.id not in existing]
        records, rows = [records[i] for i in kept], [rows[i] for i in kept]
        if not records:
            return []
        statements = await derived(dialect, records, plan.times, plan.step, rows)


async def commit_sqlite(engine: AsyncEngine, plan: Plan) -> store.BatchResult | None:
    """Apply `plan` and commit it on a SQLite file's own connection, SQLAlchemy's
    transaction left out; None where this does not apply (the caller then runs `apply` in
    `engine.begin()`): another database, a batch with task finishes (SQLAlchemy's
    statements), a connection that refuses the loop's thread (in-memory).

    The same transaction as `apply`'s on a SQLite file: `BEGIN IMMEDIATE` and the id
    look-up, then COMMIT (or ROLLBACK on any error), in aiosqlite's thread; the rows on
    the loop in slices (`_on_loop`). What it leaves out ran on the loop in single pieces
    per flush: SQLAlchemy's begin (~40 us on a quiet core) and its commit and close (~70
    us), each a piece that a request arriving meanwhile waited for. The connection is
    still the pool's, checked out for the transaction (`engine.connect()`) and returned
    after it; one that failed to roll back is invalidated. Errors are the driver's own
    (`refusal` classifies sqlite3's as it does SQLAlchemy's wrappers).
    """
    if engine.dialect.name != "sqlite" or plan.finishes or not plan.records:
        return None
    if engine.sync_engine in _thread_bound:
        return None
    async with engine.connect() as connection:
        await pause()  # the pool's check-out: a piece of its own
        raw = await connection.get_raw_connection()
        run = _thread_of(raw.driver_connection)
        cursor = _loop_cursor(raw.driver_connection) if run is not None else None
        if run is None or cursor is None:
            _thread_bound.add(engine.sync_engine)
            return None
        try:
            written = await _committed(engine.dialect, plan, run, cursor)
        except BaseException:
            cursor.close()
            if not await _rolled_back(run):
                await connection.invalidate()
            raise
        cursor.close()
    await pause()  # back from the pool's reset (a hop to aiosqlite's thread)
    return store.BatchResult(inserted=len(written), duplicates=plan.requests - len(written))


_thread_bound: weakref.WeakSet[Engine] = weakref.WeakSet()
"""Engines whose SQLite connections refuse the loop's thread (`commit_sqlite` returns None
for them without a check-out)."""


async def _committed(
    dialect: Dialect, plan: Plan, run: Callable[..., Any], cursor: Any
) -> list[RequestRecord]:
    """The plan's rows written (`_loop_write`) and committed; the records written."""

    async def write(ids: list[str], rows: Rows, statements: list[Statement]) -> set[str]:
        return await _loop_write(run, cursor, ids, rows, statements)

    written = await _replaying(dialect, plan, write)
    await pause()  # the last slice of rows has had its time: COMMIT in a turn of its own
    await run(_commit)
    await pause()  # back from aiosqlite's thread, which may finish at any moment
    return written


def _commit(dbapi: Any) -> None:
    """COMMIT, in aiosqlite's thread (WAL: it may sync the file or checkpoint)."""
    dbapi.commit()


def _rollback(dbapi: Any) -> None:
    """ROLLBACK if a transaction is open, in aiosqlite's thread."""
    if dbapi.in_transaction:
        dbapi.rollback()


async def _rolled_back(run: Callable[..., Any]) -> bool:
    """Roll the transaction back; False if even that failed (the connection is broken)."""
    try:
        await run(_rollback)
    except Exception:
        return False
    return True


async def _loop_write(
    run: Callable[..., Any], cursor: Any, ids: list[str], rows: Rows, statements: list[Statement]
) -> set[str]:
    """`BEGIN IMMEDIATE` and the look-up in aiosqlite's thread (taking the write lock may
    wait for a sibling worker's: not on the loop), then, if no id is stored, the rows on
    the loop's thread (`_on_loop`); the ids already stored."""
    existing: set[str] = await run(_begin_and_look_up, ids)
    if existing:
        return existing
    await _on_loop(cursor, _sqlite_insert_one(), rows, len(rows))
    for sql, statement_rows in statements:
        await _on_loop(cursor, sql, statement_rows)
    return existing


async def _in_sqlite_thread(
    connection: AsyncConnection,
    ids: list[str],
    rows: Rows,
    statements: list[Statement],
    step: int = SLICE_ROWS,
) -> set[str]:
    """Write the batch: the rows on the loop's own thread in short slices between its
    other work (`_on_loop`), the transaction's start and look-up in aiosqlite's thread.

    Where the connection refuses the loop's thread (`check_same_thread`: an in-memory
    database), `_sqlite_write` runs in aiosqlite's thread with one hop (its queue, as
    SQLAlchemy's aiosqlite dialect reaches it), paced for a plan of `step` records a
    slice; statement by statement on the loop where there is no such thread."""
    raw = await connection.get_raw_connection()
    run = _thread_of(raw.driver_connection)
    if run is None:
        # On the loop's own thread (SQLAlchemy's greenlet): a pause would stop the loop.
        return await connection.run_sync(
            lambda sync: _sqlite_write(sync.connection.dbapi_connection, ids, rows, statements)
        )
    cursor = _loop_cursor(raw.driver_connection)
    if cursor is None:
        paced = _thread_pacing(step)
        existing: set[str] = await run(_sqlite_write, ids, rows, statements, paced)
        return existing
    try:
        return await _loop_write(run, cursor, ids, rows, statements)
    finally:
        cursor.close()


def _loop_cursor(driver: Any) -> Any:
    """A cursor of aiosqlite's sqlite3 connection usable on the loop's thread, or None
    where the connection checks its thread (`check_same_thread`: sqlite3's default, which
    SQLAlchemy turns off for a file database). While the writer holds the connection
    for its transaction, aiosqlite's thread has nothing to run on it."""
    try:
        return driver._conn.cursor()
    except sqlite3.ProgrammingError:  # "SQLite objects created in a thread can only ..."
        return None


async def _on_loop(cursor: Any, sql: str, rows: Rows, expected: int | None = None) -> None:
    """`executemany` of `rows` on the loop's thread, a slice of `turn()`'s budget at a time
    (at least a row); with `expected`, the rows it must change (the insert's replay check).

    No sleeping thread, no hand-off of the interpreter lock: a request that arrives
    during a slice waits for its end (~`LOOP_SLICE_S`), and slices run in the loop's
    quiet turns. Nothing here waits for a lock (the transaction holds SQLite's write lock)
    or syncs a file (COMMIT, in aiosqlite's thread, does)."""
    changed = start = 0
    taken = [0]
    while start < len(rows):
        await pause()
        cursor.executemany(sql, _rows_until(rows, start, _slice_ends, taken))
        changed += cursor.rowcount
        start = taken[0]
    if expected is not None and changed != expected:
        raise LedgerRaceError(f"{expected - changed} request ids appeared meanwhile")


def _rows_until(rows: Rows, start: int, deadline: float, taken: list[int]) -> Iterator[Any]:
    """`rows[start:]` until `deadline` has passed (at least one); `taken[0]`: the index
    after the last row given."""
    clock = time.perf_counter
    for index in range(start, len(rows)):
        taken[0] = index + 1
        yield rows[index]
        if clock() >= deadline:
            return


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
    existing = _begin_and_look_up(dbapi, ids)
    if existing:
        return existing
    cursor = dbapi.cursor()
    try:
        inserted = _execute_paced(cursor, _sqlite_insert_one(), rows, paced)
        if inserted != len(rows):
            raise LedgerRaceError(f"{len(rows) - inserted} request ids appeared meanwhile")
        for sql, statement_rows in statements:
            _execute_paced(cursor, sql, statement_rows, paced)
        return existing
    finally:
        cursor.close()


def _begin_and_look_up(dbapi: Any, ids: list[str]) -> set[str]:
    """Take the write lock (`BEGIN IMMEDIATE`, unless a transaction is open) and return
    the ids already stored: the lock taken before the look-up, the ids cannot appear
    meanwhile (the insert's row count checks it anyway)."""
    cursor = dbapi.cursor()
    try:
        if getattr(dbapi, "in_transaction", True) is False:
            cursor.execute("BEGIN IMMEDIATE")
        existing: set[str] = set()
        for start in range(0, len(ids), SQLITE_IDS_PER_LOOKUP):
            chunk = ids[start : start + SQLITE_IDS_PER_LOOKUP]
            cursor.execute(_existing_sql(len(chunk)), chunk)
            existing.update(row[0] for row in cursor.fetchall())
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
