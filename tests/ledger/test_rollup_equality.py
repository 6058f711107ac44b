"""The rollups hold exactly the sums of the rows the writer stored, and every report reads
the same through them as from the rows: on SQLite, on PostgreSQL, and across the two."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ledger_db import WriterFactory, empty_database
from rollup_workload import START, assert_rollups_match_rows, base_rows, workload
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate
from gateway.ledger.explorer_queries import ExplorerFilter, outcome_stats, prefix_breaks
from gateway.ledger.queries import SPEND_GROUPS, spend, task_cost_stats, task_outcomes
from gateway.ledger.records import RequestRecord, TaskFinish
from gateway.ledger.rollup import day_of
from gateway.ledger.scope import ReadScope
from gateway.ledger.spool import Spool

Entries = list[RequestRecord | TaskFinish]
D0 = day_of(START)
WINDOWS: list[tuple[datetime | None, datetime | None]] = [
    (None, None),
    (None, START + timedelta(days=2)),
    (START + timedelta(hours=1, minutes=30), START + timedelta(days=1, hours=5, minutes=7)),
    (START + timedelta(hours=3, minutes=10), START + timedelta(hours=3, minutes=50)),
    (D0 + timedelta(days=1), D0 + timedelta(days=2)),
    (D0 + timedelta(days=1, hours=5), D0 + timedelta(days=3, hours=1, seconds=1)),
]
SCOPES = [ReadScope(), ReadScope(team="web", project="beta")]


async def _submit_all(writer: LedgerWriter, entries: Entries) -> None:
    for n, entry in enumerate(entries):
        if isinstance(entry, RequestRecord):
            writer.submit(entry)
        else:
            writer.finish_task(entry.task_id, entry.outcome, entry.at)
        if n % 25 == 0:
            await asyncio.sleep(0)  # let the loops flush mid-stream: many small batches


async def test_rollups_equal_the_rows_after_duplicates_replays_and_concurrent_writers(
    engine: AsyncEngine, make_writer: WriterFactory, tmp_path: Path
) -> None:
    entries = workload()
    records = [e for e in entries if isinstance(e, RequestRecord)]
    first, second = make_writer(spool_dir=tmp_path / "a"), make_writer(spool_dir=tmp_path / "b")
    await first.start()
    await second.start()
    # Two processes writing at once, the second resubmitting every other entry.
    await asyncio.gather(_submit_all(first, entries), _submit_all(second, entries[::2]))
    assert await first.flush() and await second.flush()
    # A crashed process's segment replayed by the next start: all already stored.
    Spool(tmp_path / "c").write(list(records[:60]))
    replayer = make_writer(spool_dir=tmp_path / "c")
    await replayer.start()
    assert await replayer.flush()
    assert replayer.rows_written == 0 and replayer.rows_duplicate == 60
    assert first.rows_written + second.rows_written == len(records)
    assert len(await base_rows(engine)) == len(records)
    await assert_rollups_match_rows(engine)


async def _reports(engine: AsyncEngine, fast: bool) -> list[Any]:
    """Every report over every window, grouping and scope, through rollups or rows."""
    answers: list[Any] = []
    for since, until in WINDOWS:
        for group in SPEND_GROUPS:
            answers.append(await spend(engine, group, since, until, use_rollups=fast))
        for scope in SCOPES:
            answers.append(await spend(engine, "model", since, until, scope=scope,
                                       use_rollups=fast))  # fmt: skip
            for group in ("team", "project"):
                answers.append(await task_outcomes(engine, group, since, until, scope=scope,
                                                   use_rollups=fast))  # fmt: skip
                answers.append(await task_cost_stats(engine, group, since, until, scope=scope,
                                                     sql_percentiles=fast))  # fmt: skip
            # Ranked percentiles on PostgreSQL, sorted in Python on SQLite (compared below).
            window = ExplorerFilter(scope=scope, since=since, until=until)
            answers.append(await outcome_stats(engine, window))
            for model in (None, "smart"):
                chosen = ExplorerFilter(scope=scope, since=since, until=until, model=model)
                answers.append(await prefix_breaks(engine, chosen, use_rollups=fast))
        for group in ("team", "project"):
            answers.append(await task_cost_stats(engine, group, since, until,
                                                 include_abandoned=True,
                                                 sql_percentiles=fast))  # fmt: skip
    return answers


async def _fill(engine: AsyncEngine, spool: Path) -> None:
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool, flush_interval=0.02,
                                               idle_timeout=None))  # fmt: skip
    await writer.start()
    await _submit_all(writer, workload())
    await writer.close()


async def test_reports_read_the_same_through_rollups_and_rows(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    await _fill(engine, tmp_path / "spool")
    fast, slow = await _reports(engine, True), await _reports(engine, False)
    assert fast == slow
    assert any(row.untasked_requests for answer in fast for row in answer
               if hasattr(row, "untasked_requests"))  # fmt: skip
    assert sum(len(answer) for answer in fast) > 150  # the windows are not empty
    assert any(answer[1] for answer in fast if isinstance(answer, tuple))  # break causes


@pytest.mark.postgres
async def test_sqlite_and_postgresql_answer_the_same(tmp_path: Path) -> None:
    answers = []
    for dialect in ("sqlite", "postgresql"):
        async with empty_database(dialect, tmp_path / dialect) as url:
            await migrate(url)
            engine = make_engine(url)
            try:
                await _fill(engine, tmp_path / dialect / "spool")
                answers.append(await _reports(engine, True))
            finally:
                await engine.dispose()
    assert answers[0] == answers[1]
