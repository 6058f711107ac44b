"""Time every report and page query of the ledger on a PostgreSQL database of 10M requests.

Run: `python bench/ledger_queries.py [--rows 10000000] [--runs 5] [--url ...]`. Fills the
database with `bench/ledger_fill.py` first when it holds fewer rows than `--rows` (the
fill's timings go into the results), then runs each query `--runs` times through the
gateway's own functions (`gateway.ledger.queries`, and the cost explorer's
`gateway.ledger.explorer_queries` when it is there) and reports the p50, the target
(1 s) and whether it is met. `--base` also times each rollup-backed query once against
the base table (`use_rollups=False`), to show what the rollups save. The server runs
with its own settings (the bench changes none); writes bench/LEDGER_RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ledger_fill

from gateway.ledger import make_engine
from gateway.ledger.queries import get_task, spend, task_cost_stats, task_outcomes
from gateway.ledger.scope import ReadScope

TARGET_S = 1.0
RESULTS = Path(__file__).with_name("LEDGER_RESULTS.md")
Query = Callable[[], Awaitable[Any]]


@dataclass
class Timing:
    """One query's runs."""

    name: str
    runs: list[float]
    base_s: float | None = None
    error: str | None = None

    @property
    def p50(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")


def report_queries(
    engine: Any, now: datetime, task_id: str
) -> dict[str, tuple[Query, Query | None]]:
    """The queries of `/v1/spend`, `farebox report` and `/tasks/{id}`: (rollups, base)."""
    week, month = now - timedelta(days=7, minutes=13), now - timedelta(days=30)
    team = ReadScope(team="team-01")
    queries: dict[str, tuple[Query, Query | None]] = {}
    for group in ("team", "project", "model", "backend", "tier"):
        queries[f"spend by {group}, whole ledger"] = (
            lambda g=group: spend(engine, g),
            lambda g=group: spend(engine, g, use_rollups=False),
        )
    queries["spend by team, last 7 days (unaligned edges)"] = (
        lambda: spend(engine, "team", week, now),
        lambda: spend(engine, "team", week, now, use_rollups=False),
    )
    queries["spend by model, one team's key, last 30 days"] = (
        lambda: spend(engine, "model", month, now, scope=team),
        lambda: spend(engine, "model", month, now, scope=team, use_rollups=False),
    )
    day = now - timedelta(days=1)
    queries["spend by step kind, last 24 hours"] = (
        lambda: spend(engine, "step_kind", day, now),
        lambda: spend(engine, "step_kind", day, now, use_rollups=False),
    )
    queries["spend by step kind, whole ledger"] = (
        lambda: spend(engine, "step_kind"),
        lambda: spend(engine, "step_kind", use_rollups=False),
    )
    queries["spend by step, last 30 days"] = (
        lambda: spend(engine, "step", month, now),
        lambda: spend(engine, "step", month, now, use_rollups=False),
    )
    queries["cost per task by team, all"] = (
        lambda: task_cost_stats(engine, "team"),
        lambda: task_cost_stats(engine, "team", sql_percentiles=False),
    )
    queries["cost per task by project, last 30 days, with abandoned"] = (
        lambda: task_cost_stats(engine, "project", month, now, include_abandoned=True),
        None,
    )
    queries["task outcomes by team, all"] = (
        lambda: task_outcomes(engine, "team"),
        lambda: task_outcomes(engine, "team", use_rollups=False),
    )
    queries["task outcomes by project, last 7 days"] = (
        lambda: task_outcomes(engine, "project", week, now),
        None,
    )
    queries["cost per task by project, whole ledger, with abandoned"] = (
        lambda: task_cost_stats(engine, "project", include_abandoned=True),
        None,
    )
    queries["task outcomes by project, whole ledger"] = (
        lambda: task_outcomes(engine, "project"),
        None,
    )
    queries["spend by step, whole ledger"] = (lambda: spend(engine, "step"), None)
    queries["one task with its calls"] = (lambda: get_task(engine, task_id), None)
    return queries  # fmt: skip


def explorer_queries(engine: Any, now: datetime) -> dict[str, tuple[Query, Query | None]]:
    """The cost explorer page's queries (gateway.ledger.explorer_queries), if present."""
    try:
        page = importlib.import_module("gateway.ledger.explorer_queries")
    except ImportError:
        return {}
    month = page.ExplorerFilter(since=now - timedelta(days=30), until=now)
    calls: dict[str, Callable[[Any], Awaitable[Any]]] = {
        "spend_series by team per day": lambda f: page.spend_series(engine, "team", "day", f),
        "money_breakdown": lambda f: page.money_breakdown(engine, f),
        "cache_use": lambda f: page.cache_use(engine, f),
        "prefix_breaks": lambda f: page.prefix_breaks(engine, f),
        "outcome_stats": lambda f: page.outcome_stats(engine, f),
        "top_tasks (10)": lambda f: page.top_tasks(engine, f, 10),
        "hourly_tokens": lambda f: page.hourly_tokens(engine, f),
    }
    found: dict[str, tuple[Query, Query | None]] = {
        f"/ui {name}, last 30 days": ((lambda c=call: c(month)), None)
        for name, call in calls.items()
        if hasattr(page, name.split(" ")[0])
    }
    # The page over the whole ledger (no since, no until), as its widest range asks: day
    # buckets past two days, 20 tasks, and the GPU panel's hours capped at 168 for a model.
    whole = page.ExplorerFilter()
    week = page.ExplorerFilter(since=now - timedelta(hours=168), until=now, model="smart")
    calls = {
        "spend_series by team per day": lambda f: page.spend_series(engine, "team", "day", f),
        "spend_series by model per day": lambda f: page.spend_series(engine, "model", "day", f),
        "spend_series by tier per day": lambda f: page.spend_series(engine, "tier", "day", f),
        "money_breakdown": lambda f: page.money_breakdown(engine, f),
        "cache_use": lambda f: page.cache_use(engine, f),
        "prefix_breaks": lambda f: page.prefix_breaks(engine, f),
        "outcome_stats": lambda f: page.outcome_stats(engine, f),
        "top_tasks (20)": lambda f: page.top_tasks(engine, f, 20),
    }
    for name, call in calls.items():
        found[f"/ui {name}, whole ledger"] = ((lambda c=call: c(whole)), None)
    found["/ui hourly_tokens, one model, last 168 hours (the GPU panel's most)"] = (
        lambda: page.hourly_tokens(engine, week),
        None,
    )
    return found


async def _time(name: str, query: Query, base: Query | None, runs: int, with_base: bool) -> Timing:
    timing = Timing(name, [])
    try:
        for _ in range(runs):
            started = time.perf_counter()
            await query()
            timing.runs.append(time.perf_counter() - started)
        if with_base and base is not None:
            started = time.perf_counter()
            await base()
            timing.base_s = time.perf_counter() - started
    except Exception as exc:  # a broken query is reported, not hidden
        timing.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    status = timing.error or f"p50 {timing.p50 * 1000:.0f} ms"
    print(f"  {name}: {status}", flush=True)
    return timing


async def _facts(url: str) -> dict[str, Any]:
    db = await ledger_fill._connect(url)
    try:
        row = await db.fetchrow(
            "SELECT (SELECT count(*) FROM requests) AS requests, "
            "(SELECT count(*) FROM tasks) AS tasks, "
            "(SELECT count(*) FROM rollup_hourly) AS hourly, "
            "(SELECT count(*) FROM rollup_daily) AS daily, "
            "(SELECT max(created_at) FROM requests) AS newest, "
            "(SELECT task_id FROM tasks WHERE request_count BETWEEN 8 AND 12 LIMIT 1) AS task, "
            "pg_size_pretty(pg_database_size(current_database())) AS size, version() AS version"
        )
        return dict(row) if row else {}
    finally:
        await db.close()


async def _rows_now(url: str) -> int:
    try:
        db = await ledger_fill._connect(url)
    except asyncpg.InvalidCatalogNameError:
        return 0
    try:
        return int(await db.fetchval("SELECT count(*) FROM requests"))
    except asyncpg.UndefinedTableError:
        return 0
    finally:
        await db.close()


def write_results(
    timings: list[Timing], facts: dict[str, Any], fill_s: dict[str, float] | None, runs: int
) -> str:
    met = [t for t in timings if t.error is None and t.p50 < TARGET_S]
    lines = [
        "# Ledger queries at scale",
        "",
        f"Target: every page and report query answers in under **{TARGET_S:.0f} s** (p50 of "
        f"{runs} runs) over {facts.get('requests', 0):,} request rows. "
        f"Met by **{len(met)} of {len(timings)}** queries.",
        "",
        f"Data: {facts.get('requests', 0):,} requests, {facts.get('tasks', 0):,} tasks, "
        f"{facts.get('hourly', 0):,} hourly and {facts.get('daily', 0):,} daily rollup rows; "
        f"database {facts.get('size')}; {str(facts.get('version', '')).split(' on ')[0]} with "
        "its default settings (shared_buffers 128 MB, work_mem 4 MB), on the 2-core "
        "development machine shared with other work. Measured "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC with `python bench/ledger_queries.py --base`.",
        "",
        "The last column times the same query once the slow way: `use_rollups=False` (spend "
        "and outcomes summing the request rows) or `sql_percentiles=False` (cost per task "
        "with every task's row sent to Python).",
        "",
        "| query | p50 | under 1 s | base table, once |",
        "|---|---:|:---:|---:|",
    ]
    for t in timings:
        base = "" if t.base_s is None else f"{t.base_s * 1000:,.0f} ms"
        if t.error:
            lines.append(f"| {t.name} | error: {t.error} | no | {base} |")
        else:
            ok = "yes" if t.p50 < TARGET_S else "**no**"
            lines.append(f"| {t.name} | {t.p50 * 1000:,.0f} ms | {ok} | {base} |")
    if fill_s:
        lines += ["", "Fill (`bench/ledger_fill.py`, generated inside PostgreSQL):", ""]
        lines += [f"- {name}: {seconds:,.1f} s" for name, seconds in fill_s.items()]
        lines.append(f"- total: {sum(fill_s.values()):,.1f} s")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> int:
    fill_s = None
    if await _rows_now(args.url) < args.rows:
        await ledger_fill.recreate(args.url)
        fill_s = await ledger_fill.fill(args.url, args.rows, args.days)
    facts = await _facts(args.url)
    engine = make_engine(args.url)
    try:
        now = facts["newest"] + timedelta(seconds=1)
        queries = report_queries(engine, now, facts["task"]) | explorer_queries(engine, now)
        if args.only:  # re-time a few queries: printed, the results file left alone
            queries = {k: v for k, v in queries.items() if any(o in k for o in args.only)}
        await spend(engine, "team")  # warm the pool and the catalog caches
        timings = [
            await _time(name, query, base, args.runs, args.base)
            for name, (query, base) in queries.items()
        ]
    finally:
        await engine.dispose()
    if args.only:
        return 0 if timings and all(t.error is None for t in timings) else 1
    text = write_results(timings, facts, fill_s, args.runs)
    if args.fill_log:
        quoted = Path(args.fill_log).read_text().strip()
        text += f"\nFill (`bench/ledger_fill.py --rows {args.rows:,}`, run before):\n\n"
        text += f"```\n{quoted}\n```\n"
    Path(args.out).write_text(text)
    print(text)
    return 0 if all(t.error is None for t in timings) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=ledger_fill.DEFAULT_URL)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base", action="store_true", help="also time the base-table reads")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="time only the queries whose name holds TEXT; print, write nothing",
    )
    parser.add_argument("--fill-log", help="output of an earlier ledger_fill.py run, to quote")
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
