"""On a SQLite file the flush's rows are written on the loop's own thread, a short slice
at a time between the loop's other work (gateway.ledger.batch `_on_loop`, `turn`).

aiosqlite's thread writing them made a request that woke meanwhile wait for the
interpreter lock and the core (a GIL convoy, docs/performance.md). Here: the slices
store exactly what SQLAlchemy's own execute stored, count the insert's rows the same way
(the replay check), leave the loop its turns between slices, and keep what may block
(`BEGIN IMMEDIATE`, the look-up) in aiosqlite's thread. No timed assertion: the time
budgets are set so that every slice is one row and every turn counts as quiet (or busy).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from test_ledger_driver_sql import _clear, _dump, _records, _through_driver, _through_sqlalchemy

from gateway.ledger import batch


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s")


def _one_row_slices(monkeypatch: pytest.MonkeyPatch, quiet: bool = True) -> None:
    """Every slice one row (its budget spent at once); every turn quiet, or none."""
    monkeypatch.setattr(batch, "LOOP_SLICE_S", 0.0)
    monkeypatch.setattr(batch, "QUIET_TURN_S", 1e9 if quiet else 0.0)


async def test_loop_flush_stores_what_sqlalchemy_stored(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-row slices on the loop's thread store the rows, tasks and rollups SQLAlchemy
    stored; the write lock and the look-up are taken in aiosqlite's thread; no thread
    sleeps; a replay of the same records writes nothing."""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")
    _one_row_slices(monkeypatch)
    monkeypatch.setattr(batch.time, "sleep", _no_sleep)
    loop_thread = threading.get_ident()
    slices: list[int] = []
    look_ups: list[int] = []
    rows_until, begin = batch._rows_until, batch._begin_and_look_up

    def counted(rows: Any, start: int, deadline: float, taken: list[int]) -> Iterator[Any]:
        slices.append(threading.get_ident())
        return rows_until(rows, start, deadline, taken)

    def begin_seen(dbapi: Any, ids: list[str]) -> set[str]:
        look_ups.append(threading.get_ident())
        return begin(dbapi, ids)

    monkeypatch.setattr(batch, "_rows_until", counted)
    monkeypatch.setattr(batch, "_begin_and_look_up", begin_seen)
    records = _records("l", 61)
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, records)
        expected = await _dump(connection)
        await _clear(connection)
    assert not slices
    async with engine.begin() as connection:
        assert await _through_driver(connection, records) == len(records)
        assert len(slices) >= 2 * len(records)  # the request rows and the task rows, one each
        assert set(slices) == {loop_thread}
        assert look_ups and loop_thread not in look_ups
        written = len(slices)
        assert await _through_driver(connection, records) == 0  # a replay: found, not written
        assert len(slices) == written
        assert await _dump(connection) == expected


async def test_the_loop_runs_between_slices(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another task gets a turn of the loop before every slice: the write never holds the
    loop for more than a slice."""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")
    _one_row_slices(monkeypatch)
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    slices = 0
    rows_until = batch._rows_until

    def counted(rows: Any, start: int, deadline: float, taken: list[int]) -> Iterator[Any]:
        nonlocal slices
        slices += 1
        return rows_until(rows, start, deadline, taken)

    monkeypatch.setattr(batch, "_rows_until", counted)
    records = _records("t", 40)
    task = asyncio.create_task(ticker())
    try:
        async with engine.begin() as connection:
            assert await _through_driver(connection, records) == len(records)
    finally:
        stop = True
        await task
    assert slices >= 2 * len(records)
    assert ticks >= slices


async def test_a_busy_loop_gets_a_bounded_share() -> None:
    """Turns that ran something else: the slice waits until other work has had
    `MAX_DEFER_S` of the loop's CPU time, then gets `BUSY_SHARE` of it (up to
    `MAX_SLICE_S`); a quiet turn: `LOOP_SLICE_S` at once."""
    ticks = 0
    stop = False

    async def busy() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(busy())
    saved = batch.QUIET_TURN_S, batch.MAX_DEFER_S
    try:
        batch.QUIET_TURN_S, batch.MAX_DEFER_S = 0.0, 0.002  # no turn is quiet
        budget = await batch.turn()
        assert 0.002 * batch.BUSY_SHARE <= budget <= batch.MAX_SLICE_S
        assert ticks >= 2
        batch.QUIET_TURN_S = 1e9  # every turn is quiet
        assert await batch.turn() == batch.LOOP_SLICE_S
    finally:
        batch.QUIET_TURN_S, batch.MAX_DEFER_S = saved
        stop = True
        await task


async def test_on_loop_counts_like_one_executemany(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-row slices change the rows one `executemany` changes and count them the same
    way; an insert that changes fewer rows than expected is a race (retried)."""
    _one_row_slices(monkeypatch)
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(2, "old"), (7, "old")])
    insert = "INSERT INTO t VALUES (?, ?) ON CONFLICT (id) DO NOTHING"
    cursor = connection.cursor()
    await batch._on_loop(cursor, insert, [(i, f"v{i}") for i in range(10, 20)], 10)
    with pytest.raises(batch.LedgerRaceError, match="2 request ids"):
        await batch._on_loop(cursor, insert, [(i, f"w{i}") for i in range(10)], 10)
    stored = dict(connection.execute("SELECT id, v FROM t").fetchall())
    assert stored == {
        i: "old" if i in (2, 7) else f"w{i}" if i < 10 else f"v{i}" for i in range(20)
    }
    await batch._on_loop(cursor, insert, [])  # nothing to write: no statement


def test_a_connection_that_checks_its_thread_stays_in_its_thread() -> None:
    """`check_same_thread` (sqlite3's default; an in-memory database keeps it): no cursor
    on the loop's thread, so the flush goes to aiosqlite's thread (test_flush_paced)."""
    made: dict[bool, sqlite3.Connection] = {}

    def connect() -> None:
        for check in (True, False):
            made[check] = sqlite3.connect(":memory:", check_same_thread=check)

    thread = threading.Thread(target=connect)
    thread.start()
    thread.join()

    class Driver:
        def __init__(self, connection: sqlite3.Connection) -> None:
            self._conn = connection

    assert batch._loop_cursor(Driver(made[True])) is None
    cursor = batch._loop_cursor(Driver(made[False]))
    assert cursor is not None
    assert cursor.execute("SELECT 1").fetchall() == [(1,)]
