"""The cost explorer's queries on hand-computed rows with fixed times, on SQLite and
PostgreSQL: time buckets, where the money went, cache money, task costs by outcome."""

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

from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate
from gateway.ledger.explorer_queries import (
    SERIES_GROUPS,
    BreakCause,
    CacheUse,
    ExplorerFilter,
    OutcomeStats,
    PrefixVerdicts,
    SeriesPoint,
    cache_use,
    hourly_tokens,
    money_breakdown,
    outcome_stats,
    prefix_breaks,
    spend_series,
    top_tasks,
)
from gateway.ledger.explorer_sums import UNITS
from gateway.ledger.scope import ReadScope

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = Decimal
MIN = timedelta(minutes=1)
DAY = timedelta(days=1)
ZERO_COSTS = {"cost_input": D(0), "cost_cached": D(0), "cost_output": D(0), "cost_reasoning": D(0)}

DATA = [
    record("A1", id="a1", created_at=T0 + 5 * MIN, team="alpha", project="web",
           model_alias="smart", prompt_tokens=1000, cached_tokens=400, cache_write_tokens=100,
           completion_tokens=300, reasoning_tokens=200, cost_input=D("0.0010"),
           cost_cached=D("0.0001"), cost_cache_write=D("0.0002"), cost_output=D("0.0020"),
           cost_reasoning=D("0.0030"), cost_total=D("0.0063"), prefix_status="hit",
           prefix_lost_usd=D(0), expected_cached_tokens=400),
    record("A1", id="a2", created_at=T0 + 70 * MIN, team="alpha", project="web",
           model_alias="fast", backend="anthropic", tier_served="priority", prompt_tokens=500,
           cached_tokens=0, completion_tokens=100, reasoning_tokens=0, cost_input=D("0.0005"),
           cost_cached=D(0), cost_output=D("0.0010"), cost_reasoning=D(0),
           cost_total=D("0.0015"), prefix_status="miss:volatile_value",
           expected_cached_tokens=800, prefix_lost_usd=D("0.0004")),
    record("B1", id="b1", created_at=T0 + 10 * MIN, team="beta", project="api",
           model_alias="fast", prompt_tokens=2000, cached_tokens=1000, cache_write_tokens=0,
           completion_tokens=400, reasoning_tokens=0, cost_input=D("0.0020"),
           cost_cached=D("0.0002"), cost_cache_write=D("0.0010"), cost_output=D("0.0008"),
           cost_reasoning=D(0), cost_total=D("0.0040"), prefix_status="miss:tools_changed",
           expected_cached_tokens=500, prefix_lost_usd=D("0.0001")),
    # Beta's open task, the next day.
    record("B2", id="b2", created_at=T0 + DAY + 60 * MIN, team="beta", project="api",
           model_alias="smart", **{**ZERO_COSTS, "cost_output": D(1)}, cost_total=D(1)),
    # A request without a task id: spend, never a task.
    record("task-abc", id="u1", request_id="req-abc", created_at=T0 + 20 * MIN, team="gamma",
           project="batch", **{**ZERO_COSTS, "cost_input": D("0.5")}, cost_total=D("0.5")),
    # Gamma: twenty one-call tasks costing 0.01 ... 0.20; the first ten succeed.
    *(record(f"G{k}", id=f"g{k}", created_at=T0 + 30 * MIN, team="gamma", project="batch",
             **{**ZERO_COSTS, "cost_output": D(k) / 100}, cost_total=D(k) / 100)
      for k in range(1, 21)),
]  # fmt: skip


async def load(engine: AsyncEngine, spool_dir: Path) -> None:
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool_dir, idle_timeout=None))
    for item in DATA:
        writer.submit(item)
    writer.finish_task("A1", "success", at=T0 + 120 * MIN)
    writer.finish_task("B1", "failed", at=T0 + 30 * MIN)
    for k in range(1, 21):
        writer.finish_task(f"G{k}", "success" if k <= 10 else "failed", at=T0 + 40 * MIN)
    await writer.close()
    assert writer.rows_written == len(DATA)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=DIALECTS)
async def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AsyncEngine]:
    directory = tmp_path_factory.mktemp("explorer")
    async with empty_database(request.param, directory) as url:
        await migrate(url)
        engine = make_engine(url)
        try:
            await load(engine, directory / "spool")
            yield engine
        finally:
            await engine.dispose()


ALL = ExplorerFilter()
ALPHA = ExplorerFilter(scope=ReadScope(team="alpha"))
NOON, ONE = T0, T0 + timedelta(hours=1)
NEXT_DAY_ONE = T0 + DAY + timedelta(hours=1)
GAMMA_SPEND = D("0.5") + sum((D(k) / 100 for k in range(1, 21)), D(0))  # 2.60


async def test_spend_by_team_per_hour(loaded: AsyncEngine) -> None:
    assert await spend_series(loaded, "team", "hour", ALL) == [
        SeriesPoint(NOON, "alpha", 1, D("0.0063")),
        SeriesPoint(NOON, "beta", 1, D("0.0040")),
        SeriesPoint(NOON, "gamma", 21, GAMMA_SPEND),
        SeriesPoint(ONE, "alpha", 1, D("0.0015")),
        SeriesPoint(NEXT_DAY_ONE, "beta", 1, D(1)),
    ]


async def test_spend_per_day_by_model_and_tier(loaded: AsyncEngine) -> None:
    day2 = T0.replace(hour=0) + DAY
    assert await spend_series(loaded, "model", "day", ALL) == [
        SeriesPoint(T0.replace(hour=0), "fast", 2, D("0.0055")),
        SeriesPoint(T0.replace(hour=0), "smart", 22, D("0.0063") + GAMMA_SPEND),
        SeriesPoint(day2, "smart", 1, D(1)),
    ]
    tiers = await spend_series(loaded, "tier", "day", ExplorerFilter(until=day2))
    assert [(p.group, p.cost_total) for p in tiers] == [
        ("priority", D("0.0015")), ("standard", D("0.0103") + GAMMA_SPEND),
    ]  # fmt: skip


async def test_spend_filters_by_scope_window_and_model(loaded: AsyncEngine) -> None:
    assert await spend_series(loaded, "project", "hour", ALPHA) == [
        SeriesPoint(NOON, "web", 1, D("0.0063")),
        SeriesPoint(ONE, "web", 1, D("0.0015")),
    ]
    fast = ExplorerFilter(model="fast")
    assert await spend_series(loaded, "backend", "hour", fast) == [
        SeriesPoint(NOON, "openai", 1, D("0.0040")),
        SeriesPoint(ONE, "anthropic", 1, D("0.0015")),
    ]
    window = ExplorerFilter(since=T0 + 6 * MIN, until=T0 + 21 * MIN)  # b1 and u1
    assert [(p.group, p.cost_total) for p in await spend_series(loaded, "team", "hour", window)] == [
        ("beta", D("0.0040")), ("gamma", D("0.5")),
    ]  # fmt: skip
    nobody = ExplorerFilter(scope=ReadScope(team="alpha"), model="nothing")
    assert await spend_series(loaded, "team", "hour", nobody) == []


async def test_where_the_money_went(loaded: AsyncEngine) -> None:
    alpha = await money_breakdown(loaded, ALPHA)
    assert alpha.request_count == 2
    assert alpha.cost == {
        "input": D("0.0015"), "cached": D("0.0001"), "cache_write": D("0.0002"),
        "output": D("0.0030"), "reasoning": D("0.0030"), "total": D("0.0078"),
    }  # fmt: skip
    assert alpha.tokens["prompt_tokens"] == 1500 and alpha.tokens["reasoning_tokens"] == 200
    # 0.003 / 0.0078 = 0.3846...; both: 0.006 / 0.0078 = 0.7692...
    assert (alpha.output_share, alpha.reasoning_share) == (D("0.385"), D("0.385"))
    assert alpha.output_and_reasoning_share == D("0.769")
    empty = await money_breakdown(loaded, ExplorerFilter(model="nothing"))
    assert empty.request_count == 0 and empty.cost["total"] == 0 and empty.output_share == 0


async def test_cache_reads_per_model_and_tier(loaded: AsyncEngine) -> None:
    assert await cache_use(loaded, ALPHA) == [
        CacheUse("smart", "standard", 1, 1000, 400, D("0.0001")),
        CacheUse("fast", "priority", 1, 500, 0, D(0)),
    ]


async def test_prefix_verdicts_and_break_causes(loaded: AsyncEngine) -> None:
    verdicts, causes = await prefix_breaks(loaded, ALL)
    assert verdicts == [
        PrefixVerdicts("miss", 2, D("0.0005")),
        PrefixVerdicts("hit", 1, D(0)),
    ]
    assert causes == [
        BreakCause("volatile_value", 1, D("0.0004"), 800, 0),
        BreakCause("tools_changed", 1, D("0.0001"), 500, 1000),
    ]
    beta_verdicts, beta_causes = await prefix_breaks(
        loaded, ExplorerFilter(scope=ReadScope(team="beta"))
    )
    assert beta_verdicts == [PrefixVerdicts("miss", 1, D("0.0001"))]
    assert [c.reason for c in beta_causes] == ["tools_changed"]


async def test_cost_per_task_by_team_and_outcome(loaded: AsyncEngine) -> None:
    assert await outcome_stats(loaded, ALL) == [
        OutcomeStats("alpha", "success", 1, D("0.0078"), D("0.0078"), D("0.0078"), D("0.0078")),
        OutcomeStats("beta", "failed", 1, D("0.0040"), D("0.0040"), D("0.0040"), D("0.0040")),
        # nearest rank: p50 of ten is the 5th, p95 the 10th
        OutcomeStats("gamma", "failed", 10, D("1.55"), D("0.15"), D("0.20"), D("0.20")),
        OutcomeStats("gamma", "success", 10, D("0.55"), D("0.05"), D("0.10"), D("0.10")),
    ]
    # A task counts for a model when one of its calls used it; ended by finished_at.
    smart = await outcome_stats(loaded, ExplorerFilter(model="smart", until=T0 + 60 * MIN))
    assert [(s.team, s.outcome, s.tasks) for s in smart] == [
        ("gamma", "failed", 10), ("gamma", "success", 10),
    ]  # fmt: skip


async def test_most_expensive_tasks(loaded: AsyncEngine) -> None:
    top = await top_tasks(loaded, ALL, 3)
    assert [(t.task_id, t.status, t.cost_total) for t in top] == [
        ("B2", "open", D(1)), ("G20", "failed", D("0.20")), ("G19", "failed", D("0.19")),
    ]  # fmt: skip
    beta = await top_tasks(loaded, ExplorerFilter(scope=ReadScope(team="beta")), 10)
    assert [t.task_id for t in beta] == ["B2", "B1"]  # never the untasked request
    later = await top_tasks(loaded, ExplorerFilter(since=T0 + DAY), 10)
    assert [t.task_id for t in later] == ["B2"]
    a1 = (await top_tasks(loaded, ALPHA, 1))[0]
    assert (a1.request_count, a1.started_at, a1.finished_at) == (2, T0 + 5 * MIN, T0 + 120 * MIN)
    assert (a1.cost_output, a1.cost_reasoning) == (D("0.0030"), D("0.0030"))


async def test_hourly_tokens_a_gpu_computed(loaded: AsyncEngine) -> None:
    assert await hourly_tokens(loaded, ExplorerFilter(model="fast")) == {
        NOON: (1000, 400),  # 2000 prompt - 1000 cached
        ONE: (500, 100),
    }
    assert await hourly_tokens(loaded, ExplorerFilter(model="fast", until=ONE)) == {
        NOON: (1000, 400)
    }


async def test_an_unknown_grouping_is_refused(loaded: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="group by 'step'"):
        await spend_series(loaded, "step", "hour", ALL)


WINDOWS = [
    ExplorerFilter(),
    ExplorerFilter(since=T0 + 7 * MIN, until=T0 + DAY + 75 * MIN),  # partial hours at both ends
    ExplorerFilter(since=T0 + 30 * MIN),
    ExplorerFilter(until=T0 + 65 * MIN),
    ExplorerFilter(since=T0 - DAY, until=T0 + 2 * DAY),  # whole days from the daily rollup
    ExplorerFilter(scope=ReadScope(team="beta"), model="smart"),
    ExplorerFilter(scope=ReadScope(team="alpha", project="web"), since=T0 + MIN),
    ExplorerFilter(scope=ReadScope(caller="key_1")),  # the rollups do not key callers: rows
]


@pytest.mark.parametrize("f", WINDOWS)
async def test_rollups_and_rows_give_the_same_numbers(
    loaded: AsyncEngine, f: ExplorerFilter
) -> None:
    for unit in UNITS:
        for by in SERIES_GROUPS:
            rolled = await spend_series(loaded, by, unit, f)
            assert rolled == await spend_series(loaded, by, unit, f, use_rollups=False), (by, unit)
    assert await money_breakdown(loaded, f) == await money_breakdown(loaded, f, use_rollups=False)
    assert await cache_use(loaded, f) == await cache_use(loaded, f, use_rollups=False)
    assert await hourly_tokens(loaded, f) == await hourly_tokens(loaded, f, use_rollups=False)
