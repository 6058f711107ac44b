"""A segment's entries are applied from memory, unless its file is gone (a sibling applied it)."""

from __future__ import annotations

from pathlib import Path

from ledger_db import WriterFactory
from ledger_helpers import count_requests, record
from sqlalchemy.ext.asyncio import AsyncEngine


async def test_kept_entries_are_applied_and_a_segment_gone_from_disk_is_not(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    writer = make_writer()  # not started: the test moves entries through the loops' steps
    writer.submit(record("kept-task", request_id="req-kept"))
    assert await writer._spool_pending()
    (log,) = spool_dir.glob("*.jsonl")
    assert await writer._drain()
    assert writer.rows_written == 1 and await count_requests(engine) == 1
    assert list(spool_dir.glob("*.jsonl")) == [log]  # kept for the next segments
    assert writer.spool.idle_log(0.0) == log  # deleted once committed and idle
    writer.spool.remove(log)
    assert not list(spool_dir.glob("*.jsonl"))

    writer.submit(record("gone-task", request_id="req-gone"))
    assert await writer._spool_pending()
    for path in spool_dir.glob("*.jsonl"):
        path.unlink()  # what another worker's replay does once it has committed the segment
    assert await writer._drain()
    assert writer.rows_written == 1 and await count_requests(engine) == 1  # not applied twice
