"""One large flush: rollups grouped once per batch and tasks summed per group stay exact.

The writer groups a batch by hour and every rollup dimension before it upserts one row per
rollup key, sums each task's records in one go, and spools entries straight from their
dataclasses; these tests put many records per key, task and hour into a single flush (on
SQLite and on PostgreSQL), replay it, and compare with the rows and with `to_json`.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import orjson
from ledger_db import WriterFactory
from ledger_helpers import T0, record
from rollup_workload import assert_rollups_match_rows
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger.records import RequestRecord, TaskFinish
from gateway.ledger.spool import Spool, decode, encode
from gateway.ledger.store import REQUESTS, TASKS


def _batch() -> list[RequestRecord]:
    """Three tasks of several attempts, and untasked requests, over two days' hour edges."""
    records = []
    for n in range(60):
        task = f"task-{n % 3}"
        at = T0 + timedelta(minutes=37 * n)  # crosses hours and, after ~20 rows, midnight
        records.append(
            record(
                task,
                request_id=f"req-{n:03d}",  # not task-<n>: a task of its own
                attempt=n // 3,
                model_alias=("smart", "fast")[n % 2],
                task_step=None if n % 4 == 0 else f"step-{n % 3}",
                step_kind=None if n % 5 == 0 else "plan",
                prefix_status=(None, "fresh", "kept", "broken")[n % 4],
                expected_cached_tokens=None if n % 4 == 0 else n,
                prefix_lost_usd=None if n % 4 != 3 else Decimal("0.0000001") * n,
                ttft_ms=None if n < 3 else 100 + n,
                cost_total=Decimal("0.0000000001") * (n + 1) + Decimal("0.00243"),
                created_at=at,
            )
        )
    for n in range(20):  # requests without a task id: a wrapper task each
        token = f"u{n}"
        at = T0 + timedelta(minutes=53 * n)
        records.append(record(f"task-{token}", request_id=f"req-{token}", created_at=at))
    return records


async def _tasks(engine: AsyncEngine) -> dict[str, tuple[object, ...]]:
    async with engine.connect() as connection:
        rows = (await connection.execute(select(TASKS))).all()
    return {row.task_id: tuple(row) for row in rows}


async def test_one_flush_of_many_rows_per_key_task_and_hour_is_exact_and_replays_idempotently(
    engine: AsyncEngine, make_writer: WriterFactory, tmp_path: Path
) -> None:
    records = _batch()
    writer = make_writer(flush_interval=3600.0)
    await writer.start()
    for item in records:
        writer.submit(item)
    assert await writer.flush()
    await writer.close()
    assert writer.rows_written == len(records)
    await assert_rollups_match_rows(engine)
    tasks = await _tasks(engine)
    async with engine.connect() as connection:
        row = (await connection.execute(select(TASKS).where(TASKS.c.task_id == "task-1"))).one()
    mine = [item for item in records if item.task_id == "task-1"]
    assert row.request_count == len(mine) == 20
    assert row.cost_total == sum((item.cost_total for item in mine), Decimal(0))
    assert row.completion_tokens == sum(item.completion_tokens for item in mine)
    # The earliest attempt (n=1) has no ttft: the first one that has one is kept.
    assert row.first_ttft_ms == 104
    assert (row.started_at, row.last_activity_at) == (mine[0].created_at, mine[-1].created_at)
    assert not row.untasked and row.status == "open"
    untasked = tasks["task-u3"]
    assert untasked[TASKS.c.keys().index("status")] == "untasked"

    # A crash after the commit, before the delete: the next process replays the same rows.
    Spool(tmp_path / "replay").write(list(records))
    replayer = make_writer(spool_dir=tmp_path / "replay")
    await replayer.start()
    assert await replayer.flush()
    await replayer.close()
    assert (replayer.rows_written, replayer.rows_duplicate) == (0, len(records))
    await assert_rollups_match_rows(engine)
    assert await _tasks(engine) == tasks
    async with engine.connect() as connection:
        count = len((await connection.execute(select(REQUESTS.c.id))).all())
    assert count == len(records)


def test_spool_lines_are_the_to_json_of_each_entry_and_decode_back() -> None:
    full = record(
        "task-9",
        task_step="s",
        step_kind="k",
        caller="c",
        error_type="e",
        decode_tps=12.5,
        expected_cached_tokens=7,
        prefix_status="broken",
        tier_confirmed=True,
        prefix_lost_usd=Decimal("0.0000000003"),
        created_at=T0,  # no microseconds: isoformat and orjson must agree on the short form
    )
    entries = [record("task-8"), full, TaskFinish("task-9", "success", T0)]
    for entry in entries:
        line = encode(entry)
        kind = "request" if isinstance(entry, RequestRecord) else "finish"
        assert orjson.loads(line) == {"kind": kind, "data": entry.to_json()}
        assert decode(line) == entry
