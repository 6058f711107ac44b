"""The SQLite thread writes a flush a slice at a time, sleeping between slices.

(Where the connection takes the loop's thread, as a file database's does, the rows are
written on the loop instead: tests/ledger/test_flush_loop.py. This thread's path stays
for a connection that checks its thread, an in-memory database.)

A flush's rows went to SQLite in one `executemany` per statement (4-5 ms of the
database thread at concurrency 1), and a loop that woke meanwhile waited to its end
(gateway.ledger.batch `_execute_paced`). The slices must store exactly what one call
stored, count the rows the same way (the insert's count is the replay check), and never
sleep on the loop's own thread.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from test_ledger_driver_sql import _clear, _dump, _records, _through_driver, _through_sqlalchemy

from gateway.ledger import batch


class _Cursor:
    """A sqlite3 cursor that remembers how many rows each `executemany` got."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.cursor = cursor
        self.calls: list[int] = []

    def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.calls.append(len(rows))
        self.cursor.executemany(sql, rows)

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


def _table() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(2, "old"), (7, "old")])
    return connection


INSERT = "INSERT INTO t VALUES (?, ?) ON CONFLICT (id) DO NOTHING"


def test_slices_with_a_pause_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(batch.time, "sleep", pauses.append)
    connection = _table()
    cursor = _Cursor(connection.cursor())
    rows = [(i, f"v{i}") for i in range(10)]
    changed = batch._execute_paced(cursor, INSERT, rows, batch._Pacing(3, 0.25))
    assert cursor.calls == [3, 3, 3, 1]
    assert pauses == [0.25, 0.25, 0.25]
    assert changed == 8  # 2 and 7 were there: counted as one executemany counts them
    stored = connection.execute("SELECT id, v FROM t ORDER BY id").fetchall()
    assert stored == [(i, "old" if i in (2, 7) else f"v{i}") for i in range(10)]


def test_few_rows_or_no_pacing_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch.time, "sleep", _no_sleep)
    rows = [(i, "x") for i in range(10, 14)]
    for paced in (None, batch._Pacing(4, 0.25), batch._Pacing(100, 0.25)):
        cursor = _Cursor(_table().cursor())
        assert batch._execute_paced(cursor, INSERT, rows, paced) == 4
        assert cursor.calls == [4]


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s")


def test_thread_slice_grows_with_the_plans_step(monkeypatch: pytest.MonkeyPatch) -> None:
    base = batch.THREAD_SLICE_ROWS
    assert batch._thread_pacing(batch.SLICE_ROWS) == batch._Pacing(base, batch.THREAD_PAUSE_S)
    assert batch._thread_pacing(batch.SLICE_ROWS * 4).rows == base * 4  # a writer behind
    monkeypatch.setattr(batch, "SLICE_ROWS", base * 2)
    assert batch._thread_pacing(1).rows == 1


async def test_paced_flush_stores_what_sqlalchemy_stored(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices of 4 rows (and pauses counted) store the rows, tasks and rollups that
    SQLAlchemy's own execute stored; a replay of the same records writes nothing. (The
    thread's path: a connection that refuses the loop's thread, see test_flush_loop.)"""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")
    monkeypatch.setattr(batch, "_loop_cursor", lambda driver: None)
    pauses: list[float] = []
    monkeypatch.setattr(batch, "THREAD_SLICE_ROWS", 4)
    monkeypatch.setattr(batch.time, "sleep", pauses.append)
    records = _records("s", 61)
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, records)
        expected = await _dump(connection)
        await _clear(connection)
    assert not pauses
    async with engine.begin() as connection:
        assert await _through_driver(connection, records) == len(records)
        assert len(pauses) >= 15  # the 61 request rows alone: 16 slices
        assert await _through_driver(connection, records) == 0
        assert await _dump(connection) == expected


async def test_no_pause_on_the_loops_thread(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without aiosqlite's queue the statements run on the loop's thread: never paced."""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")
    monkeypatch.setattr(batch, "_thread_of", lambda driver: None)
    monkeypatch.setattr(batch, "THREAD_SLICE_ROWS", 4)
    monkeypatch.setattr(batch.time, "sleep", _no_sleep)
    records = _records("n", 40)
    async with engine.begin() as connection:
        assert await _through_driver(connection, records) == len(records)
