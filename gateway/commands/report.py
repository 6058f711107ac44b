"""`farebox report`: spend and cost per finished task from the ledger, as terminal tables."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from gateway.api.jsonable import jsonable
from gateway.ledger import SpendRow, TaskCostStats, spend, task_cost_stats
from gateway.ledger.reads import LEDGER_DOWN, bounded_engine
from gateway.pricing.money import money_str
from gateway.settings import Settings

err = Console(stderr=True)
GROUPS = ("team", "project", "model", "backend", "tier", "step", "step_kind")
_READ_FAILURES: tuple[type[BaseException], ...] = (SQLAlchemyError, *LEDGER_DOWN)


async def _read(
    settings: Settings, group_by: str, since: datetime | None, until: datetime | None
) -> tuple[list[SpendRow], list[TaskCostStats]]:
    # The same time limits as the gateway's reads: a down database is an error, not a hang.
    engine = bounded_engine(
        settings.ledger_url(), settings.ledger_connect_timeout_s, settings.ledger_read_timeout_s
    )
    try:
        rows = await spend(engine, group_by, since, until)
        tasks = await task_cost_stats(engine, "team", since, until)
        return rows, tasks
    finally:
        await engine.dispose()


def _pct(share: Any) -> str:
    return f"{share * 100:.1f}%"


def _spend_table(rows: list[SpendRow], group_by: str) -> Table:
    table = Table(title=f"Spend by {group_by}")
    columns = (
        group_by,
        "requests",
        "input tok",
        "cached tok",
        "output tok",
        "reasoning tok",
        "cost (USD)",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == group_by else "right")
    for row in rows:
        table.add_row(
            row.group or "(none)",
            f"{row.request_count:,}",
            f"{row.prompt_tokens:,}",
            f"{row.cached_tokens:,}",
            f"{row.completion_tokens:,}",
            f"{row.reasoning_tokens:,}",
            money_str(row.cost_total),
        )
    return table


def _task_table(stats: list[TaskCostStats]) -> Table:
    table = Table(title="Cost per finished task, by team")
    columns = ("team", "tasks", "p50", "p95", "max", "output", "reasoning", "cache writes")
    for column in columns:
        table.add_column(column, justify="left" if column == "team" else "right")
    for row in stats:
        table.add_row(
            row.group or "(none)",
            f"{row.finished_tasks:,}",
            money_str(row.cost_p50),
            money_str(row.cost_p95),
            money_str(row.cost_max),
            _pct(row.output_share),
            _pct(row.reasoning_share),
            _pct(row.cache_write_share),
        )
    return table


def report(
    group_by: Annotated[str, typer.Option(help=f"One of: {', '.join(GROUPS)}.")] = "team",
    since: Annotated[datetime | None, typer.Option(help="From this time (ISO 8601).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Until this time (ISO 8601).")] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Ledger database (default: FAREBOX_DATABASE_URL or SQLite).")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Spend grouped over a time range, and cost per finished task (p50, p95, max) per team."""
    if group_by not in GROUPS:
        err.print(f"farebox report: --group-by must be one of {', '.join(GROUPS)}")
        raise typer.Exit(2)
    settings = Settings(database_url=database_url) if database_url else Settings()
    url = settings.ledger_url()
    try:
        rows, stats = asyncio.run(_read(settings, group_by, since, until))
    except _READ_FAILURES as exc:
        err.print(f"farebox report: cannot read the ledger at {url.split('@')[-1]}: {exc}")
        raise typer.Exit(2) from exc
    if json_output:
        document = {"group_by": group_by, "spend": jsonable(rows), "tasks": jsonable(stats)}
        typer.echo(json.dumps(document, indent=2))
        return
    console = Console()
    console.print(_spend_table(rows, group_by))
    console.print(_task_table(stats))
