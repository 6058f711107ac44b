"""The durable spool: ledger entries on local disk until the database has committed them.

Each flush writes one *segment*: a JSONL file written under a temporary name, fsynced,
then renamed into place (and the directory fsynced), so a segment is either complete or
absent. A segment is deleted only after the transaction that applied it committed. A
crash between the commit and the delete replays the segment, which is harmless because
request rows are inserted by their uuid with ON CONFLICT DO NOTHING.

Segment names start with a nanosecond timestamp, so sorting names replays in order. All
methods block on disk I/O; the writer calls them through `asyncio.to_thread`.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.ledger.records import LedgerEntry, RequestRecord, TaskFinish

logger = logging.getLogger(__name__)

DEFAULT_SPOOL_DIR = Path(".farebox/spool")
SEGMENT_SUFFIX = ".jsonl"
REJECTED_DIR = "rejected"
# A temporary file this old belongs to a process that died mid-write; anything younger may
# be a sibling worker's write in progress.
_STALE_TEMP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Segment:
    """One spool file and the number of entries in it."""

    path: Path
    entries: int


def encode(entry: LedgerEntry) -> bytes:
    """Encode one entry as a JSONL line."""
    kind = "request" if isinstance(entry, RequestRecord) else "finish"
    return orjson.dumps({"kind": kind, "data": entry.to_json()}) + b"\n"


def decode(line: bytes) -> LedgerEntry:
    """Decode one JSONL line written by `encode`."""
    item = orjson.loads(line)
    if item["kind"] == "request":
        return RequestRecord.from_json(item["data"])
    return TaskFinish.from_json(item["data"])


class Spool:
    """A directory of segment files, owned by one writer at a time (sharing is safe, not fast)."""

    def __init__(self, directory: Path | str = DEFAULT_SPOOL_DIR) -> None:
        self.directory = Path(directory)
        self._token = uuid.uuid4().hex[:12]
        self._counter = itertools.count()
        self.corrupt_lines = 0

    def write(self, entries: list[LedgerEntry]) -> Segment:
        """Write `entries` as a new segment, durably (fsync of file and directory)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{self._token}-{next(self._counter):06d}{SEGMENT_SUFFIX}"
        final = self.directory / name
        temp = self.directory / f".{name}.tmp"
        with open(temp, "wb") as handle:
            handle.write(b"".join(encode(entry) for entry in entries))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)
        self._sync_directory()
        return Segment(final, len(entries))

    def read(self, segment: Segment) -> list[LedgerEntry]:
        """Read a segment; a missing file means another process already applied it."""
        try:
            raw = segment.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[LedgerEntry] = []
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append(decode(line))
            except (ValueError, KeyError, TypeError) as exc:
                # Never expected (segments are renamed into place whole); keep the rest.
                self.corrupt_lines += 1
                logger.error(
                    "ledger spool: skipping bad line %d of %s: %s", number, segment.path, exc
                )
        return entries

    def delete(self, segment: Segment) -> None:
        """Delete a committed segment (already gone is fine: a sibling applied it)."""
        segment.path.unlink(missing_ok=True)

    def reject(self, segment: Segment) -> Path:
        """Move a segment the database refuses for good aside, for a person to inspect."""
        target_dir = self.directory / REJECTED_DIR
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / segment.path.name
        os.replace(segment.path, target)
        return target

    def leftovers(self) -> list[Segment]:
        """List the segments already on disk (left by a previous process), oldest first."""
        if not self.directory.is_dir():
            return []
        self._remove_stale_temp_files()
        segments = []
        for path in sorted(self.directory.glob(f"*{SEGMENT_SUFFIX}")):
            try:
                with open(path, "rb") as handle:
                    count = sum(1 for line in handle if line.strip())
            except FileNotFoundError:
                continue  # a sibling worker applied and deleted it meanwhile
            segments.append(Segment(path, count))
        return segments

    def _remove_stale_temp_files(self) -> None:
        """Delete half-written temporary files of processes that died while writing them."""
        cutoff = time.time() - _STALE_TEMP_SECONDS
        for temp in self.directory.glob(".*.tmp"):
            if temp.stat().st_mtime < cutoff:
                logger.warning("ledger spool: removing half-written %s", temp)
                temp.unlink(missing_ok=True)

    def _sync_directory(self) -> None:
        """Fsync the directory so the rename itself survives a power cut."""
        if not hasattr(os, "O_DIRECTORY"):
            return  # Windows cannot open directories; its renames are journaled by NTFS.
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
