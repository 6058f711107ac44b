"""The read side of the ledger: one task, spend by group, and cost per finished task.

Every function takes an `AsyncEngine`, `AsyncConnection` or `AsyncSession`. Money comes
back as exact `Decimal`; time windows are half-open, `since <= t < until`.

Task outcomes are kept apart: a *finished* task is one the client closed (`success`,
`failed`, or any outcome word it chose); an *abandoned* one was closed by the idle timeout,
and nobody knows whether it did its job; a request without a task id got a task of its own
(`task-` + its request id's hex) and is *untasked*, not a one-call task. Cost-per-task
statistics cover finished tasks unless the caller asks for other statuses.

Sums of requests by team, project, model, backend and tier are read through the rollups
(gateway.ledger.windows), which hold the same numbers; `use_rollups=False` reads the
`requests` rows instead (the tests compare both). An untasked request is counted at its
first attempt (attempt 0), so a request counts in one window only; its cost is that of
its attempts in the window.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, literal, not_, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from gateway.ledger import task_stats, windows
from gateway.ledger.ranked import Ranked, ranked_stats
from gateway.ledger.read_rows import SpendRow, TaskCostStats, TaskDetail, TaskOutcomes, TaskSummary
from gateway.ledger.records import ABANDONED, COST_FIELDS, OPEN, TOKEN_FIELDS, RequestRecord
from gateway.ledger.scope import EVERYTHING, ReadScope, request_rows, task_rows
from gateway.ledger.store import REQUESTS, TASKS

Database = AsyncEngine | AsyncConnection | AsyncSession

SPEND_GROUPS: dict[str, ColumnElement[Any]] = {
    "team": REQUESTS.c.team,
    "project": REQUESTS.c.project,
    "model": REQUESTS.c.model_alias,
    "backend": REQUESTS.c.backend,
    "tier": REQUESTS.c.tier_served,
    "step": REQUESTS.c.task_step,
    "step_kind": REQUESTS.c.step_kind,
}
TASK_GROUPS: dict[str, ColumnElement[Any]] = {"team": TASKS.c.team, "project": TASKS.c.project}
# A share is read by a person: 0.385 is 38.5 %, one decimal of a percentage.
SHARE_QUANTUM = Decimal("0.001")
FINISHED = "finished"
UNTASKED = "untasked"


async def _fetch(db: Database, statement: Select[Any]) -> Sequence[Row[Any]]:
    """Run a SELECT on whatever handle the caller has."""
    if isinstance(db, AsyncEngine):
        async with db.connect() as connection:
            return (await connection.execute(statement)).all()
    return (await db.execute(statement)).all()


def _in_window(
    covered: ColumnElement[bool], column: Any, since: datetime | None, until: datetime | None
) -> ColumnElement[bool]:
    """`covered` and `since <= column < until`."""
    conditions = [covered]
    if since is not None:
        conditions.append(column >= since)
    if until is not None:
        conditions.append(column < until)
    return and_(*conditions)


def _from_ranked(found: Ranked) -> TaskCostStats:
    """A group's statistics from `ranked_stats`."""
    total = found.sums["cost_total"]
    return TaskCostStats(
        group=found.key[0],
        finished_tasks=found.tasks,
        cost_total=total,
        cost_p50=found.percentiles[50],
        cost_p95=found.percentiles[95],
        cost_max=found.cost_max,
        output_share=_share(found.sums["cost_output"], total),
        reasoning_share=_share(found.sums["cost_reasoning"], total),
        cache_write_share=_share(found.sums["cost_cache_write"], total),
    )


def _window(
    statement: Select[Any], column: Any, since: datetime | None, until: datetime | None
) -> Select[Any]:
    """Restrict to `since <= column < until`."""
    if since is not None:
        statement = statement.where(column >= since)
    if until is not None:
        statement = statement.where(column < until)
    return statement


async def get_task(
    db: Database, task_id: str, *, scope: ReadScope = EVERYTHING
) -> TaskDetail | None:
    """Return a task's aggregates and its request rows, or None if it is unknown or
    outside `scope` (the two are told apart by no one)."""
    # One statement, so one snapshot: read in two, a task's total could miss rows that
    # another replica's writer committed in between (or count rows not yet listed).
    summary = [TASKS.c[f.name].label(f"task__{f.name}") for f in fields(TaskSummary)]
    calls = and_(REQUESTS.c.task_id == TASKS.c.task_id, request_rows(scope))
    rows = await _fetch(
        db,
        select(*summary, *REQUESTS.c)
        .select_from(TASKS.outerjoin(REQUESTS, calls))
        .where(TASKS.c.task_id == task_id, task_rows(scope))
        .order_by(REQUESTS.c.created_at, REQUESTS.c.attempt, REQUESTS.c.id),
    )
    if not rows:
        return None
    task = {f.name: rows[0]._mapping[f"task__{f.name}"] for f in fields(TaskSummary)}
    return TaskDetail(
        task=TaskSummary(**task),
        requests=[
            RequestRecord(**{column.name: row._mapping[column] for column in REQUESTS.c})
            for row in rows
            if row._mapping[REQUESTS.c.id] is not None
        ],
    )


def _group_column(groups: dict[str, ColumnElement[Any]], group_by: str) -> ColumnElement[Any]:
    """Look up a group-by column, with an error that lists the valid choices."""
    try:
        return groups[group_by]
    except KeyError:
        choices = ", ".join(sorted(groups))
        raise ValueError(f"cannot group by {group_by!r}; choose one of: {choices}") from None


def _spend_row(row: Row[Any]) -> SpendRow:
    """Build a SpendRow; SUM of no rows is NULL and PostgreSQL sums integers as numeric."""
    values: dict[str, Any] = {name: int(getattr(row, name) or 0) for name in TOKEN_FIELDS}
    for name in COST_FIELDS:
        total = getattr(row, name)
        values[name] = Decimal(0) if total is None else total
    return SpendRow(group=row.group, request_count=int(row.request_count), **values)


async def spend(
    db: Database,
    group_by: str = "team",
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    scope: ReadScope = EVERYTHING,
    use_rollups: bool = True,
) -> list[SpendRow]:
    """Sum requests, tokens and costs per group (a key of SPEND_GROUPS) in a time window,
    over the rows `scope` lets the reader see."""
    group = _group_column(SPEND_GROUPS, group_by)
    filters = {"team": scope.team, "project": scope.project}
    if use_rollups and scope.caller is None and windows.covers(group.name, filters):
        statement = windows.request_sums(group.name, since, until, filters)
    else:
        sums = [func.sum(REQUESTS.c[name]).label(name) for name in (*TOKEN_FIELDS, *COST_FIELDS)]
        statement = select(group.label("group"), func.count().label("request_count"), *sums)
        statement = statement.where(request_rows(scope))
        statement = _window(statement, REQUESTS.c.created_at, since, until).group_by(group)
    result = [_spend_row(row) for row in await _fetch(db, statement)]
    # Biggest spender first; the group name breaks ties so the order is stable.
    return sorted(result, key=lambda r: (-r.cost_total, r.group is None, r.group or ""))


def percentile(ordered: Sequence[Decimal], p: int) -> Decimal:
    """Return the nearest-rank `p`th percentile of ascending values (a value of the data)."""
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, -(-p * len(ordered) // 100))
    return ordered[rank - 1]


def _share(part: Decimal, whole: Decimal) -> Decimal:
    """Return part / whole to a tenth of a percent, or 0 when nothing was spent."""
    if not whole:
        return Decimal(0)
    return (part / whole).quantize(SHARE_QUANTUM, rounding=ROUND_HALF_EVEN)


def untasked_request(table: Any = REQUESTS) -> ColumnElement[bool]:
    """Whether a request row had no task id: its task is `task-` + its request id's hex."""
    return and_(
        table.c.task_id.startswith("task-", autoescape=True),
        table.c.request_id.startswith("req-", autoescape=True),
        func.substr(table.c.task_id, 6) == func.substr(table.c.request_id, 5),
    )


def untasked_task() -> ColumnElement[bool]:
    """Whether a task row is the gateway's wrapper around one request without a task id
    (the writer sets the flag when such a request lands; migration 0005 set the old ones)."""
    return TASKS.c.untasked


def _status_filter(statuses: Sequence[str] | None, include_abandoned: bool) -> ColumnElement[bool]:
    """The tasks the statistics cover: finished ones, plus abandoned, or the statuses asked."""
    if statuses:
        return TASKS.c.status.in_(list(statuses))
    if include_abandoned:
        return TASKS.c.status != OPEN
    return TASKS.c.status.not_in([OPEN, ABANDONED])


def _stats(group: str | None, rows: list[Row[Any]]) -> TaskCostStats:
    """Compute one group's cost-per-task statistics."""
    costs = sorted(row.cost_total for row in rows)
    total = sum(costs, Decimal(0))
    return TaskCostStats(
        group=group,
        finished_tasks=len(costs),
        cost_total=total,
        cost_p50=percentile(costs, 50),
        cost_p95=percentile(costs, 95),
        cost_max=costs[-1],
        output_share=_share(sum((row.cost_output for row in rows), Decimal(0)), total),
        reasoning_share=_share(sum((row.cost_reasoning for row in rows), Decimal(0)), total),
        cache_write_share=_share(sum((row.cost_cache_write for row in rows), Decimal(0)), total),
    )


async def task_cost_stats(
    db: Database,
    group_by: str = "team",
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    statuses: Sequence[str] | None = None,
    include_abandoned: bool = False,
    scope: ReadScope = EVERYTHING,
    sql_percentiles: bool = True,
) -> list[TaskCostStats]:
    """Per group: tasks ended in the window (by finished_at) and their cost spread.

    Finished tasks only (closed by the client, with any outcome), unless `include_abandoned`
    adds those the idle timeout closed, or `statuses` names the outcomes to cover. Untasked
    requests are never tasks here (see `task_outcomes`), nor is a task with no request row
    (a finish that arrived for a task never seen). On PostgreSQL the database computes
    the statistics (gateway.ledger.task_stats) unless `sql_percentiles` is False.
    """
    group = _group_column(TASK_GROUPS, group_by)
    covered = and_(
        _status_filter(statuses, include_abandoned),
        TASKS.c.request_count > 0,
        not_(untasked_task()),
        task_rows(scope),
    )
    if sql_percentiles and _dialect(db) == "postgresql" and group_by in ("team", "project"):
        # Exact percentiles by rank over ix_tasks_team_cost or ix_tasks_project_cost
        # (gateway.ledger.ranked).
        found = [_from_ranked(r) for r in await ranked_stats(db, [group], _in_window(
            covered, TASKS.c.finished_at, since, until))]  # fmt: skip
        return sorted(found, key=lambda s: (s.group is None, s.group or ""))
    if sql_percentiles and _dialect(db) == "postgresql":
        in_sql = _window(task_stats.sql_stats(group, covered), TASKS.c.finished_at, since, until)
        found = [TaskCostStats(**task_stats.from_sql(row)) for row in await _fetch(db, in_sql)]
        return sorted(found, key=lambda s: (s.group is None, s.group or ""))
    statement: Select[Any] = select(
        group.label("group"),
        TASKS.c.cost_total,
        TASKS.c.cost_output,
        TASKS.c.cost_reasoning,
        TASKS.c.cost_cache_write,
    ).where(covered)
    rows = await _fetch(db, _window(statement, TASKS.c.finished_at, since, until))
    by_group: dict[str | None, list[Row[Any]]] = {}
    for row in rows:
        by_group.setdefault(row.group, []).append(row)
    ordered = sorted(by_group, key=lambda g: (g is None, g or ""))
    return [_stats(key, by_group[key]) for key in ordered]


async def task_outcomes(
    db: Database,
    group_by: str = "team",
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    scope: ReadScope = EVERYTHING,
    use_rollups: bool = True,
) -> list[TaskOutcomes]:
    """Per group: finished and abandoned tasks (by finished_at) and untasked requests (by
    created_at), each counted and costed on its own line, within `scope`."""
    task_group, abandoned = _group_column(TASK_GROUPS, group_by), TASKS.c.status == ABANDONED
    ended = select(
        task_group.label("group"),
        abandoned.label("abandoned"),
        func.count().label("count"),
        func.sum(TASKS.c.cost_total).label("cost"),
    ).where(
        TASKS.c.status != OPEN,
        TASKS.c.request_count > 0,
        not_(untasked_task()),
        task_rows(scope),
    )
    ended = _window(ended, TASKS.c.finished_at, since, until).group_by(task_group, abandoned)
    loose = _loose(_group_column(SPEND_GROUPS, group_by), since, until, scope, use_rollups)
    totals: dict[str | None, dict[str, Any]] = {}
    for row in await _fetch(db, ended):
        kind = ABANDONED if row.abandoned else FINISHED
        _add_outcome(totals, row.group, kind, row.count, row.cost)
    for row in await _fetch(db, loose):
        if row.untasked_requests or row.untasked_cost:
            _add_outcome(totals, row.group, UNTASKED, row.untasked_requests, row.untasked_cost)
    ordered = sorted(totals, key=lambda g: (g is None, g or ""))
    return [TaskOutcomes(group=key, **totals[key]) for key in ordered]


def _loose(
    group: ColumnElement[Any],
    since: datetime | None,
    until: datetime | None,
    scope: ReadScope,
    use_rollups: bool,
) -> Select[Any]:
    """Untasked requests (at their first attempt) and their attempts' cost per group."""
    if use_rollups and scope.caller is None:
        filters = {"team": scope.team, "project": scope.project}
        return windows.request_sums(group.name, since, until, filters)
    untasked, zero = untasked_request(), literal(0, REQUESTS.c.cost_total.type)
    statement = select(
        group.label("group"),
        func.sum(case((and_(untasked, REQUESTS.c.attempt == 0), 1), else_=0)).label(
            "untasked_requests"
        ),
        func.sum(case((untasked, REQUESTS.c.cost_total), else_=zero)).label("untasked_cost"),
    ).where(untasked, request_rows(scope))
    return _window(statement, REQUESTS.c.created_at, since, until).group_by(group)


def _dialect(db: Database) -> str:
    """The name of the database behind any handle."""
    if isinstance(db, AsyncSession):
        return db.get_bind().dialect.name
    return db.dialect.name


def _add_outcome(
    totals: dict[str | None, dict[str, Any]], group: str | None, kind: str, count: Any, cost: Any
) -> None:
    zero = Decimal(0)
    line = totals.setdefault(
        group,
        {"finished_tasks": 0, "finished_cost": zero, "abandoned_tasks": 0,
         "abandoned_cost": zero, "untasked_requests": 0, "untasked_cost": zero},
    )  # fmt: skip
    counted = "untasked_requests" if kind == UNTASKED else f"{kind}_tasks"
    line[counted] += int(count)
    line[f"{kind}_cost"] += Decimal(0) if cost is None else cost


# A spreadsheet runs a cell starting with one of these as a formula (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    """Render one CSV cell: Decimals in plain notation, never `1E-10`; text that a
    spreadsheet would run as a formula gets a leading `'` (numbers stay numbers)."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}" if value.startswith(FORMULA_STARTS) else value
    return str(value)


def export_csv(rows: Sequence[Any], row_type: type | None = None) -> str:
    """Render dataclass rows (SpendRow, TaskCostStats, ...) as CSV with a header line.

    With no rows, pass `row_type` to still get the header; otherwise the result is empty.
    """
    shape = row_type or (type(rows[0]) if rows else None)
    if shape is None:
        return ""
    names = [f.name for f in fields(shape)]
    buffer = io.StringIO()
    # RFC 4180's CRLF: Python's writer quotes a cell holding a character of the line
    # terminator, so a stray CR (or LF) stays inside its quoted cell instead of ending the row.
    out = csv.writer(buffer, lineterminator="\r\n")
    out.writerow(names)
    for row in rows:
        out.writerow([_cell(getattr(row, name)) for name in names])
    return buffer.getvalue()
