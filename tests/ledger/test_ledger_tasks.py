"""Task outcomes: finish_task and its callback, and abandonment of idle tasks."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from ledger_db import WriterFactory
from ledger_helpers import T0, record, wait_until
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import FinishedTask, OnTaskFinished, get_task

Observed = list[tuple[str, str, Decimal]]


def recorder() -> tuple[Observed, OnTaskFinished]:
    """Return a list and a callback that appends to it."""
    seen: Observed = []

    def on_task_finished(team: str, outcome: str, cost_total: Decimal) -> None:
        seen.append((team, outcome, cost_total))

    return seen, on_task_finished


async def test_finish_reports_team_outcome_and_exact_cost_once(
    make_writer: WriterFactory, engine: AsyncEngine
) -> None:
    seen, callback = recorder()
    writer = make_writer(on_task_finished=callback)
    await writer.start()
    for cost in ("0.0000000001", "0.1234567890", "2"):
        writer.submit(record("t1", team="team-z", cost_total=Decimal(cost)))
    writer.finish_task("t1", "success", at=T0)
    assert await writer.flush()
    assert seen == [("team-z", "success", Decimal("2.1234567891"))]
    writer.finish_task("t1", "failed")  # a second outcome (or a replay) changes nothing
    assert await writer.flush()
    assert len(seen) == 1 and writer.tasks_finished == 1
    detail = await get_task(engine, "t1")
    assert detail is not None
    assert (detail.task.status, detail.task.finished_at) == ("success", T0)


async def test_finish_before_the_tasks_requests_keeps_the_outcome(
    make_writer: WriterFactory, engine: AsyncEngine
) -> None:
    seen, callback = recorder()
    writer = make_writer(on_task_finished=callback)
    await writer.start()
    writer.finish_task("early", "success", at=T0 + timedelta(minutes=5))
    assert await writer.flush()
    writer.submit(record("early", team="late-team", created_at=T0))
    assert await writer.flush()
    detail = await get_task(engine, "early")
    assert detail is not None
    assert (detail.task.status, detail.task.team, detail.task.request_count) == (
        "success",
        "late-team",
        1,
    )
    assert detail.task.started_at == T0
    assert seen == []  # the task was never observed open, so there is nothing to report


async def test_idle_tasks_are_abandoned_and_reported(
    make_writer: WriterFactory, engine: AsyncEngine
) -> None:
    seen, callback = recorder()
    writer = make_writer(on_task_finished=callback)
    await writer.start()
    writer.submit(record("idle", team="team-i", cost_total=Decimal("0.5"), created_at=T0))
    writer.submit(record("busy", team="team-b"))  # created now
    assert await writer.flush()
    closed = await writer.close_idle_tasks(3600)
    assert closed == [FinishedTask("idle", "team-i", "abandoned", Decimal("0.5"))]
    assert seen == [("team-i", "abandoned", Decimal("0.5"))]
    idle, busy = await get_task(engine, "idle"), await get_task(engine, "busy")
    assert idle is not None and busy is not None
    assert (idle.task.status, idle.task.finished_at) == ("abandoned", T0)
    assert busy.task.status == "open"
    # The client's late word replaces our guess; the histogram already saw the task.
    writer.finish_task("idle", "success")
    assert await writer.flush()
    idle = await get_task(engine, "idle")
    assert idle is not None and idle.task.status == "success"
    assert len(seen) == 1 and writer.tasks_abandoned == 1


async def test_the_writer_loop_abandons_idle_tasks(make_writer: WriterFactory) -> None:
    seen, callback = recorder()
    writer = make_writer(on_task_finished=callback, idle_timeout=60.0, idle_check_interval=0.05)
    writer.submit(record("forgotten", team="team-f", cost_total=Decimal("1"), created_at=T0))
    await writer.start()
    await wait_until(lambda: bool(seen))
    assert seen == [("team-f", "abandoned", Decimal("1"))]


async def test_a_failing_callback_does_not_stop_the_writer(
    make_writer: WriterFactory, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(team: str, outcome: str, cost_total: Decimal) -> None:
        raise RuntimeError("metrics backend is down")

    writer = make_writer(on_task_finished=explode)
    await writer.start()
    writer.submit(record("t"))
    writer.finish_task("t", "success")
    assert await writer.flush()
    writer.submit(record("t2"))
    assert await writer.flush()
    assert writer.callback_errors == 1 and writer.rows_written == 2
    assert "on_task_finished failed" in caplog.text


def test_an_invalid_outcome_fails_at_the_call(make_writer: WriterFactory) -> None:
    writer = make_writer()
    with pytest.raises(ValueError, match="outcome"):
        writer.finish_task("t", "open")
