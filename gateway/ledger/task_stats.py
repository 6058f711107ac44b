"""Cost per task computed by PostgreSQL: counts, sums and nearest-rank percentiles in SQL.

`percentile_disc(p)` returns the first value whose cumulative share reaches `p`, which is
the nearest-rank percentile `queries.percentile` computes in Python (on SQLite, which
has no ordered-set aggregates). At a million tasks, sorting in the database and sending
one row per group beats sending every task's row to Python by an order of magnitude.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import ColumnElement, Numeric, Select, func, literal_column, select, type_coerce
from sqlalchemy.engine import Row

from gateway.ledger.records import MONEY_QUANTUM
from gateway.ledger.store import TASKS

SHARE_QUANTUM = Decimal("0.001")


def sql_stats(group: ColumnElement[Any], covered: ColumnElement[bool]) -> Select[Any]:
    """One row per group: tasks, total, p50 and p95 (one sort), max, component sums."""
    from sqlalchemy.dialects.postgresql import ARRAY  # here: SQLite never runs this

    cost = TASKS.c.cost_total
    fractions: ColumnElement[Any] = literal_column("ARRAY[0.5, 0.95]::float8[]")
    spread = func.percentile_disc(fractions).within_group(cost)
    return (
        select(
            group.label("group"),
            func.count().label("finished_tasks"),
            func.sum(cost).label("cost_total"),
            type_coerce(spread, ARRAY(Numeric(asdecimal=True))).label("spread"),
            func.max(cost).label("cost_max"),
            func.sum(TASKS.c.cost_output).label("cost_output"),
            func.sum(TASKS.c.cost_reasoning).label("cost_reasoning"),
            func.sum(TASKS.c.cost_cache_write).label("cost_cache_write"),
        )
        .where(covered)
        .group_by(group)
    )


def _share(part: Decimal, whole: Decimal) -> Decimal:
    """part / whole to a tenth of a percent, or 0 when nothing was spent."""
    if not whole:
        return Decimal(0)
    return (part / whole).quantize(SHARE_QUANTUM, rounding=ROUND_HALF_EVEN)


def from_sql(row: Row[Any]) -> dict[str, Any]:
    """The fields of a TaskCostStats from one row of `sql_stats`."""
    p50, p95 = (Decimal(value).quantize(MONEY_QUANTUM) for value in row.spread)
    total = row.cost_total
    return {
        "group": row.group,
        "finished_tasks": int(row.finished_tasks),
        "cost_total": total,
        "cost_p50": p50,
        "cost_p95": p95,
        "cost_max": row.cost_max,
        "output_share": _share(row.cost_output, total),
        "reasoning_share": _share(row.cost_reasoning, total),
        "cache_write_share": _share(row.cost_cache_write, total),
    }
