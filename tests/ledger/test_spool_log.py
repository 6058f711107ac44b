"""The spool's log: segments appended in place as checksummed frames, one locked log per process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ledger_db import WriterFactory
from ledger_helpers import count_requests, record, wait_until
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import spool_log
from gateway.ledger.records import RequestRecord
from gateway.ledger.spool import LOG_SUFFIX, Spool, encode


def _lines(count: int, task: str = "spool-log") -> tuple[list[RequestRecord], list[bytes]]:
    records = [record(task, request_id=f"{task}-{i}") for i in range(count)]
    return records, [encode(item) for item in records]


def test_segments_are_frames_of_one_log_read_back_whole(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    first_records, first_lines = _lines(3, "first")
    second_records, second_lines = _lines(2, "second")
    first = spool.append(first_lines, [])
    second = spool.append(second_lines, [])
    (log,) = spool.directory.iterdir()
    assert log.name.endswith(LOG_SUFFIX) and first.path == second.path == log
    assert log.stat().st_size == spool_log.LOG_BYTES  # preallocated: frames only overwrite
    assert (first.entries, second.entries) == (3, 2) and first.key != second.key
    assert spool.read(first) == first_records and spool.read(second) == second_records
    assert first.name != second.name  # each frame's refusals get a file of their own


def test_a_live_log_is_not_adopted_and_a_closed_one_is_with_its_uncommitted_frames(
    tmp_path: Path,
) -> None:
    writer = Spool(tmp_path)
    committed = writer.append(_lines(2, "committed")[1], [])
    records, lines = _lines(3, "waiting")
    writer.append(lines, [])
    writer.delete(committed)
    assert Spool(tmp_path).leftovers() == []  # locked: its writer applies it itself
    writer.close()  # the database stayed down: the log is kept, unlocked
    successor = Spool(tmp_path)
    adopted = successor.leftovers()
    # A replay applies every frame (committed ones insert nothing: ids are unique).
    assert [segment.entries for segment in adopted] == [2, 3]
    assert successor.read(adopted[1]) == records
    assert Spool(tmp_path).leftovers() == []  # the adopter holds the lock until it is done
    for segment in adopted:
        successor.delete(segment)
    assert list(tmp_path.iterdir()) == []  # all committed: the adopted log is deleted


def test_replay_stops_at_a_torn_frame(tmp_path: Path) -> None:
    writer = Spool(tmp_path)
    records, lines = _lines(2)
    whole = writer.append(lines, [])
    torn = writer.append(_lines(2, "torn")[1], [])
    writer.close()
    with open(whole.path, "r+b") as handle:  # a power cut before the second fdatasync
        handle.seek(torn.offset + torn.size - 5)
        handle.write(b"\0" * 5)
    successor = Spool(tmp_path)
    (replayed,) = successor.leftovers()
    assert successor.read(replayed) == records


def test_a_full_log_is_followed_by_a_new_one_and_deleted_once_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lines = _lines(40)
    room = len(b"".join(lines)) + spool_log.HEADER_ROOM
    monkeypatch.setattr(spool_log, "LOG_BYTES", room * 3 // 2)  # room for one frame
    spool = Spool(tmp_path)
    first = spool.append(lines, [])
    second = spool.append(lines, [])  # the first is not committed yet: a new log
    assert first.path != second.path and len(list(tmp_path.iterdir())) == 2
    assert spool.settle(first) == first.path  # no longer appended to: delete it now
    spool.remove(first.path)
    assert spool.settle(second) is None  # the current log stays for the next frames
    assert list(tmp_path.iterdir()) == [second.path]
    large = spool.append(lines * 3, [])  # larger than a log: one log of its own size
    assert large.path.stat().st_size > spool_log.LOG_BYTES and len(spool.read(large)) == 120


def test_a_full_committed_log_is_recycled_and_its_old_frames_are_not_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lines = _lines(40, "old")
    room = len(b"".join(lines)) + spool_log.HEADER_ROOM
    monkeypatch.setattr(spool_log, "LOG_BYTES", room * 5 // 2)  # room for two frames
    spool = Spool(tmp_path)
    for _ in range(2):
        spool.settle(spool.append(lines, []))
    records, fresh = _lines(40, "new")
    recycled = spool.append(fresh, [])  # full, all committed: the same file, a new name
    (only,) = tmp_path.iterdir()
    assert only == recycled.path and recycled.offset == 0
    assert only.stat().st_size == room * 5 // 2  # not allocated again
    spool.close()
    successor = Spool(tmp_path)
    (replayed,) = successor.leftovers()  # the old name's frames after it are not its own
    assert successor.read(replayed) == records


def test_settling_a_frame_of_the_current_log_needs_no_io_and_idleness_deletes_it(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path)
    segment = spool.append(_lines(1)[1], [])
    assert spool.idle_log(0.0) is None  # not committed yet
    assert spool.settle(segment) is None
    assert spool.idle_log(60.0) is None  # appended to a moment ago
    assert spool.idle_log(0.0) == segment.path
    spool.remove(segment.path)
    assert list(tmp_path.iterdir()) == []
    again = spool.append(_lines(1, "again")[1], [])  # the next segment starts a new log
    assert again.path != segment.path and again.path.exists()


def test_a_removed_log_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    before = spool.append(_lines(1)[1], [])
    before.path.unlink()  # the spool directory's contents removed under a running writer
    records, lines = _lines(2, "after")
    after = spool.append(lines, [])
    assert after.path != before.path and after.path.exists()
    assert spool.read(after) == records


async def test_a_killed_writers_log_and_a_live_siblings_are_told_apart(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    sibling = make_writer(flush_interval=60.0)
    await sibling.start()
    sibling.submit(record("sibling", request_id="live-0"))
    assert await sibling._spool_pending()  # appended to its own log, not yet committed
    dead = Spool(spool_dir)
    dead.append(_lines(4, "dead")[1], [])
    dead.close()  # as the kernel does for a killed process: the lock goes, the file stays
    writer = make_writer()
    await writer.start()
    await wait_until(lambda: writer.spooled == 0)
    # The dead log's rows only: the sibling's log is its own to apply.
    assert (writer.rows_written, writer.rows_duplicate) == (4, 0)
    await wait_until(lambda: sibling.rows_written == 1)
    assert await count_requests(engine) == 5
    await sibling.close()
    await writer.close()
    assert os.listdir(spool_dir) == []


def test_after_close_a_segment_is_a_whole_file_and_no_log_is_opened(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.close()
    records, lines = _lines(2, "late")
    segment = spool.append(lines, [])
    assert not segment.path.name.endswith(LOG_SUFFIX)
    assert segment.path.read_bytes() == b"".join(lines) and spool.read(segment) == records
