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

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from operator import attrgetter
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger.driver import Prepared, prepare
from gateway.ledger.models import ROLLUP_DAILY as DAILY
from gateway.ledger.models import ROLLUP_HOURLY as HOURLY
from gateway.ledger.models import ROLLUP_PREFIX_DAILY as PREFIX_DAILY
from gateway.ledger.models import ROLLUP_PREFIX_HOURLY as PREFIX_HOURLY
from gateway.ledger.models import ROLLUP_STEPS_DAILY as STEPS_DAILY
from gateway.ledger.models import ROLLUP_STEPS_HOURLY as STEPS_HOURLY
from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord

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


# Every column any family keys on, and what the fine grouping of a batch sums.
_ALL_DIMENSIONS = tuple(dict.fromkeys((*DIMENSIONS, *STEP_DIMENSIONS, *PREFIX_DIMENSIONS)))
_dimensions_of = attrgetter(*_ALL_DIMENSIONS)
_SUMMED = (*TOKEN_FIELDS, *COST_FIELDS)
_SUMMED_GETTERS = tuple(attrgetter(name) for name in _SUMMED)
_EXTRA_GETTERS = {name: attrgetter(name) for name in PREFIX_EXTRA}
_cost_total = attrgetter("cost_total")


@dataclass(slots=True)
class _Group:
    """The records of one hour and one value of every dimension, with their sums."""

    records: list[RequestRecord]
    sums: dict[str, Any] | None = None

    def totals(self) -> dict[str, Any]:
        """The group's sums (summed here unless `add` was given every record)."""
        sums = self.sums
        if sums is None:
            sums = self.sums = _sums(self.records)
        return sums

    def add(self, records: list[RequestRecord]) -> None:
        """Add some of the group's records to its sums (a large group, a slice at a time)."""
        part = _sums(records)
        if self.sums is None:
            self.sums = part
        else:
            sums = self.sums
            for name, value in part.items():
                sums[name] += value


def _sums(records: list[RequestRecord]) -> dict[str, Any]:
    """Sum records column by column, each a C-level loop."""
    untasked = [record for record in records if is_untasked(record)]
    sums: dict[str, Any] = {"request_count": len(records)}
    for name, getter in zip(_SUMMED, _SUMMED_GETTERS, strict=True):
        sums[name] = sum(map(getter, records))
    sums["untasked_requests"] = sum(record.attempt == 0 for record in untasked)
    sums["untasked_cost"] = sum(map(_cost_total, untasked), Decimal(0))
    for name, getter in _EXTRA_GETTERS.items():
        sums[name] = sum(value or 0 for value in map(getter, records))
    return sums


def _group(records: Iterable[RequestRecord]) -> dict[tuple[Any, ...], _Group]:
    """Group records by hour and every dimension: each rollup key is a projection of this."""
    groups: dict[tuple[Any, ...], _Group] = {}
    group_into(groups, records)
    return groups


def group_into(groups: dict[tuple[Any, ...], _Group], records: Iterable[RequestRecord]) -> None:
    """Add `records` to `groups` (a batch is grouped a slice at a time)."""
    for record in records:
        key = (hour_of(record.created_at), *_dimensions_of(record))
        group = groups.get(key)
        if group is None:
            groups[key] = _Group([record])
        else:
            group.records.append(record)


def _projection(dimensions: tuple[str, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """Map a fine group's key (hour, every dimension raw) to this family's encoded values."""
    positions = [1 + _ALL_DIMENSIONS.index(name) for name in dimensions]
    encoded = [name in ENCODED for name in dimensions]

    def project(key: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            encode(key[position]) if coded else key[position]
            for position, coded in zip(positions, encoded, strict=True)
        )

    return project


def _rollup_rows(
    groups: dict[tuple[Any, ...], _Group],
    floor: Floor,
    dimensions: tuple[str, ...],
    extra: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Add the fine groups into one row per bucket and key of a rollup, sorted by key."""
    project = _projection(dimensions)
    names = (*MEASURES, *extra)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, group in groups.items():
        target = (floor(key[0]), *project(key))
        sums = group.totals()
        row = rows.get(target)
        if row is None:
            row = rows[target] = dict(zip(("bucket", *dimensions), target, strict=True))
            row.update({name: sums[name] for name in names})
        else:
            for name in names:
                row[name] += sums[name]
    return [rows[key] for key in sorted(rows)]


def rollup_deltas(
    records: Iterable[RequestRecord],
    floor: Floor,
    dimensions: tuple[str, ...] = DIMENSIONS,
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Sum records per bucket and key into the rows the upsert adds, sorted by key."""
    return _rollup_rows(_group(records), floor, dimensions, extra)


@cache
def _upsert(dialect: str, family: Family, table: Table) -> Any:
    """The rollup's `INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x`, built once.

    Built per flush it cost more CPU than the rows it carried (the `excluded` columns,
    the SET clause, and SQLAlchemy's cache key of a new statement object each time).
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql  # here: a SQLite ledger never loads it

        statement: Any = postgresql.insert(table)
    else:
        statement = sqlite.insert(table)
    changes = {name: table.c[name] + statement.excluded[name] for name in family.measures()}
    return statement.on_conflict_do_update(
        index_elements=["bucket", *family.dimensions], set_=changes
    )


async def add_to_rollups(connection: AsyncConnection, written: Sequence[RequestRecord]) -> None:
    """Add the rows just written to every rollup (same transaction), one row per key."""
    if not written:
        return
    # Group once by hour and all dimensions; each of the six rollups adds up those groups.
    for prepared, rows in statements(connection.dialect, _group(written)):
        await connection.exec_driver_sql(prepared.sql, rows)


def statements(
    dialect: Dialect, groups: dict[tuple[Any, ...], _Group]
) -> Iterator[tuple[Prepared, list[tuple[Any, ...]]]]:
    """Each rollup's upsert with its rows (as the driver takes them) for these groups."""
    for family in FAMILIES:
        for table, floor in family.grains():
            rows = _rollup_rows(groups, floor, family.dimensions, family.extra)
            statement = _upsert(dialect.name, family, table)
            prepared = prepare(dialect, statement, tuple(rows[0]))
            yield prepared, prepared.tuples(rows)
