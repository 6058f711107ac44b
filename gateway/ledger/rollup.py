"""Rollup tables: request sums per hour and per day, kept in the transaction that writes the rows.

`insert_requests` (gateway.ledger.store) hands `add_to_rollups` exactly the records its
`ON CONFLICT DO NOTHING` wrote, so a replayed spool segment adds nothing twice: a rollup
row always equals the sum of the request rows of its bucket and key (tested against the
base table in tests/ledger/test_rollup_equality.py). Each batch adds its aggregates with
one `INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x` per grain, keys sorted so
concurrent writers lock rows in the same order.

Three families of rollups, each per hour and per day: `rollup_*` keyed by (bucket, team,
project, model_alias, backend, tier_served), `rollup_steps_*` keyed by (bucket, team,
project, task_step, step_kind) and `rollup_prefix_*` keyed by (bucket, team, project,
model_alias, tier_served, prefix_status), which adds two sums: expected cached tokens and
the money prefix breaks lost (migration 0007, for the explorer's prefix panel; 0008 added
the tier, which the Grafana prefix panel filters on). The sums are the
request count, the token and cost columns, and the untasked requests (counted at their
first attempt, attempt 0) with the cost of all their attempts. A step, kind or prefix
verdict may be missing: in a key it is stored as '' and a present one as ':' + the value
(`encode`), so NULL never meets a real value.
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
    DailyPrefixRollupRow,
    DailyRollupRow,
    DailyStepRollupRow,
    HourlyPrefixRollupRow,
    HourlyRollupRow,
    HourlyStepRollupRow,
)
from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord

HOURLY: Table = HourlyRollupRow.__table__  # type: ignore[assignment]
DAILY: Table = DailyRollupRow.__table__  # type: ignore[assignment]
STEPS_HOURLY: Table = HourlyStepRollupRow.__table__  # type: ignore[assignment]
STEPS_DAILY: Table = DailyStepRollupRow.__table__  # type: ignore[assignment]
PREFIX_HOURLY: Table = HourlyPrefixRollupRow.__table__  # type: ignore[assignment]
PREFIX_DAILY: Table = DailyPrefixRollupRow.__table__  # type: ignore[assignment]
DIMENSIONS = ("team", "project", "model_alias", "backend", "tier_served")
STEP_DIMENSIONS = ("team", "project", "task_step", "step_kind")
PREFIX_DIMENSIONS = ("team", "project", "model_alias", "tier_served", "prefix_status")
PREFIX_EXTRA = ("expected_cached_tokens", "prefix_lost_usd")  # nullable: summed as 0
ENCODED = frozenset({"task_step", "step_kind", "prefix_status"})  # nullable: encoded in a key
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
    extra: tuple[str, ...] = ()  # sums beyond MEASURES

    def measures(self) -> tuple[str, ...]:
        return (*MEASURES, *self.extra)

    def grains(self) -> tuple[tuple[Table, Floor], ...]:
        return ((self.hourly, hour_of), (self.daily, day_of))


FAMILIES = (
    Family(DIMENSIONS, HOURLY, DAILY),
    Family(STEP_DIMENSIONS, STEPS_HOURLY, STEPS_DAILY),
    Family(PREFIX_DIMENSIONS, PREFIX_HOURLY, PREFIX_DAILY, PREFIX_EXTRA),
)
PREFIX = FAMILIES[2]


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
    records: Iterable[RequestRecord],
    floor: Floor,
    dimensions: tuple[str, ...] = DIMENSIONS,
    extra: tuple[str, ...] = (),
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
            delta.update({name: 0 for name in extra})
        delta["request_count"] += 1
        for name in (*TOKEN_FIELDS, *COST_FIELDS):
            delta[name] += getattr(record, name)
        for name in extra:
            delta[name] += getattr(record, name) or 0
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
            changes = {name: table.c[name] + statement.excluded[name] for name in family.measures()}
            upsert = statement.on_conflict_do_update(
                index_elements=["bucket", *family.dimensions], set_=changes
            )
            deltas = rollup_deltas(written, floor, family.dimensions, family.extra)
            await connection.execute(upsert, deltas)
