"""The SQL panels that read rollups answer exactly what the request rows say, at any range.

A PostgreSQL ledger is filled by bench/ledger_fill.py (the 10M-row benchmark's generator,
here 30,000 rows over 3 days, at the head migration), then *Prefix breaks* (whole days
from `rollup_prefix_daily`, whole hours from `rollup_prefix_hourly`, the partial hours from
the rows) is compared with the same question asked of the `requests` rows alone, and
*Cost per finished task* (nearest-rank percentiles read by rank off an index) with
`percentile_disc`'s sort, over ranges that start and end on and off hour and day
boundaries, inside one hour, across days, with every variable on All and with one team,
model and tier picked. The two *Spend over time* panels (whole days from `rollup_daily` and
the hours around them from `rollup_hourly` when points are a day or more apart or the range
is over 31 days; the hours otherwise) are compared with the rows summed by their UTC hour,
at hourly, 2-hourly, daily and 2-daily intervals.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import pytest

from tests.dashboards import panels
from tests.dashboards.conftest import _admin, fetch
from tests.pg import PG_HOST, PG_PORT, PG_USER

pytestmark = pytest.mark.postgres

SLOW = panels.SLOW_WAY
PREFIX, COST, *SERIES = SLOW
# Tasks whose finish reached the ledger before any request (team NULL), from recent ones.
ORPHANS = """
CREATE TEMP TABLE orphans AS
  SELECT * FROM tasks WHERE status = 'success' ORDER BY finished_at DESC LIMIT 7;
UPDATE orphans SET task_id = 'orphan-' || task_id, team = NULL, project = NULL;
INSERT INTO tasks SELECT * FROM orphans;
"""
CHOICES = [
    {"team": ".*", "model": ".*", "tier": ".*"},
    {"team": "team-00|team-03", "model": "smart", "tier": "flex"},
    {"team": "team-01", "model": ".*", "tier": "standard"},
]


def _fill_module() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "ledger_fill.py"
    spec = importlib.util.spec_from_file_location("ledger_fill", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("ledger_fill", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def filled() -> Iterator[tuple[str, datetime]]:
    """A ledger of 30,000 generated rows over the 3 days before now; its name and now."""
    name = f"farebox_panels_{int(time.time() * 1000) % 10**9}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
        fill = _fill_module()
        asyncio.run(fill.fill(url, rows=30_000, days=3))
        assert asyncio.run(fill.check(url)) == 0  # every rollup equals the rows' sums
        asyncio.run(_execute(name, ORPHANS))
        yield name, datetime.now(UTC)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _ranges(now: datetime) -> list[tuple[datetime, datetime]]:
    hour = now.replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    return [
        (now - timedelta(hours=24), now),  # the dashboard's default
        (now - timedelta(days=4), now),  # everything: days, hours and both edges
        (hour - timedelta(hours=30), hour - timedelta(hours=2)),  # whole hours only
        (day - timedelta(days=2), day),  # whole days only
        (day - timedelta(days=2, minutes=-7), day - timedelta(hours=3, seconds=-1)),
        (hour - timedelta(hours=5, minutes=-10), hour - timedelta(hours=5, minutes=-40)),
        (hour - timedelta(hours=6, minutes=-50), hour - timedelta(hours=5, minutes=-20)),
        (day - timedelta(hours=1, minutes=-15), day + timedelta(minutes=30)),  # across midnight
    ]


async def _execute(database: str, sql: str) -> None:
    connection = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER,
                                       database=database, timeout=5)  # fmt: skip
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _plan(database: str, sql: str) -> str:
    """The plan of `sql` once autovacuum has run (visibility map set) with sequential
    scans priced out: the small test table would otherwise be read whole."""
    connection = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER,
                                       database=database, timeout=5)  # fmt: skip
    try:
        await connection.execute("VACUUM (ANALYZE) tasks")
        await connection.execute("SET enable_seqscan = off")
        return "\n".join(row[0] for row in await connection.fetch("EXPLAIN " + sql))
    finally:
        await connection.close()


def _keyed(rows: list[dict[str, Any]]) -> dict[tuple[Any, Any], tuple[Any, Any]]:
    return {(r["model"], r["reason"]): (r["misses"], r["lost_usd"]) for r in rows}


def test_prefix_breaks_panel_equals_the_rows_at_every_range(filled: tuple[str, datetime]) -> None:
    database, now = filled
    (query,) = [q for q in panels.queries() if q.panel == PREFIX]
    compared = 0
    for start, end in _ranges(now):
        for chosen in CHOICES:
            panel = asyncio.run(fetch(database, panels.sql(query.text, chosen, start, end)))
            rows = asyncio.run(fetch(database, panels.sql(SLOW[PREFIX], chosen, start, end)))
            assert _keyed(panel) == _keyed(rows), (start, end, chosen)
            lost = [row["lost_usd"] for row in panel]
            assert lost == sorted(lost, reverse=True)  # the costliest reason first
            compared += len(rows)
    assert compared > 100  # the ranges are not empty


def test_cost_per_task_panel_equals_percentile_disc_at_every_range(
    filled: tuple[str, datetime],
) -> None:
    database, now = filled
    (query,) = [q for q in panels.queries() if q.panel == COST and q.kind == "postgres"]
    compared, outcomes = 0, set()
    for start, end in _ranges(now):
        for chosen in CHOICES:
            panel = asyncio.run(fetch(database, panels.sql(query.text, chosen, start, end)))
            rows = asyncio.run(fetch(database, panels.sql(SLOW[COST], chosen, start, end)))
            assert panel == rows, (start, end, chosen)
            compared += len(rows)
            outcomes |= {(row["team"], row["outcome"]) for row in rows}
    assert compared > 100
    assert ("", "success") in outcomes  # tasks whose finish came before their requests


@pytest.mark.parametrize("panel", SERIES)
def test_series_panel_equals_the_rows_at_every_range_and_interval(
    filled: tuple[str, datetime], panel: str
) -> None:
    database, now = filled
    (query,) = [q for q in panels.queries() if q.panel == panel]
    ranges = [*_ranges(now), (now - timedelta(days=40), now)]  # over 31 days: daily points
    compared, steps = 0, set()
    for start, end in ranges:
        for chosen, interval_s in zip(CHOICES, (3600, 86400, 7200), strict=True):
            for interval in (interval_s, 2 * 86400):
                text = panels.sql(query.text, chosen, start, end, interval)
                got = asyncio.run(fetch(database, text))
                slow = panels.sql(SLOW[panel], chosen, start, end, interval)
                rows = asyncio.run(fetch(database, slow))
                assert _points(got) == _points(rows), (start, end, chosen, interval)
                assert [r["time"] for r in got] == sorted(r["time"] for r in got)
                compared += len(rows)
                steps |= {int(b["time"]) - int(a["time"]) for a, b in pairwise(got)}
    assert compared > 1000
    assert {3600, 7200, 86400, 2 * 86400} <= steps  # hourly, 2-hourly, daily, 2-daily points


def _points(rows: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    return sorted((r["time"], r["metric"], r["value"]) for r in rows)


def test_cost_per_task_panel_reads_indexes_only(filled: tuple[str, datetime]) -> None:
    database, now = filled
    (query,) = [q for q in panels.queries() if q.panel == COST and q.kind == "postgres"]
    text = panels.sql(query.text, CHOICES[0], now - timedelta(days=2), now)
    plan = asyncio.run(_plan(database, text))
    assert "Index Only Scan using ix_tasks_finished_at_cover" in plan, plan
    assert "Index Only Scan using ix_tasks_team_status_cost" in plan, plan
    assert "Seq Scan" not in plan, plan
