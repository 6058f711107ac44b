"""Daily partitions of `requests` on PostgreSQL, and retention by whole days.

On PostgreSQL `requests` is range-partitioned on `created_at`, one partition per UTC day,
named `ledger_partitions.requests_pYYYYMMDD`. The partitions live in a schema of their
own so that they never show up as unknown tables beside the models. A batch creates the
partitions of its days before it inserts (`ensure_partitions`, under an advisory lock so
two writers never race), and the maintenance task creates the next days' ahead of time
so that the hot path rarely has to. Retention drops whole partitions: no row-by-row
DELETE, no bloat. SQLite has no partitions; there retention deletes the same days' rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

SCHEMA = "ledger_partitions"
PREFIX = "requests_p"
# Any constant works; it only has to be the same in every Farebox process.
_PARTITION_LOCK_KEY = 0x4641_5245_5041_5254  # "FAREPART"


def partition_name(day: date) -> str:
    """The partition holding the rows of one UTC day."""
    return f"{PREFIX}{day:%Y%m%d}"


def _day_start(day: date) -> str:
    """The day's first instant as a timestamptz literal."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC).isoformat()


def create_partition_sql(day: date) -> str:
    """The DDL that creates one day's partition (if it does not exist)."""
    return (
        f'CREATE TABLE IF NOT EXISTS {SCHEMA}."{partition_name(day)}" PARTITION OF requests '
        f"FOR VALUES FROM ('{_day_start(day)}') TO ('{_day_start(day + timedelta(days=1))}')"
    )


async def _missing(connection: AsyncConnection, days: set[date]) -> list[date]:
    """The days among `days` that have no partition yet."""
    by_name = {f"{SCHEMA}.{partition_name(day)}": day for day in days}
    found = await connection.execute(
        text(
            "SELECT name FROM unnest(CAST(:names AS text[])) AS name "
            "WHERE to_regclass(name) IS NOT NULL"
        ),
        {"names": list(by_name)},
    )
    present = {row[0] for row in found}
    return sorted(day for name, day in by_name.items() if name not in present)


async def ensure_partitions(connection: AsyncConnection, days: Iterable[date]) -> list[date]:
    """Create the partitions of `days` that are missing; return the days created.

    One catalog lookup when all exist (the common case). Otherwise the advisory lock,
    held to the end of the caller's transaction, makes a second writer wait and then
    find the partitions made.
    """
    wanted = set(days)
    if not wanted or not await _missing(connection, wanted):
        return []
    await connection.execute(
        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PARTITION_LOCK_KEY}
    )
    created = await _missing(connection, wanted)
    for day in created:
        await connection.execute(text(create_partition_sql(day)))
    return created


async def partition_days(connection: AsyncConnection) -> list[date]:
    """The days that have a partition, oldest first."""
    rows = await connection.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE i.inhparent = to_regclass('requests') AND n.nspname = :schema"
        ),
        {"schema": SCHEMA},
    )
    names = [row[0] for row in rows if row[0].startswith(PREFIX)]
    return sorted(datetime.strptime(name[len(PREFIX) :], "%Y%m%d").date() for name in names)


async def drop_partitions_before(connection: AsyncConnection, cutoff: date) -> list[date]:
    """Drop every partition whose whole day is before `cutoff`; return the days dropped."""
    dropped = [day for day in await partition_days(connection) if day < cutoff]
    if dropped:
        await connection.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PARTITION_LOCK_KEY}
        )
    for day in dropped:
        await connection.execute(text(f'DROP TABLE IF EXISTS {SCHEMA}."{partition_name(day)}"'))
    return dropped
