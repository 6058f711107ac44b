"""Finished, abandoned and untasked are counted apart, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from ledger_helpers import T0, record
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig
from gateway.ledger.queries import TaskOutcomes, task_cost_stats, task_outcomes
from gateway.ledger.store import close_idle_tasks

D = Decimal
MINUTE = timedelta(minutes=1)


def _call(task: str, request: str, cost: str, **fields: object) -> object:
    return record(task, id=f"{request}-{fields.get('attempt', 0)}", request_id=request,
                  team="ops", created_at=T0, cost_total=D(cost), **fields)  # fmt: skip


async def _load(engine: AsyncEngine, spool: Path) -> None:
    """Three finished tasks, one abandoned, two requests without a task id (one retried)."""
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool, idle_timeout=None))
    calls = [
        _call("deploy", "req-1", "0.01"),
        _call("deploy", "req-2", "0.02"),
        _call("rollback", "req-3", "0.05"),
        # A client may name its task `task-...`: it is still a task, not untasked.
        _call("task-mine", "req-4", "0.30"),
        _call("idle", "req-5", "0.40"),
        # What the gateway books for a request without a task id (the second one retried).
        _call("task-aa11", "req-aa11", "0.001"),
        _call("task-bb22", "req-bb22", "0.002"),
        _call("task-bb22", "req-bb22", "0.003", attempt=1),
    ]
    for call in calls:
        writer.submit(call)  # type: ignore[arg-type]
    for task, outcome in [("deploy", "success"), ("rollback", "failed"), ("task-mine", "success"),
                          ("task-aa11", "success"), ("task-bb22", "success")]:  # fmt: skip
        writer.finish_task(task, outcome, at=T0 + MINUTE)
    await writer.close()
    await close_idle_tasks(engine, idle_seconds=600, now=T0 + 30 * MINUTE)


@pytest.fixture
async def loaded(engine: AsyncEngine, tmp_path: Path) -> AsyncEngine:
    await _load(engine, tmp_path / "spool")
    return engine


async def test_statistics_cover_finished_tasks_only(loaded: AsyncEngine) -> None:
    (ops,) = await task_cost_stats(loaded, "team")
    assert ops.finished_tasks == 3  # deploy, rollback, task-mine; not idle, not untasked
    assert (ops.cost_total, ops.cost_p50, ops.cost_max) == (D("0.38"), D("0.05"), D("0.30"))


async def test_abandoned_and_chosen_statuses_on_request(loaded: AsyncEngine) -> None:
    (ops,) = await task_cost_stats(loaded, "team", include_abandoned=True)
    assert (ops.finished_tasks, ops.cost_max) == (4, D("0.40"))
    (failed,) = await task_cost_stats(loaded, "team", statuses=["failed"])
    assert (failed.finished_tasks, failed.cost_total) == (1, D("0.05"))
    (idle,) = await task_cost_stats(loaded, "team", statuses=["abandoned"])
    assert (idle.finished_tasks, idle.cost_total) == (1, D("0.40"))


async def test_outcomes_are_reported_on_their_own_lines(loaded: AsyncEngine) -> None:
    assert await task_outcomes(loaded, "team") == [
        TaskOutcomes("ops", 3, D("0.38"), 1, D("0.40"), 2, D("0.006"))
    ]
    assert await task_outcomes(loaded, "team", since=T0 + timedelta(days=1)) == []
