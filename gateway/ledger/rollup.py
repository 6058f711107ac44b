"""Rollup tables: request sums per hour and per day, kept in the transaction that writes the rows.

`insert_requests` (gateway.ledger.store) hands `add_to_rollups` exactly the records its
`ON CONFLICT DO NOTHING` wrote, so a replayed spool segment adds nothing twice: a rollup
row always equals the sum of the request rows of its bucket and key (tested against the
base table in tests/ledger/test_rollup_equality.py). Each batch adds its aggregates with
one `INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x` per grain, keys sorted so
concurrent writers lock rows in the same order.

Two families of rollups, each per hour and per day: `rollup_*` keyed by (bucket, team,
project, model_alias, backend, tier_served) and `rollup_steps_*` keyed by (bucket, team,
project, task_step, step_kind). The sums are the request count, the token and cost
columns, and the untasked requests (counted at their first attempt, attempt 0) with the
cost of all their attempts. A step or kind may be missing: in a key it is stored as ''
and a present one as ':' + the value (`encode`), so NULL never meets a real value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger.models import (
    DailyRollupRow,
    DailyStepRollupRow,
    HourlyRollupRow,
    HourlyStepRollupRow,
)
from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord

HOURLY: Table = HourlyRollupRow.__table__  # type: ignore[assignment]
DAILY: Table = DailyRollupRow.__table__  # type: ignore[assignment]
STEPS_HOURLY: Table = HourlyStepRollupRow.__table__  # type: ignore[assignment]
STEPS_DAILY: Table = DailyStepRollupRow.__table__  # type: ignore[assignment]
DIMENSIONS = ("team", "project", "model_alias", "backend", "tier_served")
STEP_DIMENSIONS = ("team", "project", "task_step", "step_kind")
ENCODED = frozenset({"task_step", "step_kind"})  # nullable: encoded in a key
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


@dataclass(frozen=True, slots=True)
class Family:
    """Rollups keyed by the same columns: (hourly, daily)."""

    dimensions: tuple[str, ...]
    hourly: Table
    daily: Table

    def grains(self) -> tuple[tuple[Table, Floor], ...]:
        return ((self.hourly, hour_of), (self.daily, day_of))


FAMILIES = (Family(DIMENSIONS, HOURLY, DAILY), Family(STEP_DIMENSIONS, STEPS_HOURLY, STEPS_DAILY))


def encode(value: str | None) -> str:
    """A nullable key column's value as stored in a rollup key."""
    return "" if value is None else f":{value}"


def key_of(record: RequestRecord, name: str) -> str:
    """The rollup key value of one column of a record."""
    value = getattr(record, name)
    return encode(value) if name in ENCODED else value


def is_untasked(record: RequestRecord) -> bool:
    """Whether the record's task is the gateway's wrapper of one request without a task id."""
    return (
        record.task_id.startswith("task-")
        and record.request_id.startswith("req-")
        and record.task_id[5:] == record.request_id[4:]
    )


def rollup_deltas(
    records: Iterable[RequestRecord], floor: Floor, dimensions: tuple[str, ...] = DIMENSIONS
) -> list[dict[str, Any]]:
    """Sum records per bucket and key into the rows the upsert adds, sorted by key."""
    deltas: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        key = (floor(record.created_at), *(key_of(record, name) for name in dimensions))
        delta = deltas.get(key)
        if delta is None:
            delta = deltas[key] = dict(zip(("bucket", *dimensions), key, strict=True))
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
    """Add the rows just written to every rollup (same transaction)."""
    if not written:
        return
    for family in FAMILIES:
        for table, floor in family.grains():
            statement = _insert(connection, table)
            changes = {name: table.c[name] + statement.excluded[name] for name in MEASURES}
            upsert = statement.on_conflict_do_update(
                index_elements=["bucket", *family.dimensions], set_=changes
            )
            await connection.execute(upsert, rollup_deltas(written, floor, family.dimensions))
