"""The batched ledger writer: the request path hands it records, two background loops store them.

`submit()` and `finish_task()` only append to an in-memory queue. The *spool loop* moves
the queue to a spool segment on disk every `flush_interval`; the *drain loop* applies
segments to the database, one transaction each, and deletes a segment only after its
commit. A slow or dead database therefore never loses data: segments wait on disk and
are retried with exponential backoff, and the next process replays what this one left.
The loops are separate so that a database call hanging on a timeout never delays the
spooling (which is what bounds a `kill -9` loss to one flush interval).

A row the database refuses for good (see `gateway.ledger.refusal`) never holds up the
rest: the segment is bisected, every other row commits, and the refused one is written
to `<spool_dir>/rejected/` with its reason, counted in `rows_rejected` and logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import store
from gateway.ledger.batch import SLICE_ROWS, turn
from gateway.ledger.records import FinishedTask, LedgerEntry, RequestRecord, TaskFinish, utcnow
from gateway.ledger.refusal import Refusal, Salvage, apply_salvaging
from gateway.ledger.spool import (
    REJECTED_DIR,
    Segment,
    Spool,
    default_spool_dir,
    encode_line,
)

logger = logging.getLogger(__name__)

KEPT_SEGMENTS = 16
"""Segments whose entries stay in memory until applied (a segment is one flush interval)."""
MAX_SLICE_FACTOR = 8
"""A backlog of n segments plans n x `SLICE_ROWS` records between yields, up to this many."""
IDLE_LOG_FLUSHES = 5
"""Flush intervals with nothing to spool after which a committed log is deleted."""

OnTaskFinished = Callable[[str, str, Decimal], None]
"""Called as `(team, outcome, cost_total)` once per task that leaves `open`."""


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Timing and storage settings of a `LedgerWriter` (all durations in seconds)."""

    spool_dir: Path = field(default_factory=default_spool_dir)
    flush_interval: float = 0.2
    # An open task with no request for this long is marked abandoned; None: never.
    idle_timeout: float | None = 1800.0
    idle_check_interval: float = 60.0
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # How long close() keeps retrying a down database before leaving the rest spooled.
    close_timeout: float = 10.0
    # Only reached when the spool disk refuses writes; the oldest entries are dropped.
    max_pending: int = 1_000_000


@dataclass(frozen=True, slots=True)
class WriterStats:
    """A snapshot of the writer's counters, for the metrics endpoint."""

    records_submitted: int
    rows_written: int
    rows_duplicate: int
    pending: int
    spooled: int
    flush_failures: int
    spool_failures: int
    segments_rejected: int
    rows_rejected: int
    records_dropped: int
    tasks_finished: int
    tasks_abandoned: int
    callback_errors: int
    last_flush_seconds: float


class LedgerWriter:
    """Batch ledger entries to the database through a durable on-disk spool."""

    def __init__(
        self,
        engine: AsyncEngine,
        config: WriterConfig | None = None,
        on_task_finished: OnTaskFinished | None = None,
    ) -> None:
        self.engine = engine
        self.config = config or WriterConfig()
        self.on_task_finished = on_task_finished
        self.spool = Spool(self.config.spool_dir)
        # Each entry with its spool line, encoded when it is queued (a few microseconds on
        # the request's own time, not a burst per flush), or why JSON cannot carry it.
        self._pending: deque[tuple[LedgerEntry, bytes | str]] = deque()
        self._segments: deque[Segment] = deque()
        # What this process wrote to each recent segment, so applying it needs no re-read
        # and decode of the file (a few per cent of a request's CPU); bounded, and dropped
        # in an outage: the spool on disk is what holds a backlog.
        self._written: dict[tuple[Path, int], list[LedgerEntry]] = {}
        self._spool_lock = asyncio.Lock()
        self._drain_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._spooled = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._closed = False
        self._writing = 0
        self._backoff = 0.0
        self._retry_at = 0.0
        self.records_submitted = 0
        self.rows_written = 0
        self.rows_duplicate = 0
        self.flush_failures = 0
        self.spool_failures = 0
        self.segments_rejected = 0
        self.rows_rejected = 0
        self.records_dropped = 0
        self.tasks_finished = 0
        self.tasks_abandoned = 0
        self.callback_errors = 0
        self.last_flush_seconds = 0.0

    @property
    def retrying(self) -> bool:
        """Whether the last database write failed and its retry is scheduled (may be down)."""
        return self._backoff > 0

    @property
    def pending(self) -> int:
        """Entries in memory, not yet on disk (including a batch being written)."""
        return len(self._pending) + self._writing

    @property
    def spooled(self) -> int:
        """Entries on disk, not yet committed to the database."""
        return sum(segment.entries for segment in self._segments)

    def stats(self) -> WriterStats:
        """Return a snapshot of the counters."""
        return WriterStats(
            self.records_submitted, self.rows_written, self.rows_duplicate, self.pending,
            self.spooled, self.flush_failures, self.spool_failures, self.segments_rejected,
            self.rows_rejected, self.records_dropped, self.tasks_finished, self.tasks_abandoned,
            self.callback_errors, self.last_flush_seconds,
        )  # fmt: skip

    def submit(self, record: RequestRecord) -> None:
        """Queue one request record; O(1), never blocks (call it on the event loop's thread)."""
        self.records_submitted += 1
        self._enqueue(record)

    def finish_task(self, task_id: str, outcome: str, at: datetime | None = None) -> None:
        """Queue a task's outcome; raises ValueError at once for an invalid outcome."""
        self._enqueue(TaskFinish(task_id, outcome, at or utcnow()))

    def _enqueue(self, entry: LedgerEntry) -> None:
        """Append to the queue, or straight to the spool once the writer is closed."""
        if self._closed:
            # A straggler after shutdown: a blocking write is rare and beats losing it.
            logger.warning("ledger writer is closed; spooling an entry of task %r", entry.task_id)
            self._count_refused(self.spool.write([entry]).refused)
            return
        if len(self._pending) >= self.config.max_pending:
            self._pending.popleft()
            self.records_dropped += 1
        self._pending.append((entry, encode_line(entry)))

    async def start(self) -> None:
        """Adopt the spool a previous process left, then start the background loops."""
        if self._loops or self._closed:
            raise RuntimeError("LedgerWriter.start() may be called once, before close()")
        leftovers = await asyncio.to_thread(self.spool.leftovers)
        if leftovers:
            count = sum(segment.entries for segment in leftovers)
            logger.info(
                "ledger writer: replaying %d spooled entries from %s", count, self.spool.directory
            )
        self._segments.extend(leftovers)
        self._spooled.set()
        self._loops = [
            asyncio.create_task(self._spool_loop(), name="ledger-spool"),
            asyncio.create_task(self._drain_loop(), name="ledger-drain"),
        ]

    async def close(self) -> None:
        """Stop the loops, spool everything, and commit it unless the database stays down."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._spooled.set()
        loops, self._loops = self._loops, []
        await asyncio.gather(*loops)
        while self._pending:
            if not await self._spool_pending():
                logger.error(
                    "ledger writer: the spool disk refuses writes; %d entries are lost on exit",
                    len(self._pending),
                )
                break
        self._closed = True
        deadline = time.monotonic() + self.config.close_timeout
        try:
            while not await self._drain():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    logger.warning(
                        "ledger writer closed with %d entries kept in %s; the next start "
                        "replays them", self.spooled, self.spool.directory,
                    )  # fmt: skip
                    return
                await asyncio.sleep(min(self._backoff, remaining))
        finally:
            # Committed logs are deleted, the others unlocked for the next start to adopt.
            await asyncio.to_thread(self.spool.close)

    async def flush(self) -> bool:
        """Spool and commit everything queued now; False if the disk or the database refused."""
        spooled = await self._spool_pending()
        return await self._drain() and spooled

    async def close_idle_tasks(self, idle_seconds: float) -> list[FinishedTask]:
        """Abandon open tasks idle for `idle_seconds`, report them to the callback, return them."""
        closed = await store.close_idle_tasks(self.engine, idle_seconds)
        self.tasks_abandoned += len(closed)
        self._observe(closed)
        return closed

    async def _stopped_within(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True as soon as close() was called."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _spool_loop(self) -> None:
        """Every flush interval, move the queue to a spool segment."""
        idle_seconds = IDLE_LOG_FLUSHES * self.config.flush_interval
        while not await self._stopped_within(self.config.flush_interval):
            # Woken by a timer, at any moment: the batch is taken in a quiet turn instead.
            await turn()
            await self._spool_pending()
            await self._retire_idle_log(idle_seconds)

    async def _retire_idle_log(self, idle_seconds: float) -> None:
        """Delete this process's log once all of it is committed and no flush had entries
        for a while: a quiet gateway leaves an empty spool. (A busy one keeps appending.)"""
        async with self._spool_lock:
            idle = self.spool.idle_log(idle_seconds)
            if idle is not None:
                await self._remove(idle)

    async def _spool_pending(self) -> bool:
        """Write the queued entries as one durable segment; keep them queued if the disk fails."""
        async with self._spool_lock:
            if not self._pending:
                return True
            batch = list(self._pending)
            self._pending.clear()
            self._writing = len(batch)
            try:
                segment = await self._write_segment(batch)
            except Exception as exc:  # a full or read-only disk; keep the batch in memory
                self.spool_failures += 1
                logger.error("ledger spool: cannot write to %s: %r", self.spool.directory, exc)
                self._pending.extendleft(reversed(batch))
                return False
            finally:
                self._writing = 0
            self._count_refused(segment.refused)
            if not segment.refused and len(self._written) < KEPT_SEGMENTS:
                self._written[segment.key] = [entry for entry, _ in batch]
            self._segments.append(segment)
            self._spooled.set()
            return True

    async def _write_segment(self, batch: list[tuple[LedgerEntry, bytes | str]]) -> Segment:
        """Append the lines encoded at submit to the spool; only the I/O goes to a thread.

        Encoding a whole batch in a worker thread held the interpreter lock for up to a
        switch interval (1 ms in the server) at a time, at every wake-up of the loop.
        """
        lines: list[bytes] = []
        refused: list[Refusal] = []
        for entry, line in batch:
            if isinstance(line, bytes):
                lines.append(line)
            else:
                refused.append(Refusal(line, entry))
        segment = await asyncio.to_thread(self.spool.append, lines, refused)
        if not self._stopping.is_set():
            await turn()  # the thread finishes at any moment: its bookkeeping in a quiet turn
        return segment

    async def _drain_loop(self) -> None:
        """Apply spooled segments as they appear, and abandon idle tasks now and then."""
        next_idle_check = time.monotonic() + self.config.idle_check_interval
        while not self._stopping.is_set():
            wait = max(self._retry_at - time.monotonic(), 0.0) or self.config.flush_interval
            # A timeout is not an error here: it is time to retry, or to look for idle tasks.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._spooled.wait(), wait)
            self._spooled.clear()
            if self._stopping.is_set():
                return
            if self._segments and time.monotonic() >= self._retry_at:
                await turn()  # a timer or the spool's event woke this: start in a quiet turn
                await self._drain()
            if time.monotonic() >= next_idle_check:
                next_idle_check = time.monotonic() + self.config.idle_check_interval
                await self._abandon_idle()

    async def _abandon_idle(self) -> None:
        """Run the periodic idle check, unless entries still wait for the database."""
        if self.config.idle_timeout is None or self._segments or self._pending:
            return  # with a backlog, last_activity_at in the database is stale
        try:
            await self.close_idle_tasks(self.config.idle_timeout)
        except Exception as exc:  # database down: the next check retries
            logger.warning("ledger writer: idle-task check failed: %s", exc)

    async def _drain(self) -> bool:
        """Apply segments oldest first; False (and a backoff) on the first failure."""
        async with self._drain_lock:
            started = time.perf_counter()
            while self._segments:
                segment = self._segments[0]
                try:
                    salvage = await self._apply(segment)
                    if salvage.refused:
                        await self._set_aside(segment, salvage.refused)
                except Exception as exc:  # down, slow or restarting: keep the spool, retry
                    self._note_failure(exc)
                    return False
                result = salvage.result
                self.rows_written += result.inserted
                self.rows_duplicate += result.duplicates
                self.tasks_finished += len(result.finished)
                self._segments.popleft()
                self._observe(result.finished)
                await self._delete(segment)
            self.last_flush_seconds = time.perf_counter() - started
            self._backoff = self._retry_at = 0.0
            return True

    async def _apply(self, segment: Segment) -> Salvage:
        """Apply one segment in one transaction, or around the entries refused for good."""
        kept = self._written.pop(segment.key, None)
        entries: Sequence[LedgerEntry] = kept or []
        corrupt: list[Refusal] = []
        # The file gone means another process applied it (a sibling worker's replay).
        if kept is None or not segment.path.exists():
            entries, corrupt = await asyncio.to_thread(self.spool.load, segment)
        # Behind (segments waiting), larger slices: fewer turns of a busy loop per row.
        step = SLICE_ROWS * min(len(self._segments), MAX_SLICE_FACTOR)
        salvage = await apply_salvaging(self.engine, entries, step)
        salvage.refused[:0] = corrupt
        return salvage

    async def _delete(self, segment: Segment) -> None:
        """Note a segment committed; delete its file (or its log, once all of it is)."""
        removable = self.spool.settle(segment)  # most often nothing to delete: no thread hop
        if removable is not None:
            await self._remove(removable)

    async def _remove(self, path: Path) -> None:
        """Delete a committed file; if that fails, a later replay is a harmless no-op."""
        try:
            await asyncio.to_thread(self.spool.remove, path)
        except OSError as exc:
            logger.error("ledger spool: cannot delete committed %s: %s", path, exc)

    async def _set_aside(self, segment: Segment, refused: list[Refusal]) -> None:
        """Write the refused entries to `rejected/` (before the segment may be deleted)."""
        name = segment.name
        # An OSError propagates: the segment stays, and its replay rewrites the same file.
        target = await asyncio.to_thread(self.spool.set_aside, name, refused)
        self.segments_rejected += 1
        self._count_refused(refused, target)

    def _count_refused(self, refused: Sequence[Refusal], target: Path | None = None) -> None:
        """Count and log (one line each) entries that can never be stored."""
        for refusal in refused:
            self.rows_rejected += 1
            entry = refusal.entry
            logger.error(
                "ledger: set aside %s of task %r for good (%s) in %s",
                type(entry).__name__ if entry is not None else "a spool line",
                entry.task_id if entry is not None else None,
                refusal.reason,
                target or self.spool.directory / REJECTED_DIR,
            )

    def _note_failure(self, exc: Exception) -> None:
        """Count a failed flush and schedule the retry with exponential backoff."""
        self.flush_failures += 1
        self._written.clear()  # the backlog waits on disk, not in memory
        initial, ceiling = self.config.retry_initial, self.config.retry_max
        first = not self._backoff
        self._backoff = initial if first else min(self._backoff * 2, ceiling)
        self._retry_at = time.monotonic() + self._backoff
        logger.warning(
            "ledger writer: database write failed (%s: %s); %d entries kept in the spool, "
            "retrying in %.1fs", type(exc).__name__, exc, self.spooled, self._backoff,
            exc_info=first,  # the traceback once per outage, not once per retry
        )  # fmt: skip

    def _observe(self, finished: list[FinishedTask]) -> None:
        """Report finished tasks to the callback; a failing callback must not stop the writer."""
        if self.on_task_finished is None:
            return
        for task in finished:
            try:
                self.on_task_finished(task.team, task.outcome, task.cost_total)
            except Exception:
                self.callback_errors += 1
                logger.exception("ledger writer: on_task_finished failed for %s", task.task_id)
