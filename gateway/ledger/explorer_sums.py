"""Request sums for the cost explorer, by time bucket and rollup key, read through the rollups.

The explorer's window is cut as `gateway.ledger.windows` cuts it: whole UTC days from
`rollup_daily`, whole hours from `rollup_hourly`, the partial hours at the edges from the
`requests` rows. Each piece is grouped by the same bucket text and keys, and a UNION ALL
adds them up, so the sums equal the rows' to the last digit (tests compare both ways).
Hour buckets never read the daily rollup (a day cannot be cut into hours). A reader
scoped to its own calls (`ReadScope.caller`, a column the rollups do not key) reads rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, literal, select

from gateway.ledger.rollup import ENCODED, FAMILIES, Family
from gateway.ledger.scope import EVERYTHING, ReadScope, request_rows
from gateway.ledger.store import REQUESTS
from gateway.ledger.windows import Piece, pieces

# Characters of SQLite's stored text ("2025-03-01 12:34:56.000000") that name the bucket.
_SQLITE_PREFIX = {"hour": 13, "day": 10}
_PG_FORMAT = {"hour": "YYYY-MM-DD HH24", "day": "YYYY-MM-DD"}
_PY_FORMAT = {"hour": "%Y-%m-%d %H", "day": "%Y-%m-%d"}
UNITS = tuple(_SQLITE_PREFIX)


@dataclass(frozen=True, slots=True)
class ExplorerFilter:
    """The rows a panel reads: the reader's scope, `since <= t < until`, one model alias."""

    scope: ReadScope = EVERYTHING
    since: datetime | None = None
    until: datetime | None = None
    model: str | None = None


def bucket_text(dialect: str, moment: Any, unit: str) -> ColumnElement[Any]:
    """The UTC hour or day of a timestamp column as text, the same on both databases."""
    if dialect == "sqlite":
        return func.substr(moment, 1, _SQLITE_PREFIX[unit])
    return func.to_char(func.date_trunc(unit, func.timezone("UTC", moment)), _PG_FORMAT[unit])


def bucket_start(text: str, unit: str) -> datetime:
    """The aware UTC start of a bucket named by `bucket_text`."""
    return datetime.strptime(text, _PY_FORMAT[unit]).replace(tzinfo=UTC)


def _pieces(f: ExplorerFilter, unit: str | None, use_rollups: bool, family: Family) -> list[Piece]:
    if not use_rollups or f.scope.caller is not None:
        return [Piece(REQUESTS, f.since, f.until)]
    cut = pieces(f.since, f.until, family)
    if unit != "hour":
        return cut
    return [Piece(family.hourly, p.since, p.until) if p.table is family.daily else p for p in cut]


def _key(table: Any, rows: bool, key: str) -> ColumnElement[Any]:
    """A key column; a nullable one read from the rows encoded as the rollups store it."""
    if rows and key in ENCODED:
        return func.coalesce(literal(":").concat(table.c[key]), "")
    return table.c[key]


def _piece_select(
    dialect: str, piece: Piece, f: ExplorerFilter, unit: str | None, keys: Sequence[str],
    measures: Sequence[str],
) -> Select[Any]:  # fmt: skip
    table, rows = piece.table, piece.table is REQUESTS
    moment = table.c.created_at if rows else table.c.bucket
    columns = [bucket_text(dialect, moment, unit).label("bucket")] if unit else []
    columns += [_key(table, rows, key).label(key) for key in keys]
    for name in measures:
        counted = func.count() if rows and name == "request_count" else func.sum(table.c[name])
        columns.append(counted.label(name))
    conditions = [request_rows(f.scope, table)] if rows else [
        table.c[name] == value
        for name, value in (("team", f.scope.team), ("project", f.scope.project))
        if value is not None
    ]  # fmt: skip
    if f.model is not None:
        conditions.append(table.c.model_alias == f.model)
    if piece.since is not None:
        conditions.append(moment >= piece.since)
    if piece.until is not None:
        conditions.append(moment < piece.until)
    return select(*columns).where(*conditions).group_by(*columns[: len(columns) - len(measures)])


def sums(
    dialect: str,
    f: ExplorerFilter,
    keys: Sequence[str],
    measures: Sequence[str],
    unit: str | None = None,
    use_rollups: bool = True,
    family: Family = FAMILIES[0],
) -> Select[Any]:
    """One SELECT of `measures` (request_count, token and cost columns) per bucket (if
    `unit`) and key column of `family` in `keys`, over the rows `f` selects; a nullable
    key comes back encoded ('' or ':' + the value, gateway.ledger.rollup)."""
    parts = [
        _piece_select(dialect, piece, f, unit, keys, measures)
        for piece in _pieces(f, unit, use_rollups, family)
    ]
    union = (parts[0] if len(parts) == 1 else parts[0].union_all(*parts[1:])).subquery()
    grouping = [union.c.bucket] if unit else []
    grouping += [union.c[key] for key in keys]
    outer = select(*grouping, *(func.sum(union.c[name]).label(name) for name in measures))
    return outer.group_by(*grouping) if grouping else outer
