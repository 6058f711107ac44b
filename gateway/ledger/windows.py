"""Read request sums through the rollups: a time window split into days, hours and the rest.

A window `since <= t < until` is cut into whole UTC days (read from `rollup_daily`), the
whole hours around them (`rollup_hourly`) and the partial hours at its edges (the
`requests` rows themselves, at most two hours of them). The pieces are disjoint and
cover the window, so the sums equal the base table's to the last digit; each piece
returns the same labelled columns and `request_sums` adds them up in SQL.

Only sums by the rollup's key columns can be read this way; a grouping or a filter on
anything else (a step, a caller) reads the `requests` table (see queries.spend).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, and_, case, func, literal, select
from sqlalchemy.sql.selectable import Subquery

from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS
from gateway.ledger.rollup import (
    ENCODED,
    FAMILIES,
    MEASURES,
    Family,
    day_of,
    hour_of,
)
from gateway.ledger.store import REQUESTS

HOUR, DAY = timedelta(hours=1), timedelta(days=1)
# The default family's tables (team, project, model, backend, tier), read by explorer_sums.
HOURLY, DAILY = FAMILIES[0].hourly, FAMILIES[0].daily


@dataclass(frozen=True, slots=True)
class Piece:
    """One part of a window and the table that answers it; None is an open end."""

    table: Table
    since: datetime | None
    until: datetime | None


def _ceil(moment: datetime, floor: Any, step: timedelta) -> datetime:
    start = floor(moment)
    return start if start == moment else start + step


def pieces(
    since: datetime | None, until: datetime | None, family: Family = FAMILIES[0]
) -> list[Piece]:
    """Cut `since <= t < until` into disjoint pieces: edges, hours, days, hours, edges."""
    hourly, daily = family.hourly, family.daily
    h_lo = None if since is None else _ceil(since, hour_of, HOUR)
    h_hi = None if until is None else hour_of(until)
    if h_lo is not None and h_hi is not None and h_lo >= h_hi:
        return [Piece(REQUESTS, since, until)]
    found: list[Piece] = []
    if since is not None and h_lo is not None and since < h_lo:
        found.append(Piece(REQUESTS, since, h_lo))
    d_lo = None if h_lo is None else _ceil(h_lo, day_of, DAY)
    d_hi = None if h_hi is None else day_of(h_hi)
    if d_lo is None or d_hi is None or d_lo < d_hi:
        if h_lo is not None and d_lo is not None and h_lo < d_lo:
            found.append(Piece(hourly, h_lo, d_lo))
        found.append(Piece(daily, d_lo, d_hi))
        if h_hi is not None and d_hi is not None and d_hi < h_hi:
            found.append(Piece(hourly, d_hi, h_hi))
    else:
        found.append(Piece(hourly, h_lo, h_hi))
    if until is not None and h_hi is not None and h_hi < until:
        found.append(Piece(REQUESTS, h_hi, until))
    return found


def untasked_row(table: Any = REQUESTS) -> ColumnElement[bool]:
    """Whether a request row had no task id: its task is `task-` + its request id's hex."""
    return and_(
        func.substr(table.c.task_id, 1, 5) == "task-",
        func.substr(table.c.request_id, 1, 4) == "req-",
        func.substr(table.c.task_id, 6) == func.substr(table.c.request_id, 5),
    )


def _base_measures() -> list[ColumnElement[Any]]:
    """The rollup's sums computed from request rows, in MEASURES order (a UNION matches
    columns by position, not by name)."""
    untasked = untasked_row()
    zero = literal(0, REQUESTS.c.cost_total.type)
    sums: dict[str, ColumnElement[Any]] = {
        name: func.sum(REQUESTS.c[name]) for name in (*TOKEN_FIELDS, *COST_FIELDS)
    }
    sums["request_count"] = func.count()
    sums["untasked_requests"] = func.sum(
        case((and_(untasked, REQUESTS.c.attempt == 0), 1), else_=0)
    )
    sums["untasked_cost"] = func.sum(case((untasked, REQUESTS.c.cost_total), else_=zero))
    return [sums[name].label(name) for name in MEASURES]


def _piece_select(piece: Piece, group: str | None, filters: dict[str, str | None]) -> Select[Any]:
    """The sums of one piece, grouped by `group` (a rollup key column) if given."""
    table = piece.table
    moment = table.c.created_at if table is REQUESTS else table.c.bucket
    if table is REQUESTS:
        measures = _base_measures()
    else:
        measures = [func.sum(table.c[name]).label(name) for name in MEASURES]
    key: ColumnElement[Any] = literal(None)
    if group and table is not REQUESTS and group in ENCODED:  # '' is NULL, ':x' is x
        key = case((table.c[group] == "", None), else_=func.substr(table.c[group], 2))
    elif group:
        key = table.c[group]
    statement = select(key.label("group"), *measures).where(
        *(table.c[name] == value for name, value in filters.items() if value is not None)
    )
    if piece.since is not None:
        statement = statement.where(moment >= piece.since)
    if piece.until is not None:
        statement = statement.where(moment < piece.until)
    return statement.group_by(table.c[group]) if group else statement


def request_sums(
    group: str | None,
    since: datetime | None,
    until: datetime | None,
    filters: dict[str, str | None],
) -> Select[Any]:
    """One SELECT of the request sums per `group` in the window, through the rollups.

    `group` and the filters that are set must all be key columns of one family.
    """
    family = family_for(group, filters)
    if family is None:
        raise ValueError(f"no rollup is keyed by {group!r} and {sorted(filters)}")
    parts = [_piece_select(piece, group, filters) for piece in pieces(since, until, family)]
    union: Subquery = (parts[0] if len(parts) == 1 else parts[0].union_all(*parts[1:])).subquery()
    outer = select(union.c.group, *(func.sum(union.c[name]).label(name) for name in MEASURES))
    return outer.group_by(union.c.group)


def family_for(group: str | None, filters: dict[str, str | None]) -> Family | None:
    """The first rollup family keyed by `group` and every filter that is set."""
    wanted = {name for name, value in filters.items() if value is not None}
    wanted |= {group} if group else set()
    return next((f for f in FAMILIES if wanted <= set(f.dimensions)), None)


def covers(group: str | None, filters: dict[str, str | None]) -> bool:
    """Whether a rollup can answer a grouping and these filters."""
    return family_for(group, filters) is not None
