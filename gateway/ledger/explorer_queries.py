"""The cost explorer's reads: spend over time, where the money went, cache money, task costs.

Each takes an `ExplorerFilter` (the reader's `ReadScope`, a half-open time window and an
optional model alias) and applies all of it inside the SQL, as `gateway.ledger.queries`
does. Sums by team, project, model, backend and tier are read through the rollups
(`gateway.ledger.explorer_sums`; `use_rollups=False` reads the rows, and the tests compare
both); time buckets are computed by the database and come back as aware UTC datetimes.
Prefix verdicts read the `rollup_prefix_*` tables; tasks read `tasks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Executable,
    and_,
    exists,
    not_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger.explorer_sums import UNITS, ExplorerFilter, bucket_start, sums
from gateway.ledger.queries import SHARE_QUANTUM, percentile, untasked_task
from gateway.ledger.ranked import Ranked, ranked_stats
from gateway.ledger.records import COST_FIELDS, OPEN, TOKEN_FIELDS
from gateway.ledger.rollup import PREFIX
from gateway.ledger.scope import request_rows, task_rows
from gateway.ledger.store import REQUESTS, TASKS

SERIES_GROUPS = {"team": "team", "project": "project", "model": "model_alias",
                 "backend": "backend", "tier": "tier_served"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """Requests and cost of one group in one time bucket."""

    start: datetime
    group: str | None
    request_count: int
    cost_total: Decimal


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where the money went: tokens and cost per kind, and the shares a reader looks for."""

    request_count: int
    tokens: dict[str, int]
    cost: dict[str, Decimal]  # input, cached, cache_write, output, reasoning, total
    output_share: Decimal
    reasoning_share: Decimal
    output_and_reasoning_share: Decimal


@dataclass(frozen=True, slots=True)
class CacheUse:
    """Cache reads of one model and tier: what they cost, to be priced against full input."""

    model: str
    tier: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cost_cached: Decimal


@dataclass(frozen=True, slots=True)
class PrefixVerdicts:
    """How many requests got each verdict (`hit`, `miss`, ...) and what the breaks cost."""

    verdict: str
    requests: int
    lost_usd: Decimal


@dataclass(frozen=True, slots=True)
class BreakCause:
    """Requests whose prompt prefix diverged for one reason, and the cache money it lost."""

    reason: str
    requests: int
    lost_usd: Decimal
    expected_cached_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class OutcomeStats:
    """Cost per task of one team and outcome; percentiles are nearest-rank, so exact."""

    team: str | None
    outcome: str
    tasks: int
    cost_total: Decimal
    cost_p50: Decimal
    cost_p95: Decimal
    cost_max: Decimal


@dataclass(frozen=True, slots=True)
class TopTask:
    """One of the most expensive tasks."""

    task_id: str
    team: str | None
    project: str | None
    status: str
    request_count: int
    started_at: datetime
    finished_at: datetime | None
    cost_total: Decimal
    cost_output: Decimal
    cost_reasoning: Decimal


async def _rows(engine: AsyncEngine, statement: Executable) -> Sequence[Any]:
    async with engine.connect() as connection:
        return (await connection.execute(statement)).all()


def _requests_where(f: ExplorerFilter) -> ColumnElement[bool]:
    """The request rows `f` selects."""
    conditions = [request_rows(f.scope)]
    if f.since is not None:
        conditions.append(REQUESTS.c.created_at >= f.since)
    if f.until is not None:
        conditions.append(REQUESTS.c.created_at < f.until)
    if f.model is not None:
        conditions.append(REQUESTS.c.model_alias == f.model)
    return and_(*conditions)


def _tasks_where(f: ExplorerFilter, column: Any) -> ColumnElement[bool]:
    """Tasks of `f`'s scope with `column` in the window; with a model, those that called it."""
    conditions = [task_rows(f.scope), TASKS.c.request_count > 0, not_(untasked_task())]
    if f.since is not None:
        conditions.append(column >= f.since)
    if f.until is not None:
        conditions.append(column < f.until)
    if f.model is not None:
        calls = REQUESTS.alias("by_model")
        conditions.append(
            exists().where(calls.c.task_id == TASKS.c.task_id, calls.c.model_alias == f.model)
        )
    return and_(*conditions)


async def spend_series(
    engine: AsyncEngine, by: str, unit: str, f: ExplorerFilter, use_rollups: bool = True
) -> list[SeriesPoint]:
    """Requests and cost per `unit` bucket (hour or day) and group, oldest bucket first."""
    if by not in SERIES_GROUPS or unit not in UNITS:
        raise ValueError(f"cannot bucket by {unit!r} and group by {by!r}")
    key = SERIES_GROUPS[by]
    measures = ("request_count", "cost_total")
    statement = sums(engine.dialect.name, f, [key], measures, unit, use_rollups)
    points = [
        SeriesPoint(bucket_start(row.bucket, unit), row[1], int(row.request_count), row.cost_total)
        for row in await _rows(engine, statement)
    ]
    return sorted(points, key=lambda p: (p.start, p.group is None, p.group or ""))


async def money_breakdown(
    engine: AsyncEngine, f: ExplorerFilter, use_rollups: bool = True
) -> Breakdown:
    """Tokens and cost by kind over the selected requests."""
    measures = ("request_count", *TOKEN_FIELDS, *COST_FIELDS)
    [row] = await _rows(engine, sums(engine.dialect.name, f, [], measures, None, use_rollups))
    tokens = {name: int(getattr(row, name) or 0) for name in TOKEN_FIELDS}
    cost = {name.removeprefix("cost_"): getattr(row, name) or Decimal(0) for name in COST_FIELDS}
    total = cost["total"]
    return Breakdown(
        request_count=int(row.request_count or 0),
        tokens=tokens,
        cost=cost,
        output_share=share(cost["output"], total),
        reasoning_share=share(cost["reasoning"], total),
        output_and_reasoning_share=share(cost["output"] + cost["reasoning"], total),
    )


async def cache_use(
    engine: AsyncEngine, f: ExplorerFilter, use_rollups: bool = True
) -> list[CacheUse]:
    """Cache reads per model and tier served, the ones with any first."""
    measures = ("request_count", "prompt_tokens", "cached_tokens", "cost_cached")
    keys = ("model_alias", "tier_served")
    statement = sums(engine.dialect.name, f, keys, measures, None, use_rollups)
    found = [
        CacheUse(
            row.model_alias,
            row.tier_served,
            int(row.request_count or 0),
            int(row.prompt_tokens or 0),
            int(row.cached_tokens or 0),
            row.cost_cached or Decimal(0),
        )
        for row in await _rows(engine, statement)
    ]
    return sorted(found, key=lambda c: (-c.cached_tokens, c.model, c.tier))


async def prefix_breaks(
    engine: AsyncEngine, f: ExplorerFilter, use_rollups: bool = True
) -> tuple[list[PrefixVerdicts], list[BreakCause]]:
    """Requests per prefix verdict, and per divergence reason (`miss:volatile_value` is a
    miss whose reason is `volatile_value`), the costliest reason first. Read through the
    `rollup_prefix_*` tables (`use_rollups=False` reads the rows)."""
    measures = ("request_count", "prefix_lost_usd", "expected_cached_tokens", "cached_tokens")
    statement = sums(engine.dialect.name, f, ["prefix_status"], measures, None, use_rollups,
                     PREFIX)  # fmt: skip
    verdicts: dict[str, list[Any]] = {}
    causes: dict[str, list[Any]] = {}
    for row in await _rows(engine, statement):
        if not row.prefix_status:
            continue  # no verdict ('' in the key)
        verdict, _, reason = row.prefix_status[1:].partition(":")
        lost, requests = row.prefix_lost_usd or Decimal(0), int(row.request_count)
        _add(verdicts, verdict, requests, lost)
        if reason:
            _add(causes, reason, requests, lost, int(row.expected_cached_tokens or 0),
                 int(row.cached_tokens or 0))  # fmt: skip
    return (
        sorted(
            (PrefixVerdicts(name, *values) for name, values in verdicts.items()),
            key=lambda v: (-v.requests, v.verdict),
        ),
        sorted(
            (BreakCause(name, *values) for name, values in causes.items()),
            key=lambda c: (-c.lost_usd, -c.requests, c.reason),
        ),
    )


def share(part: Decimal, whole: Decimal) -> Decimal:
    """part / whole to a tenth of a percent (as `/v1/spend/tasks` rounds), 0 of nothing."""
    if not whole:
        return Decimal(0)
    return (part / whole).quantize(SHARE_QUANTUM, rounding=ROUND_HALF_EVEN)


def _add(totals: dict[str, list[Any]], key: str, *values: Any) -> None:
    line = totals.setdefault(key, [0 * value for value in values])
    for index, value in enumerate(values):
        line[index] += value


async def outcome_stats(engine: AsyncEngine, f: ExplorerFilter) -> list[OutcomeStats]:
    """Cost per ended task by team and outcome (abandoned ones on lines of their own),
    over tasks that ended in the window (by `finished_at`). PostgreSQL reads the
    nearest-rank percentiles by rank off an index (gateway.ledger.ranked); SQLite has no
    such index-only reads, so its rows are sorted here."""
    covered = and_(TASKS.c.status != OPEN, _tasks_where(f, TASKS.c.finished_at))
    if engine.dialect.name == "postgresql":
        found = await ranked_stats(engine, [TASKS.c.team, TASKS.c.status], covered)
        stats = [_from_ranked(r) for r in found]
    else:
        statement = select(TASKS.c.team, TASKS.c.status, TASKS.c.cost_total).where(covered)
        groups: dict[tuple[str | None, str], list[Decimal]] = {}
        for row in await _rows(engine, statement):
            groups.setdefault((row.team, row.status), []).append(row.cost_total)
        stats = [
            _from_costs(team, outcome, sorted(costs)) for (team, outcome), costs in groups.items()
        ]
    return sorted(stats, key=lambda s: (s.team is None, s.team or "", s.outcome))


def _from_costs(team: str | None, outcome: str, costs: list[Decimal]) -> OutcomeStats:
    total = sum(costs, Decimal(0))
    p50, p95 = percentile(costs, 50), percentile(costs, 95)
    return OutcomeStats(team, outcome, len(costs), total, p50, p95, costs[-1])


def _from_ranked(found: Ranked) -> OutcomeStats:
    team, outcome = found.key
    return OutcomeStats(team, outcome, found.tasks, found.sums["cost_total"],
                        found.percentiles[50], found.percentiles[95], found.cost_max)  # fmt: skip


async def top_tasks(engine: AsyncEngine, f: ExplorerFilter, limit: int) -> list[TopTask]:
    """The `limit` costliest tasks that started in the window, open ones included."""
    columns = [TASKS.c[name] for name in TopTask.__dataclass_fields__]
    statement = (
        select(*columns)
        .where(_tasks_where(f, TASKS.c.started_at))
        .order_by(TASKS.c.cost_total.desc(), TASKS.c.task_id)
        .limit(limit)
    )
    return [TopTask(**row._asdict()) for row in await _rows(engine, statement)]


async def hourly_tokens(
    engine: AsyncEngine, f: ExplorerFilter, use_rollups: bool = True
) -> dict[datetime, tuple[int, int]]:
    """Uncached input and output tokens per UTC hour (what a GPU had to compute)."""
    measures = ("prompt_tokens", "cached_tokens", "completion_tokens")
    statement = sums(engine.dialect.name, f, [], measures, "hour", use_rollups)
    return {
        bucket_start(row.bucket, "hour"): (
            int(row.prompt_tokens or 0) - int(row.cached_tokens or 0),
            int(row.completion_tokens or 0),
        )
        for row in await _rows(engine, statement)
    }
