"""The durable spool: ledger entries on local disk until the database has committed them.

Each flush writes one *segment*: a JSONL file written under a temporary name, fsynced,
then renamed into place (and the directory fsynced), so a segment is either complete or
absent. A segment is deleted only after the transaction that applied it committed. A
crash between the commit and the delete replays the segment, which is harmless because
request rows are inserted by their uuid with ON CONFLICT DO NOTHING.

Segment names start with a nanosecond timestamp, so sorting names replays in order. All
methods block on disk I/O; the writer calls them through `asyncio.to_thread`.

What can never be stored is set aside in `rejected/`, one JSONL file per segment, each
line the entry (or the undecodable spool line) with the reason: entries JSON cannot
encode (a lone surrogate) when the segment is written, entries the database refuses for
good after it was applied. Those files are written whole, like segments, under a name
derived from the segment's, so a replay rewrites the same file instead of adding one.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.ledger.records import LedgerEntry, RequestRecord, TaskFinish, money_text, utcnow
from gateway.ledger.refusal import Refusal
from gateway.settings import default_data_dir

logger = logging.getLogger(__name__)


def default_spool_dir() -> Path:
    """Settings.data_dir's default spool, not the cwd (read when used: importing never fails)."""
    return default_data_dir() / "spool"


SEGMENT_SUFFIX = ".jsonl"
REJECTED_DIR = "rejected"
_CREATE_ONLY = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
# A temporary file this old belongs to a process that died mid-write; anything younger may
# be a sibling worker's write in progress.
_STALE_TEMP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Segment:
    """One spool file, the number of entries in it, and those its writing set aside."""

    path: Path
    entries: int
    refused: tuple[Refusal, ...] = ()


def encode(entry: LedgerEntry) -> bytes:
    """Encode one entry as a JSONL line (the same JSON as `entry.to_json()`).

    orjson walks the slotted dataclass and writes aware datetimes in ISO 8601 itself, so
    no intermediate dict is built per entry (half the spool's CPU per row).
    """
    kind = "request" if isinstance(entry, RequestRecord) else "finish"
    return orjson.dumps({"kind": kind, "data": entry}, default=money_text) + b"\n"


def decode(line: bytes) -> LedgerEntry:
    """Decode one JSONL line written by `encode`."""
    item = orjson.loads(line)
    if item["kind"] == "request":
        return RequestRecord.from_json(item["data"])
    return TaskFinish.from_json(item["data"])


def rejected_line(refusal: Refusal) -> bytes:
    """Encode a refusal as a JSONL line; ASCII-escaped, so even a lone surrogate survives."""
    item: dict[str, object] = {"reason": refusal.reason, "rejected_at": utcnow().isoformat()}
    if refusal.entry is not None:
        item["kind"] = "request" if isinstance(refusal.entry, RequestRecord) else "finish"
        item["data"] = refusal.entry.to_json()
    if refusal.line is not None:
        item["line"] = refusal.line.decode("utf-8", "backslashreplace")
    return json.dumps(item, ensure_ascii=True, default=str).encode("ascii") + b"\n"


def encode_line(entry: LedgerEntry) -> bytes | str:
    """The entry's spool line, or why JSON cannot carry it (it is then refused alone)."""
    try:
        return encode(entry)
    except TypeError as exc:  # orjson.JSONEncodeError: e.g. "surrogates not allowed"
        return f"not encodable as JSON: {exc}"


def encode_into(entries: Sequence[LedgerEntry], lines: list[bytes], refused: list[Refusal]) -> None:
    """Encode each entry; one JSON cannot carry is refused alone, not with its batch."""
    for entry in entries:
        line = encode_line(entry)
        if isinstance(line, bytes):
            lines.append(line)
        else:
            refused.append(Refusal(line, entry))


class Spool:
    """A directory of segment files, owned by one writer at a time (sharing is safe, not fast)."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_spool_dir()
        self._token = uuid.uuid4().hex[:12]
        self._counter = itertools.count()
        self.corrupt_lines = 0

    def write(self, entries: list[LedgerEntry]) -> Segment:
        """Write `entries` as a new segment, durably (fsync of file and directory).

        Entries JSON cannot encode go to `rejected/` instead, listed in `Segment.refused`.
        """
        lines: list[bytes] = []
        refused: list[Refusal] = []
        encode_into(entries, lines, refused)
        return self.write_encoded(lines, refused)

    def write_encoded(self, lines: list[bytes], refused: list[Refusal]) -> Segment:
        """Write lines `encode_line` made as a new segment (and its refusals to `rejected/`).

        The writer encodes each entry when it is queued, on the event loop, and hands only
        this to a thread: file writes and fsyncs, which let go of the interpreter lock.
        """
        name = f"{time.time_ns():020d}-{self._token}-{next(self._counter):06d}{SEGMENT_SUFFIX}"
        if refused:
            self.set_aside(f"{name.removesuffix(SEGMENT_SUFFIX)}.unencodable", refused)
        final = self.directory / name
        if lines:  # an absent segment reads as empty: nothing to write when all were refused
            self._write_whole(final, b"".join(lines))
        return Segment(final, len(lines), tuple(refused))

    def _write_whole(self, final: Path, data: bytes) -> None:
        """Write under a temporary name, fsync, rename into place, fsync the directory.

        Through the file descriptor, not a Python file object (whose buffer, fstat, ioctl
        and seek cost ~0.1 ms a segment on the core the event loop shares), and with no
        mkdir of the directory per segment: it is made when the first open finds it missing.
        """
        temp = final.with_name(f".{final.name}.tmp")
        try:
            fd = os.open(temp, _CREATE_ONLY, 0o666)
        except FileNotFoundError:  # the first segment, or the directory was removed
            final.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(temp, _CREATE_ONLY, 0o666)
        try:
            view = memoryview(data)
            while view:  # a regular file takes it whole, unless the disk fills meanwhile
                written = os.write(fd, view)
                if not written:  # never for a regular file; not a reason to spin
                    raise OSError(errno.ENOSPC, f"no byte of {len(view)} written", str(temp))
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, final)
        self._sync_directory(final.parent)

    def read(self, segment: Segment) -> list[LedgerEntry]:
        """Read a segment's entries; lines that do not decode are logged and skipped."""
        return self.load(segment)[0]

    def load(self, segment: Segment) -> tuple[list[LedgerEntry], list[Refusal]]:
        """Read a segment, and each line that does not decode as a refusal.

        A missing file means another process already applied it.
        """
        try:
            raw = segment.path.read_bytes()
        except FileNotFoundError:
            return [], []
        entries: list[LedgerEntry] = []
        corrupt: list[Refusal] = []
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
                corrupt.append(Refusal(f"undecodable spool line {number}: {exc}", line=line))
        return entries, corrupt

    def set_aside(self, name: str, refused: list[Refusal]) -> Path:
        """Write refused entries to `rejected/<name>.jsonl`, whole (a replay rewrites it)."""
        target_dir = self.directory / REJECTED_DIR
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"{name}{SEGMENT_SUFFIX}"
        self._write_whole(target, b"".join(rejected_line(refusal) for refusal in refused))
        return target

    def delete(self, segment: Segment) -> None:
        """Delete a committed segment (already gone is fine: a sibling applied it)."""
        segment.path.unlink(missing_ok=True)

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

    def _sync_directory(self, directory: Path) -> None:
        """Fsync the directory so the rename itself survives a power cut."""
        if not hasattr(os, "O_DIRECTORY"):
            return  # Windows cannot open directories; its renames are journaled by NTFS.
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
