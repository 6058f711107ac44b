"""The read side on hand-computed data: get_task, spend, task_cost_stats and CSV export."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import pytest_asyncio
from ledger_db import DIALECTS, empty_database
from ledger_helpers import T0, record
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import (
    LedgerWriter,
    SpendRow,
    TaskCostStats,
    WriterConfig,
    export_csv,
    get_task,
    make_engine,
    migrate,
    spend,
    task_cost_stats,
)
from gateway.ledger.store import close_idle_tasks

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = Decimal
HOUR = timedelta(hours=1)


def plan_call(**fields: object) -> dict[str, object]:
    """The fields shared by the two calls of task T1 (a retry after a 502)."""
    return {"team": "alpha", "project": "web", "model_alias": "smart", "task_step": "plan",
            "step_kind": "reasoning", **fields}  # fmt: skip


DATA = [
    record("T1", id="r1", request_id="q1", created_at=T0, backend="openai", tier_served="standard",
           prompt_tokens=1000, cached_tokens=400, cache_write_tokens=100, cache_write_1h_tokens=0,
           completion_tokens=300, reasoning_tokens=200, cost_input=D("0.0010"),
           cost_cached=D("0.0001"), cost_cache_write=D("0.0002"), cost_output=D("0.0020"),
           cost_reasoning=D("0.0030"), cost_total=D("0.0063"), ttft_ms=150,
           **plan_call(status_code=502, error_type="upstream_error")),
    record("T1", id="r2", request_id="q1", attempt=1, created_at=T0 + timedelta(minutes=1),
           backend="anthropic", tier_served="priority", prompt_tokens=500, cached_tokens=0,
           completion_tokens=100, reasoning_tokens=0, cost_input=D("0.0005"), cost_cached=D(0),
           cost_output=D("0.0010"), cost_reasoning=D(0), cost_total=D("0.0015"), ttft_ms=None,
           **plan_call()),
    record("T2", id="r3", created_at=T0 + timedelta(minutes=2), team="beta", project="api",
           model_alias="fast", backend="openai", tier_served="standard", task_step="code",
           step_kind="tool", prompt_tokens=2000, cached_tokens=1000, cache_write_tokens=0,
           cache_write_1h_tokens=500, completion_tokens=400, reasoning_tokens=0,
           cost_input=D("0.0020"), cost_cached=D("0.0002"), cost_cache_write=D("0.0010"),
           cost_output=D("0.0008"), cost_reasoning=D(0), cost_total=D("0.0040")),
    # Outside the one-hour window used below.
    record("T3", id="r4", created_at=T0 + 2 * HOUR, team="beta", project="api",
           model_alias="fast", cost_total=D("1")),
    # Team gamma: twenty finished one-call tasks costing 0.01, 0.02, ... 0.20.
    *(record(f"G{k}", id=f"g{k}", created_at=T0 + timedelta(minutes=10), team="gamma",
             project="batch", model_alias="cheap", backend="local", tier_served="batch",
             task_step=None, step_kind=None, cost_total=D(k) / 100, cost_output=D(k) / 200,
             cost_reasoning=D(k) / 400, cost_cache_write=D(k) / 1000)
      for k in range(1, 21)),
]  # fmt: skip


async def load(engine: AsyncEngine, spool_dir: Path) -> None:
    """Write DATA, finish T1 and the gamma tasks, abandon T2 (idle since T0+2min)."""
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool_dir, idle_timeout=None))
    for item in DATA:
        writer.submit(item)
    writer.finish_task("T1", "failed", at=T0 + timedelta(minutes=5))
    for k in range(1, 21):
        writer.finish_task(f"G{k}", "success", at=T0 + timedelta(minutes=20))
    await writer.close()
    assert writer.rows_written == len(DATA)
    await close_idle_tasks(engine, idle_seconds=1800, now=T0 + 2 * HOUR + timedelta(minutes=1))


# The tests only read, so one loaded database per dialect serves the whole module.
@pytest_asyncio.fixture(scope="module", loop_scope="module", params=DIALECTS)
async def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AsyncEngine]:
    """A database holding DATA."""
    directory = tmp_path_factory.mktemp("queries")
    async with empty_database(request.param, directory) as url:
        await migrate(url)
        engine = make_engine(url)
        try:
            await load(engine, directory / "spool")
            yield engine
        finally:
            await engine.dispose()


async def test_get_task_returns_aggregates_and_each_call(loaded: AsyncEngine) -> None:
    detail = await get_task(loaded, "T1")
    assert detail is not None
    task = detail.task
    assert (task.team, task.project, task.status) == ("alpha", "web", "failed")
    assert (task.request_count, task.first_ttft_ms) == (2, 150)
    assert (task.prompt_tokens, task.cached_tokens, task.cache_write_tokens) == (1500, 400, 100)
    assert (task.completion_tokens, task.reasoning_tokens) == (400, 200)
    assert (task.cost_input, task.cost_cached, task.cost_cache_write) == (
        D("0.0015"), D("0.0001"), D("0.0002")
    )  # fmt: skip
    assert (task.cost_output, task.cost_reasoning, task.cost_total) == (
        D("0.0030"), D("0.0030"), D("0.0078")
    )  # fmt: skip
    assert (task.started_at, task.last_activity_at) == (T0, T0 + timedelta(minutes=1))
    assert task.finished_at == T0 + timedelta(minutes=5)
    assert [(r.id, r.attempt, r.status_code, r.error_type) for r in detail.requests] == [
        ("r1", 0, 502, "upstream_error"),
        ("r2", 1, 200, None),
    ]
    assert detail.requests[0] == DATA[0]  # every column survives the database


async def test_get_task_of_an_unknown_task_is_none(loaded: AsyncEngine) -> None:
    assert await get_task(loaded, "nope") is None


async def test_spend_by_team_sums_every_component(loaded: AsyncEngine) -> None:
    rows = await spend(loaded, "team", since=T0, until=T0 + HOUR)
    assert [row.group for row in rows] == ["gamma", "alpha", "beta"]
    alpha, beta = rows[1], rows[2]
    assert alpha == SpendRow(
        "alpha", 2, 1500, 400, 100, 0, 400, 200,
        D("0.0015"), D("0.0001"), D("0.0002"), D("0.0030"), D("0.0030"), D("0.0078"),
    )  # fmt: skip
    assert beta == SpendRow(
        "beta", 1, 2000, 1000, 0, 500, 400, 0,
        D("0.0020"), D("0.0002"), D("0.0010"), D("0.0008"), D(0), D("0.0040"),
    )  # fmt: skip
    assert rows[0].cost_total == D("2.10") and rows[0].request_count == 20


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("project", {"batch": D("2.10"), "web": D("0.0078"), "api": D("0.0040")}),
        ("model", {"smart": D("0.0078"), "fast": D("0.0040"), "cheap": D("2.10")}),
        ("backend", {"openai": D("0.0103"), "anthropic": D("0.0015"), "local": D("2.10")}),
        ("tier", {"standard": D("0.0103"), "priority": D("0.0015"), "batch": D("2.10")}),
        ("step", {"plan": D("0.0078"), "code": D("0.0040"), None: D("2.10")}),
        ("step_kind", {"reasoning": D("0.0078"), "tool": D("0.0040"), None: D("2.10")}),
    ],
)
async def test_spend_by_other_groups(
    loaded: AsyncEngine, group_by: str, expected: dict[str | None, Decimal]
) -> None:
    rows = await spend(loaded, group_by, since=T0, until=T0 + HOUR)
    assert {row.group: row.cost_total for row in rows} == expected


async def test_spend_window_is_half_open(loaded: AsyncEngine) -> None:
    everything = {row.group: row.cost_total for row in await spend(loaded, "team")}
    assert everything["beta"] == D("1.0040")
    later = await spend(loaded, "team", since=T0 + 2 * HOUR)
    assert [(row.group, row.cost_total) for row in later] == [("beta", D("1"))]
    assert await spend(loaded, "team", until=T0) == []


async def test_spend_refuses_an_unknown_group(loaded: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="step_kind"):
        await spend(loaded, "colour")


async def test_task_cost_stats_per_team(loaded: AsyncEngine) -> None:
    stats = await task_cost_stats(loaded, "team", since=T0, until=T0 + HOUR)
    # T2 (team beta) was abandoned by the idle timeout: not a finished task.
    assert [s.group for s in stats] == ["alpha", "gamma"]
    alpha, gamma = stats
    assert gamma == TaskCostStats(
        "gamma", 20, D("2.10"), D("0.10"), D("0.19"), D("0.20"), D("0.5"), D("0.25"), D("0.1")
    )
    assert (alpha.finished_tasks, alpha.cost_p50, alpha.cost_p95, alpha.cost_max) == (
        1, D("0.0078"), D("0.0078"), D("0.0078")
    )  # fmt: skip
    assert alpha.output_share == D("0.385")  # 0.0030 / 0.0078, to a tenth of a percent
    assert alpha.cache_write_share == D("0.026")
    assert await task_cost_stats(loaded, "team", since=T0 + HOUR) == []


async def test_task_cost_stats_with_abandoned_tasks_when_asked(loaded: AsyncEngine) -> None:
    stats = await task_cost_stats(loaded, "team", T0, T0 + HOUR, include_abandoned=True)
    beta = {s.group: s for s in stats}["beta"]
    # T2 was abandoned: it ended at its last call, T0+2min, inside the window.
    assert (beta.finished_tasks, beta.cost_max) == (1, D("0.0040"))
    assert (beta.output_share, beta.reasoning_share, beta.cache_write_share) == (
        D("0.2"), D(0), D("0.25")
    )  # fmt: skip
    only_failed = await task_cost_stats(loaded, "team", statuses=["failed"])
    assert [(s.group, s.finished_tasks) for s in only_failed] == [("alpha", 1)]


async def test_task_cost_stats_per_project(loaded: AsyncEngine) -> None:
    stats = await task_cost_stats(loaded, "project")
    assert {s.group: s.finished_tasks for s in stats} == {"batch": 20, "web": 1}


async def test_export_csv_of_spend_from_the_database(loaded: AsyncEngine) -> None:
    text = export_csv(await spend(loaded, "team", since=T0, until=T0 + HOUR))
    lines = text.splitlines()
    assert lines[0].startswith("group,request_count,")
    assert lines[2].startswith("alpha,2,1500,400,100,0,400,200,") and lines[2].endswith(
        ",0.0078000000"
    )
