"""The durable spool: ledger entries on local disk until the database has committed them.

Each flush writes one *segment*. The writer appends it as a frame to this process's log
(`gateway.ledger.spool_log`: one positioned write and one fdatasync into a preallocated
file), durable once `append` returns. A log is deleted once every segment in it has
been committed and it is no longer the one appended to (it is full, or idle). A crash
replays a log's every frame, committed ones too, which is harmless: request rows are
inserted by their uuid with ON CONFLICT DO NOTHING, task sums add only the rows inserted,
and a finish moves only a task still open.

`write` (entries spooled after the writer closed, and where no `flock` exists) writes a
segment as a whole JSONL file instead: under a temporary name, fsynced, renamed into
place (and the directory fsynced), so it is either complete or absent; it is deleted
after its commit. Replays read both kinds.

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
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.ledger import spool_log
from gateway.ledger.records import LedgerEntry, RequestRecord, TaskFinish, money_text, utcnow
from gateway.ledger.refusal import Refusal
from gateway.settings import default_data_dir

logger = logging.getLogger(__name__)


def default_spool_dir() -> Path:
    """Settings.data_dir's default spool, not the cwd (read when used: importing never fails)."""
    return default_data_dir() / "spool"


SEGMENT_SUFFIX = ".jsonl"
LOG_SUFFIX = f".log{SEGMENT_SUFFIX}"
WHOLE_FILE = -1
"""`Segment.offset` of a segment that is a file of its own."""
REJECTED_DIR = "rejected"
_CREATE_ONLY = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
# A temporary file this old belongs to a process that died mid-write; anything younger may
# be a sibling worker's write in progress.
_STALE_TEMP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Segment:
    """A spool file (or a frame in a log), its entry count, and those its writing set aside."""

    path: Path
    entries: int
    refused: tuple[Refusal, ...] = ()
    offset: int = WHOLE_FILE
    size: int = 0

    @property
    def key(self) -> tuple[Path, int]:
        """What tells segments apart (a log holds many)."""
        return self.path, self.offset

    @property
    def name(self) -> str:
        """The name its refused entries' file in `rejected/` derives from (stable on replay)."""
        stem = self.path.name.removesuffix(SEGMENT_SUFFIX)
        return stem if self.offset == WHOLE_FILE else f"{stem}-{self.offset:012d}"


@dataclass(slots=True)
class _Log:
    """A log this process holds the lock of: appended to, or adopted from a dead process."""

    path: Path
    fd: int
    end: int
    capacity: int
    outstanding: int = 0
    written_at: float = 0.0


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
        # The logs this process holds locked, and the one appended to. `append` runs in a
        # worker thread while `settle` runs on the event loop: the lock guards the counts.
        self._lock = threading.Lock()
        self._logs: dict[Path, _Log] = {}
        self._current: _Log | None = None
        self._removing: dict[Path, int] = {}
        self._closed = False

    def _next_name(self, suffix: str = SEGMENT_SUFFIX) -> str:
        """A new file name; names sort in the order written (a nanosecond timestamp first)."""
        return f"{time.time_ns():020d}-{self._token}-{next(self._counter):06d}{suffix}"

    def append(self, lines: list[bytes], refused: list[Refusal]) -> Segment:
        """Append lines `encode_line` made as a frame of this process's log, durably.

        Like `write_encoded` (whose whole file it falls back to where there is no flock),
        refusals go to `rejected/`. Runs in a worker thread: file I/O only.
        """
        if not spool_log.LOGS_SUPPORTED or not lines or self._closed:
            return self.write_encoded(lines, refused)  # closed: no log left open after it
        if refused:
            self.set_aside(f"{self._next_name('.unencodable')}", refused)
        body = b"".join(lines)
        log = self._log_for(len(body) + spool_log.HEADER_ROOM)
        data = spool_log.frame_bytes(body, len(lines), log.path.name)
        spool_log.write_frame(log.fd, data, log.end)
        with self._lock:
            offset = log.end
            log.end += len(data)
            log.outstanding += 1
            log.written_at = time.monotonic()
        return Segment(log.path, len(lines), tuple(refused), offset, len(data))

    def _log_for(self, size: int) -> _Log:
        """The log to append `size` bytes to: the current one, recycled if it is full and
        all committed (the drain keeps up: the usual case), or else a new one.

        A full log with frames still to commit is kept until its last one is (`settle`
        removes it then). A log whose file was removed (with the spool directory) is left.
        """
        current = self._current
        if current is not None and not spool_log.unlinked(current.fd):
            if current.end + size <= current.capacity:
                return current
            # Only this thread appends, so a count of 0 stays 0 while this runs.
            if current.outstanding == 0 and size <= current.capacity:
                return self._recycle(current)
        capacity = max(spool_log.LOG_BYTES, size)
        path = self.directory / self._next_name(LOG_SUFFIX)
        log = _Log(path, spool_log.create(path, capacity), 0, capacity, 0, time.monotonic())
        self._sync_directory(path.parent)
        with self._lock:
            self._logs[path] = log
            self._current = log
            finished = current if current is not None and current.outstanding == 0 else None
            if finished is not None:
                self._forget(finished)
        if finished is not None:
            self.remove(finished.path)
        return log

    def _recycle(self, log: _Log) -> _Log:
        """Write a committed log again from its start, under a new name.

        Its name is durable (the directory fsynced) before a frame naming it is written,
        so no power cut leaves a frame under a name it does not carry. A crash before
        that replays the old name's frames: committed ones, harmless.
        """
        path = self.directory / self._next_name(LOG_SUFFIX)
        os.replace(log.path, path)
        self._sync_directory(path.parent)
        with self._lock:
            del self._logs[log.path]
            log.path, log.end = path, 0
            self._logs[path] = log
        return log

    def _forget(self, log: _Log) -> None:
        """Stop tracking a log whose segments are all committed (its fd closes on removal)."""
        del self._logs[log.path]
        self._removing[log.path] = log.fd
        if self._current is log:
            self._current = None

    def settle(self, segment: Segment) -> Path | None:
        """Note a segment committed; the file to `remove` now, if any (None: no I/O needed).

        Cheap (no system call), so the drain needs no thread hop per segment of a log.
        """
        if segment.offset == WHOLE_FILE:
            return segment.path
        with self._lock:
            log = self._logs.get(segment.path)
            if log is None:
                return None
            log.outstanding -= 1
            if log.outstanding > 0 or log is self._current:
                return None
            self._forget(log)
            return log.path

    def idle_log(self, seconds: float) -> Path | None:
        """Retire the current log if all of it is committed and nothing was appended for
        `seconds`: a quiet gateway leaves no file behind. The file to `remove`, if any."""
        with self._lock:
            log = self._current
            if log is None or log.outstanding or time.monotonic() - log.written_at < seconds:
                return None
            self._forget(log)
            return log.path

    def remove(self, path: Path) -> None:
        """Delete a committed segment's file or a retired log (closing it: its lock goes)."""
        try:
            path.unlink(missing_ok=True)
        finally:
            fd = self._removing.pop(path, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        """Delete the logs whose segments are all committed; close (unlock) the others."""
        with self._lock:
            logs, self._logs, self._current = list(self._logs.values()), {}, None
            self._closed = True
            for log in logs:
                if log.outstanding == 0:
                    self._removing[log.path] = log.fd
        for log in logs:
            if log.outstanding == 0:
                self.remove(log.path)
            else:
                os.close(log.fd)  # unlocked: the next start adopts it

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
        name = self._next_name()
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
            raw = self._read(segment)
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

    def _read(self, segment: Segment) -> bytes:
        """A segment's lines: its whole file, or its frame's body in a log."""
        if segment.offset == WHOLE_FILE:
            return segment.path.read_bytes()
        with open(segment.path, "rb") as handle:
            data = os.pread(handle.fileno(), segment.size, segment.offset)
        found = spool_log.frame_body(data, segment.path.name)
        if found is None:  # never expected: the frame was whole when it was listed
            raise ValueError(f"frame at {segment.offset} of {segment.path} is not whole")
        return found[0]

    def set_aside(self, name: str, refused: list[Refusal]) -> Path:
        """Write refused entries to `rejected/<name>.jsonl`, whole (a replay rewrites it)."""
        target_dir = self.directory / REJECTED_DIR
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"{name}{SEGMENT_SUFFIX}"
        self._write_whole(target, b"".join(rejected_line(refusal) for refusal in refused))
        return target

    def delete(self, segment: Segment) -> None:
        """Settle and remove a committed segment (already gone is fine: a sibling applied it)."""
        path = self.settle(segment)
        if path is not None:
            self.remove(path)

    def leftovers(self) -> list[Segment]:
        """List the segments already on disk (left by a previous process), oldest first."""
        if not self.directory.is_dir():
            return []
        self._remove_stale_temp_files()
        segments: list[Segment] = []
        for path in sorted(self.directory.glob(f"*{SEGMENT_SUFFIX}")):
            if path.name.endswith(LOG_SUFFIX):
                segments += self._adopt(path)
                continue
            try:
                with open(path, "rb") as handle:
                    count = sum(1 for line in handle if line.strip())
            except FileNotFoundError:
                continue  # a sibling worker applied and deleted it meanwhile
            segments.append(Segment(path, count))
        return segments

    def _adopt(self, path: Path) -> list[Segment]:
        """The frames of a log its process left (none if it is alive, or this one's own)."""
        if not spool_log.LOGS_SUPPORTED or path in self._logs:
            return []
        adopted = spool_log.adopt(path)
        if adopted is None:
            return []
        fd, data = adopted
        found = list(spool_log.frames(data, path.name))
        end = found[-1].offset + found[-1].size if found else 0
        log = _Log(path, fd, end, len(data), outstanding=len(found))
        with self._lock:
            self._logs[path] = log
            if not found:  # nothing was ever appended: remove it now
                self._forget(log)
        if not found:
            self.remove(path)
        return [Segment(path, frame.lines, (), frame.offset, frame.size) for frame in found]

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
