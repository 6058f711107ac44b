"""`farebox report`: spend, cost per finished task and task outcomes from the ledger.

Finished tasks (closed by the client), abandoned ones (closed by the idle timeout) and
untasked requests (sent without a task id) are counted apart; the cost-per-task statistics
cover finished tasks unless `--include-abandoned` or `--status` says otherwise. Tables fit
the terminal's width (see `gateway.commands.tables`); `--json` has every exact amount.

Two sources: the ledger database itself (whoever holds its URL sees every team), or, with
`--url`, a running gateway read with a key (`FAREBOX_API_KEY` or `--api-key`), which shows
what that key may see: its own team's rows for a team key (gateway.commands.report_remote).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from gateway.api.jsonable import jsonable
from gateway.commands.report_remote import RemoteReadError, query, read_remote
from gateway.commands.tables import Column, money, percent, print_table
from gateway.ledger.read_rows import SpendRow, TaskCostStats, TaskOutcomes
from gateway.ledger.records import ABANDONED, OPEN
from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.ledger.scope import ReadScope

# The database's modules (SQLAlchemy) are imported by the path that opens it: `--url`,
# `--help` and the other commands' start never need them (bench/cli_start.py).

err = Console(stderr=True)


def _read_failures() -> tuple[type[BaseException], ...]:
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.ledger.diagnosis import FAILURES
    from gateway.ledger.reads import ledger_down

    return (SQLAlchemyError, *ledger_down(), *FAILURES)


GROUPS = ("team", "project", "model", "backend", "tier", "step", "step_kind")


@dataclass(frozen=True, slots=True)
class Report:
    """Everything `farebox report` prints."""

    spend: list[SpendRow]
    stats: list[TaskCostStats]
    outcomes: list[TaskOutcomes]


async def _read(
    settings: Settings,
    group_by: str,
    since: datetime | None,
    until: datetime | None,
    statuses: list[str] | None,
    include_abandoned: bool,
    scope: ReadScope,
) -> Report:
    from gateway.ledger.queries import spend, task_cost_stats, task_outcomes
    from gateway.ledger.reads import bounded_engine

    # The same time limits as the gateway's reads: a down database is an error, not a hang.
    engine = bounded_engine(
        settings.ledger_url(), settings.ledger_connect_timeout_s, settings.ledger_read_timeout_s
    )
    try:
        rows = await spend(engine, group_by, since, until, scope=scope)
        stats = await task_cost_stats(
            engine,
            "team",
            since,
            until,
            statuses=statuses,
            include_abandoned=include_abandoned,
            scope=scope,
        )
        outcomes = await task_outcomes(engine, "team", since, until, scope=scope)
        return Report(rows, stats, outcomes)
    finally:
        await engine.dispose()


def _print_spend(console: Console, rows: list[SpendRow], group_by: str) -> None:
    columns = [
        Column(group_by, label=True),
        Column("cost (USD)"),
        Column("requests", 1),
        Column("input tok", 2),
        Column("output tok", 3),
        Column("cached tok", 4),
        Column("reasoning tok", 5),
    ]
    cells = [
        [
            row.group or "(none)",
            money(row.cost_total),
            f"{row.request_count:,}",
            f"{row.prompt_tokens:,}",
            f"{row.completion_tokens:,}",
            f"{row.cached_tokens:,}",
            f"{row.reasoning_tokens:,}",
        ]
        for row in rows
    ]
    print_table(console, f"Spend by {group_by}", columns, cells)


def _print_stats(console: Console, stats: list[TaskCostStats], which: str) -> None:
    columns = [
        Column("team", label=True),
        Column("p50"),
        Column("p95"),
        Column("tasks", 1),
        Column("max", 2),
        Column("output", 3),
        Column("reasoning", 4),
        Column("cache writes", 5),
    ]
    cells = [
        [
            row.group or "(none)",
            money(row.cost_p50),
            money(row.cost_p95),
            f"{row.finished_tasks:,}",
            money(row.cost_max),
            percent(row.output_share),
            percent(row.reasoning_share),
            percent(row.cache_write_share),
        ]
        for row in stats
    ]
    print_table(console, f"Cost per {which} task (USD), by team", columns, cells)


def _print_outcomes(console: Console, outcomes: list[TaskOutcomes]) -> None:
    columns = [Column("team", label=True), Column("finished"), Column("abandoned"),
               Column("untasked")]  # fmt: skip
    cells = [
        [
            row.group or "(none)",
            f"{row.finished_tasks:,} · {money(row.finished_cost)}",
            f"{row.abandoned_tasks:,} · {money(row.abandoned_cost)}",
            f"{row.untasked_requests:,} · {money(row.untasked_cost)}",
        ]
        for row in outcomes
    ]
    note = "count · USD; finished: closed by the client; abandoned: idle timeout; "
    note += "untasked: requests without a task id"
    print_table(console, "Task outcomes, by team", columns, cells, note)


def _selection(statuses: list[str] | None, include_abandoned: bool) -> list[str]:
    if statuses:
        return statuses
    return ["finished", ABANDONED] if include_abandoned else ["finished"]


def _check_statuses(statuses: list[str] | None) -> None:
    if statuses and OPEN in statuses:
        err.print("farebox report: --status open: an open task has no final cost")
        raise typer.Exit(2)


def report(
    group_by: Annotated[str, typer.Option(help=f"One of: {', '.join(GROUPS)}.")] = "team",
    since: Annotated[datetime | None, typer.Option(help="From this time (ISO 8601).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Until this time (ISO 8601).")] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Ledger database (default: FAREBOX_DATABASE_URL or SQLite).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(help="Read through this gateway (e.g. http://127.0.0.1:4000) with a key."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="FAREBOX_API_KEY", show_default=False, help="The key for --url."),
    ] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's rows.")] = None,
    project: Annotated[str | None, typer.Option(help="Only this project's rows.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    include_abandoned: Annotated[
        bool, typer.Option(help="Count tasks the idle timeout closed in the per-task costs.")
    ] = False,
    status: Annotated[
        list[str] | None,
        typer.Option(help="Per-task costs over these outcomes only (repeat: success, failed, …)."),
    ] = None,
) -> None:
    """Spend grouped over a time range, cost per finished task (p50, p95, max) per team, and
    finished tasks, abandoned tasks and untasked requests per team: from the ledger database
    (every team), or with --url from a gateway, as much as the key may see."""
    if group_by not in GROUPS:
        err.print(f"farebox report: --group-by must be one of {', '.join(GROUPS)}")
        raise typer.Exit(2)
    _check_statuses(status)
    if url is not None and database_url is not None:
        err.print("farebox report: give --url (a gateway) or --database-url, not both")
        raise typer.Exit(2)
    if url is not None:
        params = query(since, until, team, project) | {"group_by": group_by}
        tasks = {"status": status or [], "include_abandoned": include_abandoned}
        found = _from_gateway(url, api_key, params, tasks)
    else:
        from gateway.ledger.scope import ReadScope  # its rows' filters: SQLAlchemy's tables

        scope = ReadScope(team=team, project=project)
        found = _from_database(
            database_url, group_by, since, until, status, include_abandoned, scope
        )
    _print(found, group_by, _selection(status, include_abandoned), json_output)


def _from_gateway(
    url: str, api_key: str | None, params: dict[str, Any], tasks: dict[str, Any]
) -> Report:
    try:
        return Report(*read_remote(url, api_key, params, tasks))
    except RemoteReadError as exc:
        err.print(f"farebox report: {exc}", markup=False)
        raise typer.Exit(2) from exc


def _from_database(
    database_url: str | None,
    group_by: str,
    since: datetime | None,
    until: datetime | None,
    statuses: list[str] | None,
    include_abandoned: bool,
    scope: ReadScope,
) -> Report:
    from gateway.ledger.diagnosis import explain, missing_ledger

    settings = Settings(database_url=database_url) if database_url else Settings()
    url = settings.ledger_url()
    setting = "--database-url" if database_url else "FAREBOX_DATABASE_URL"
    # Before connecting: opening a missing SQLite file would create it (and its folder).
    problem = missing_ledger(url, "--database-url")
    if problem is None:
        try:
            return asyncio.run(
                _read(settings, group_by, since, until, statuses, include_abandoned, scope)
            )
        except _read_failures() as exc:
            problem = f"cannot read the ledger: {explain(exc, url, setting)}"
    err.print(f"farebox report: {problem}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _print(found: Report, group_by: str, which: list[str], json_output: bool) -> None:
    if json_output:
        document = {
            "group_by": group_by,
            "spend": jsonable(found.spend),
            "task_statuses": which,
            "tasks": jsonable(found.stats),
            "outcomes": jsonable(found.outcomes),
        }
        typer.echo(json.dumps(document, indent=2))
        return
    console = Console()
    _print_spend(console, found.spend, group_by)
    _print_stats(console, found.stats, " or ".join(which))
    _print_outcomes(console, found.outcomes)
