"""Ledger upkeep in the background: next days' partitions ahead of time, and retention.

Every `interval` seconds (and once at start) it creates the partitions of today and the
next `ahead_days` days on PostgreSQL, so the writer rarely creates one on its hot path,
and, when `retention_days` is set, forgets whole UTC days older than that: their request
partitions are dropped (a row-by-row DELETE on SQLite), with the rollup buckets of the
same days and the tasks that ended before them, so every report agrees with the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.ledger.partitions import drop_partitions_before, ensure_partitions
from gateway.ledger.records import OPEN, utcnow
from gateway.ledger.rollup import FAMILIES
from gateway.ledger.store import REQUESTS, TASKS

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Retention:
    """What one retention pass forgot: days before `cutoff`."""

    cutoff: date
    partitions_dropped: list[date] = field(default_factory=list)
    rows_deleted: int = 0
    tasks_deleted: int = 0


async def create_ahead(engine: AsyncEngine, ahead_days: int, today: date | None = None) -> None:
    """Create the partitions of today and the next `ahead_days` days (PostgreSQL only)."""
    if engine.dialect.name != "postgresql":
        return
    start = today or utcnow().date()
    async with engine.begin() as connection:
        await ensure_partitions(connection, {start + timedelta(d) for d in range(ahead_days + 1)})


async def apply_retention(engine: AsyncEngine, days: int, now: datetime | None = None) -> Retention:
    """Forget whole UTC days before today minus `days`: rows, rollup buckets, ended tasks."""
    cutoff = (now or utcnow()).date() - timedelta(days=days)
    start = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=UTC)
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            dropped, deleted = await drop_partitions_before(connection, cutoff), 0
        else:
            dropped = []
            result = await connection.execute(delete(REQUESTS).where(REQUESTS.c.created_at < start))
            deleted = result.rowcount
        tasks = await _forget_buckets_and_tasks(connection, start)
    return Retention(cutoff, dropped, deleted, tasks)


async def _forget_buckets_and_tasks(connection: AsyncConnection, start: datetime) -> int:
    """Delete rollup buckets before `start` and tasks whose last request was before it."""
    for family in FAMILIES:
        for table in (family.hourly, family.daily):
            await connection.execute(delete(table).where(table.c.bucket < start))
    result = await connection.execute(
        delete(TASKS).where(TASKS.c.status != OPEN, TASKS.c.last_activity_at < start)
    )
    return result.rowcount


class LedgerMaintenance:
    """Run `create_ahead` and `apply_retention` now and every `interval` seconds."""

    def __init__(
        self,
        engine: AsyncEngine,
        retention_days: int | None = None,
        ahead_days: int = 3,
        interval: float = 3600.0,
    ) -> None:
        self.engine = engine
        self.retention_days = retention_days
        self.ahead_days = ahead_days
        self.interval = interval
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> Retention | None:
        """One pass; a database that is down is logged and tried again next time."""
        try:
            await create_ahead(self.engine, self.ahead_days)
            if self.retention_days is None:
                return None
            done = await apply_retention(self.engine, self.retention_days)
        except Exception as exc:  # down or restarting: the writer's own ensure still covers rows
            self.failures += 1
            logger.warning(
                "ledger maintenance failed (%s: %s); retrying later", type(exc).__name__, exc
            )
            return None
        if done.partitions_dropped or done.rows_deleted:
            logger.info(
                "ledger retention: forgot days before %s (%d partitions, %d rows, %d tasks)",
                done.cutoff, len(done.partitions_dropped), done.rows_deleted, done.tasks_deleted,
            )  # fmt: skip
        return done

    async def start(self) -> None:
        """Run one pass now, then keep running in the background until `close()`."""
        await self.run_once()
        self._task = asyncio.create_task(self._loop(), name="ledger-maintenance")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.run_once()

    async def close(self) -> None:
        """Stop the background loop."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
