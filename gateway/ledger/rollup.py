"""Rollup tables: request sums per hour and per day, kept in the transaction that writes the rows.

`insert_requests` (gateway.ledger.store) hands `add_to_rollups` exactly the records its
`ON CONFLICT DO NOTHING` wrote, so a replayed spool segment adds nothing twice: a rollup
row always equals the sum of the request rows of its bucket and key (tested against the
base table in tests/ledger/test_rollup_equality.py). Each batch adds its aggregates with
one `INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x` per grain, keys sorted so
concurrent writers lock rows in the same order.

The key is (bucket, team, project, model_alias, backend, tier_served); the sums are the
request count, the token and cost columns, and the untasked requests (counted at their
first attempt, attempt 0) with the cost of all their attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger.models import DailyRollupRow, HourlyRollupRow
from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord

HOURLY: Table = HourlyRollupRow.__table__  # type: ignore[assignment]
DAILY: Table = DailyRollupRow.__table__  # type: ignore[assignment]
DIMENSIONS = ("team", "project", "model_alias", "backend", "tier_served")
COUNTS = ("request_count", *TOKEN_FIELDS, "untasked_requests")
MONEY = (*COST_FIELDS, "untasked_cost")
MEASURES = (*COUNTS, *MONEY)

Floor = Callable[[datetime], datetime]


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour holding `moment`."""
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    """The start of the UTC day holding `moment`."""
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


GRAINS: tuple[tuple[Table, Floor], ...] = ((HOURLY, hour_of), (DAILY, day_of))


def is_untasked(record: RequestRecord) -> bool:
    """Whether the record's task is the gateway's wrapper of one request without a task id."""
    return (
        record.task_id.startswith("task-")
        and record.request_id.startswith("req-")
        and record.task_id[5:] == record.request_id[4:]
    )


def rollup_deltas(records: Iterable[RequestRecord], floor: Floor) -> list[dict[str, Any]]:
    """Sum records per bucket and key into the rows the upsert adds, sorted by key."""
    deltas: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        key = (floor(record.created_at), *(getattr(record, name) for name in DIMENSIONS))
        delta = deltas.get(key)
        if delta is None:
            delta = deltas[key] = dict(zip(("bucket", *DIMENSIONS), key, strict=True))
            delta.update({name: 0 for name in COUNTS})
            delta.update({name: Decimal(0) for name in MONEY})
        delta["request_count"] += 1
        for name in (*TOKEN_FIELDS, *COST_FIELDS):
            delta[name] += getattr(record, name)
        if is_untasked(record):
            delta["untasked_requests"] += record.attempt == 0
            delta["untasked_cost"] += record.cost_total
    return [deltas[key] for key in sorted(deltas)]


def _insert(connection: AsyncConnection, table: Table) -> Any:
    """The dialect's INSERT that knows ON CONFLICT."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


async def add_to_rollups(connection: AsyncConnection, written: Sequence[RequestRecord]) -> None:
    """Add the rows just written to the hourly and daily rollups (same transaction)."""
    if not written:
        return
    for table, floor in GRAINS:
        statement = _insert(connection, table)
        changes = {name: table.c[name] + statement.excluded[name] for name in MEASURES}
        upsert = statement.on_conflict_do_update(
            index_elements=["bucket", *DIMENSIONS], set_=changes
        )
        await connection.execute(upsert, rollup_deltas(written, floor))
