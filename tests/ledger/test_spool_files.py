"""The spool's segment files: written whole through a descriptor, the directory made when missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from ledger_db import WriterFactory
from ledger_helpers import count_requests, record
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger.records import RequestRecord
from gateway.ledger.spool import Spool, encode


def _lines(count: int, task: str = "spool-files") -> tuple[list[RequestRecord], list[bytes]]:
    records = [record(task, request_id=f"r{i}") for i in range(count)]
    return records, [encode(item) for item in records]


def test_the_first_segment_makes_the_directory(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "not" / "yet" / "there")
    records, lines = _lines(3)
    segment = spool.write_encoded(lines, [])
    assert segment.path.parent == spool.directory and segment.entries == 3
    assert spool.read(segment) == records


def test_a_large_segment_is_the_lines_whole_and_no_temporary_file_stays(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    records, lines = _lines(3_000)  # ~3 MB: more than one write of a pipe, one of a file
    segment = spool.write_encoded(lines, [])
    assert segment.path.read_bytes() == b"".join(lines)
    assert [path.name for path in spool.directory.iterdir()] == [segment.path.name]
    assert spool.read(segment) == records
    assert [found.path for found in spool.leftovers()] == [segment.path]


def test_a_removed_spool_directory_is_made_again(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.write_encoded(_lines(2)[1], [])
    shutil.rmtree(spool.directory)
    records, lines = _lines(4, "after-removal")
    segment = spool.write_encoded(lines, [])
    assert spool.read(segment) == records
    assert [found.entries for found in spool.leftovers()] == [4]


async def test_the_writer_stores_what_follows_a_removed_spool_directory(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    writer = make_writer(flush_interval=60.0)  # flushed by hand below
    await writer.start()
    writer.submit(record("before", request_id="b0"))
    assert await writer.flush()
    shutil.rmtree(spool_dir)
    for i in range(3):
        writer.submit(record("after", request_id=f"a{i}"))
    assert await writer.flush()
    assert writer.spool_failures == 0
    assert await count_requests(engine) == 4
    await writer.close()
    assert sorted(spool_dir.glob("*.jsonl")) == []
