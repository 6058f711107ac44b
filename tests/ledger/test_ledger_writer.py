"""The batched writer and its spool, on SQLite files and on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from ledger_db import WriterFactory
from ledger_helpers import T0, count_requests, record, sums, wait_until
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig, get_task, make_engine
from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord, TaskFinish
from gateway.ledger.spool import Spool
from gateway.ledger.store import apply_batch


def segments(spool_dir: Path) -> list[Path]:
    """List the spool segments waiting on disk."""
    return sorted(spool_dir.glob("*.jsonl"))


async def assert_task_totals(
    engine: AsyncEngine, task_id: str, records: list[RequestRecord]
) -> None:
    """Check a task's aggregate row against Python sums of its records, exactly."""
    detail = await get_task(engine, task_id)
    assert detail is not None
    expected = sums(records)
    for name in (*TOKEN_FIELDS, *COST_FIELDS):
        assert getattr(detail.task, name) == expected[name], name
    assert detail.task.request_count == len(records) == len(detail.requests)
    assert detail.task.started_at == min(r.created_at for r in records)
    assert detail.task.last_activity_at == max(r.created_at for r in records)


async def test_concurrent_submissions_all_land_with_exact_sums(
    make_writer: WriterFactory, engine: AsyncEngine
) -> None:
    writer = make_writer()
    await writer.start()
    submitted: list[RequestRecord] = []

    async def client(n: int) -> None:
        for i in range(10):
            item = record(
                f"task-{n % 10}",
                request_id=f"req-{n}-{i}",
                attempt=i % 3,
                prompt_tokens=1000 + n * 10 + i,
                completion_tokens=n + i,
                cost_input=Decimal(f"0.00{n:02d}{i}7"),
                cost_output=Decimal(f"0.000000{i}{n:02d}3"),
                cost_total=Decimal(f"0.00{n:02d}{i}7") + Decimal(f"0.000000{i}{n:02d}3"),
                created_at=T0 + timedelta(milliseconds=n * 10 + i),
                ttft_ms=100 + n,
            )
            submitted.append(item)
            writer.submit(item)
            await asyncio.sleep(0.001 * (i % 3))  # interleave clients and flushes

    await asyncio.gather(*(client(n) for n in range(50)))
    await wait_until(lambda: writer.rows_written == 500)
    assert await count_requests(engine) == 500
    for t in range(10):
        await assert_task_totals(
            engine, f"task-{t}", [r for r in submitted if r.task_id == f"task-{t}"]
        )
    stats = writer.stats()
    assert (stats.records_submitted, stats.pending, stats.spooled) == (500, 0, 0)
    assert stats.flush_failures == 0 and stats.last_flush_seconds > 0
    await wait_until(lambda: segments(writer.spool.directory) == [])  # the idle log deleted


async def test_close_flushes_everything(make_writer: WriterFactory, engine: AsyncEngine) -> None:
    writer = make_writer(flush_interval=60.0)  # nothing flushes on its own during the test
    await writer.start()
    batch = [record("closing", request_id=f"r{i}") for i in range(25)]
    for item in batch:
        writer.submit(item)
    writer.finish_task("closing", "success")
    assert await count_requests(engine) == 0
    await writer.close()
    assert await count_requests(engine) == 25
    await assert_task_totals(engine, "closing", batch)
    detail = await get_task(engine, "closing")
    assert detail is not None and detail.task.status == "success"
    assert segments(writer.spool.directory) == []


async def test_replay_of_a_crashed_writers_spool_adds_rows_once(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    batch = [record("crashed", request_id=f"r{i}") for i in range(30)]
    crashed = Spool(spool_dir)
    first = crashed.write(list(batch[:10]))
    crashed.write([*batch[10:], TaskFinish("crashed", "success")])
    # The crash came after the first segment's commit and before its deletion.
    async with engine.begin() as connection:
        await apply_batch(connection, crashed.read(first))
    writer = make_writer()
    await writer.start()
    await wait_until(lambda: writer.spooled == 0)
    assert await count_requests(engine) == 30
    assert (writer.rows_written, writer.rows_duplicate) == (20, 10)
    await assert_task_totals(engine, "crashed", batch)
    assert segments(spool_dir) == []


KILLED_WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from decimal import Decimal
from gateway.ledger import LedgerWriter, RequestRecord, WriterConfig, make_engine

async def main() -> None:
    # Nothing listens on port 1: every database write fails, so all stays in the spool.
    engine = make_engine("postgresql://postgres@127.0.0.1:1/none", connect_args={"timeout": 1})
    config = WriterConfig(spool_dir=sys.argv[1], flush_interval=0.02, retry_initial=30)
    writer = LedgerWriter(engine, config)
    await writer.start()
    for i in range(40):
        writer.submit(RequestRecord(
            request_id=f"r{i}", task_id="killed", team="t", project="p", model_alias="m",
            id=f"killed-{i}", cost_total=Decimal("0.0000000003"),
        ))
    while writer.spooled < 40:  # on disk, fsynced: what kill -9 cannot take away
        await asyncio.sleep(0.01)
    print("spooled", flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_kill_9_keeps_what_was_spooled(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path, repo_root: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_WRITER, str(spool_dir), env=env, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=15)
    finally:
        process.kill()  # SIGKILL: no close(), no flush, no atexit
        await process.wait()
    assert line == b"spooled\n"
    writer = make_writer()
    await writer.start()
    await wait_until(lambda: writer.spooled == 0)
    assert await count_requests(engine) == 40
    detail = await get_task(engine, "killed")
    assert detail is not None
    assert detail.task.cost_total == Decimal("0.000000012")


async def test_a_segment_the_database_refuses_is_set_aside(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    spool = Spool(spool_dir)
    spool.write([record("bad", team=None)])  # NOT NULL violation: never insertable
    good = [record("good", request_id=f"g{i}") for i in range(3)]
    spool.write(list(good))
    writer = make_writer()
    await writer.start()
    await wait_until(lambda: writer.spooled == 0)
    assert writer.segments_rejected == 1
    assert len(list((spool_dir / "rejected").glob("*.jsonl"))) == 1
    assert await count_requests(engine) == 3


async def test_submit_after_close_is_spooled_for_the_next_start(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    writer = make_writer()
    await writer.start()
    await writer.close()
    writer.submit(record("late"))
    assert len(segments(spool_dir)) == 1
    successor = make_writer()
    await successor.start()
    await wait_until(lambda: successor.spooled == 0)
    assert await count_requests(engine) == 1


async def test_submit_is_a_plain_append(tmp_path: Path) -> None:
    # No database behind this engine (no tables): submit must not care.
    engine = make_engine(f"sqlite:///{tmp_path / 'unmigrated.db'}")
    writer = LedgerWriter(engine, WriterConfig(spool_dir=tmp_path / "spool", close_timeout=0))
    items = [record("fast", request_id=f"r{i}") for i in range(2_000)]
    started = time.perf_counter()
    for item in items:
        writer.submit(item)
    elapsed = time.perf_counter() - started
    # Nothing ran in between: no await, no I/O, everything is still in memory.
    assert writer.pending == 2_000
    assert elapsed < 0.5
    await writer.close()  # the database refuses; the entries stay in the spool
    assert writer.spooled == 2_000
    await engine.dispose()
