"""On a SQLite file the flush commits on the pool's connection without SQLAlchemy's
transaction (gateway.ledger.batch `commit_sqlite`): the same rows, tasks and rollups as
`engine.begin()` + `apply`, one transaction (rolled back on any error, the connection
usable after), a replay that writes nothing; the other cases keep SQLAlchemy's path.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from test_ledger_driver_sql import _clear, _dump, _records, _through_sqlalchemy

from gateway.ledger import batch, make_engine, migrate
from gateway.ledger.records import TaskFinish, utcnow
from gateway.ledger.refusal import apply_salvaging


def _sqlite_only(engine: AsyncEngine) -> None:
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite only")


async def _plan(engine: AsyncEngine, entries: list[Any]) -> batch.Plan:
    return await batch.plan(engine.dialect, entries)


async def test_raw_commit_stores_what_sqlalchemy_stored(engine: AsyncEngine) -> None:
    """The same stored rows as SQLAlchemy's own statements; COMMIT in aiosqlite's thread;
    a replay of the same records (and some new ones) writes only the new ones."""
    if engine.dialect.name != "sqlite":
        assert await batch.commit_sqlite(engine, await _plan(engine, _records("p", 3))) is None
        return
    records = _records("w", 61)
    async with engine.begin() as connection:
        await _through_sqlalchemy(connection, records)
        expected = await _dump(connection)
        await _clear(connection)
    loop_thread = threading.get_ident()
    commits: list[int] = []
    commit = batch._commit

    def seen(dbapi: Any) -> None:
        commits.append(threading.get_ident())
        commit(dbapi)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "_commit", seen)
        result = await batch.commit_sqlite(engine, await _plan(engine, records[:40]))
        assert result is not None and (result.inserted, result.duplicates) == (40, 0)
        result = await batch.commit_sqlite(engine, await _plan(engine, records + records[:3]))
    assert result is not None and (result.inserted, result.duplicates) == (21, 43)
    assert len(commits) == 2 and loop_thread not in commits
    async with engine.connect() as connection:
        assert await _dump(connection) == expected


async def test_an_error_rolls_the_whole_batch_back(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error after some rows were written leaves nothing stored, no transaction open
    on the pool's connection (the next batch commits), and is the driver's own."""
    _sqlite_only(engine)
    records = _records("e", 20)
    plan = await _plan(engine, records)
    sql, rows = plan.statements[-1]
    plan.statements[-1] = (sql, [*rows[:-1], (2**70,) * len(rows[-1])])  # sqlite3 refuses
    with pytest.raises(OverflowError):
        await batch.commit_sqlite(engine, plan)
    async with engine.connect() as connection:
        assert all(not rows for rows in (await _dump(connection)).values())
    result = await batch.commit_sqlite(engine, await _plan(engine, records))
    assert result is not None and result.inserted == 20


async def test_a_refused_row_is_set_aside_alone(engine: AsyncEngine) -> None:
    """`apply_salvaging` bisects around a row sqlite3 refuses (an integer over 64 bits)
    on the raw path as on SQLAlchemy's: every other row is stored."""
    _sqlite_only(engine)
    records = _records("b", 9)
    bad = records[4]
    object.__setattr__(bad, "completion_tokens", 2**70)
    salvage = await apply_salvaging(engine, records)
    assert [refusal.entry for refusal in salvage.refused] == [bad]
    assert salvage.result.inserted == 8
    assert "OverflowError" in salvage.refused[0].reason


async def test_finishes_and_in_memory_keep_sqlalchemys_path(
    engine: AsyncEngine, tmp_path: Any
) -> None:
    """A batch with a task finish, and an in-memory database (its connection refuses the
    loop's thread), are left to `engine.begin()` + `apply` (None)."""
    _sqlite_only(engine)
    finish = TaskFinish("task-x", "success", utcnow())
    assert await batch.commit_sqlite(engine, await _plan(engine, [finish])) is None
    with_finish = await _plan(engine, [*_records("f", 2), finish])
    assert await batch.commit_sqlite(engine, with_finish) is None
    memory = make_engine("sqlite+aiosqlite://")
    try:
        await migrate("sqlite+aiosqlite://")
        plan = await _plan(memory, _records("m", 2))
        assert await batch.commit_sqlite(memory, plan) is None
        assert memory.sync_engine in batch._thread_bound
    finally:
        await memory.dispose()
