"""Scoped reads in the SQL itself (SQLite and PostgreSQL): a team's scope sums only its rows,
a caller's scope only the key's own, and a task outside the scope is as missing as an
unknown one. Rows go in through the real ledger writer."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from ledger_db import WriterFactory
from ledger_helpers import T0, record
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import get_task, spend, task_cost_stats
from gateway.ledger.queries import task_outcomes
from gateway.ledger.scope import EVERYTHING, ReadScope

D = Decimal
MINUTE = timedelta(minutes=1)
ALPHA = ReadScope(team="alpha")
BETA = ReadScope(team="beta")
SOLO = ReadScope(caller="key_solo")


async def _load(make_writer: WriterFactory) -> None:
    """alpha: two tasks (web and api projects); beta: one task and one untasked request;
    a teamless key `key_solo` made one request billed to the default team."""
    writer = make_writer()
    rows = [
        record("a1", id="a1", team="alpha", project="web", caller="key_a", cost_total=D("1.5")),
        record("a2", id="a2", team="alpha", project="api", caller="key_a", cost_total=D("0.25")),
        record("b1", id="b1", team="beta", project="web", caller="key_b", cost_total=D("7")),
        record("task-00ff", id="b2", request_id="req-00ff", team="beta", project="web",
               caller="key_b", cost_total=D("0.5")),
        record("s1", id="s1", team="default", project="default", caller="key_solo",
               cost_total=D("0.125")),
    ]  # fmt: skip
    for row in rows:
        writer.submit(replace(row, created_at=T0))
    for task in ("a1", "a2", "b1", "s1"):
        writer.finish_task(task, "success", at=T0 + MINUTE)
    await writer.close()


def _totals(rows: list) -> dict[str | None, Decimal]:  # type: ignore[type-arg]
    return {row.group: row.cost_total for row in rows}


async def test_spend_sums_only_the_scopes_rows(
    engine: AsyncEngine, make_writer: WriterFactory
) -> None:
    await _load(make_writer)
    assert _totals(await spend(engine, "team", scope=ALPHA)) == {"alpha": D("1.75")}
    assert _totals(await spend(engine, "team", scope=BETA)) == {"beta": D("7.5")}
    assert _totals(await spend(engine, "project", scope=ALPHA)) == {
        "web": D("1.5"),
        "api": D("0.25"),
    }
    assert _totals(await spend(engine, "team", scope=SOLO)) == {"default": D("0.125")}
    web_of_alpha = ReadScope(team="alpha", project="web")
    assert _totals(await spend(engine, "project", scope=web_of_alpha)) == {"web": D("1.5")}
    assert _totals(await spend(engine, "team", scope=ReadScope(team="nobody"))) == {}
    everyone = _totals(await spend(engine, "team", scope=EVERYTHING))
    assert everyone == {"alpha": D("1.75"), "beta": D("7.5"), "default": D("0.125")}


async def test_task_statistics_and_outcomes_are_scoped(
    engine: AsyncEngine, make_writer: WriterFactory
) -> None:
    await _load(make_writer)
    stats = await task_cost_stats(engine, "team", scope=ALPHA)
    assert [(s.group, s.finished_tasks, s.cost_total) for s in stats] == [("alpha", 2, D("1.75"))]
    solo = await task_cost_stats(engine, "team", scope=SOLO)
    assert [(s.group, s.finished_tasks, s.cost_total) for s in solo] == [("default", 1, D("0.125"))]
    outcomes = await task_outcomes(engine, "team", scope=BETA)
    assert [
        (o.group, o.finished_tasks, o.untasked_requests, o.untasked_cost) for o in outcomes
    ] == [("beta", 1, 1, D("0.5"))]
    assert await task_outcomes(engine, "team", scope=ReadScope(caller="key_nobody")) == []
    all_groups = {o.group for o in await task_outcomes(engine, "team")}
    assert all_groups == {"alpha", "beta", "default"}


async def test_a_task_outside_the_scope_is_missing(
    engine: AsyncEngine, make_writer: WriterFactory
) -> None:
    await _load(make_writer)
    mine = await get_task(engine, "a1", scope=ALPHA)
    assert mine is not None and mine.task.cost_total == D("1.5")
    assert [r.id for r in mine.requests] == ["a1"]
    assert await get_task(engine, "a1", scope=BETA) is None
    assert await get_task(engine, "a1", scope=SOLO) is None
    solo = await get_task(engine, "s1", scope=SOLO)
    assert solo is not None and [r.caller for r in solo.requests] == ["key_solo"]
    assert await get_task(engine, "a1", scope=EVERYTHING) is not None
