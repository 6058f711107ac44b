"""`farebox report` on a real ledger (SQLite and PostgreSQL): outcomes apart, money whole
at any terminal width, shares rounded, `--json` exact."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from ledger_helpers import T0, record
from typer.testing import CliRunner

from gateway import cli
from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate
from gateway.ledger.store import close_idle_tasks

D = Decimal
MINUTE = timedelta(minutes=1)
# Costs with many digits: what a 80-column table used to cut to `0.0000…`.
TASKS = {"plan-1": "0.0012345678", "plan-2": "0.0456789012", "plan-3": "1234.5678901234"}


async def _load(url: str, spool: Path) -> None:
    await migrate(url)
    engine = make_engine(url)
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool, idle_timeout=None))
    for task, cost in TASKS.items():
        writer.submit(
            record(
                task,
                id=task,
                request_id=f"req-{task}",
                team="research-and-development",
                created_at=T0,
                cost_total=D(cost),
                cost_output=D(cost) / 3,
            )
        )
        writer.finish_task(task, "failed" if task == "plan-2" else "success", at=T0 + MINUTE)
    writer.submit(
        record(
            "idle",
            id="idle",
            request_id="req-idle",
            team="research-and-development",
            created_at=T0,
            cost_total=D("9.99"),
        )
    )
    writer.submit(
        record(
            "task-c0ffee",
            id="loose",
            request_id="req-c0ffee",
            team="research-and-development",
            created_at=T0,
            cost_total=D("0.5"),
        )
    )
    writer.finish_task("task-c0ffee", "success", at=T0)
    await writer.close()
    await close_idle_tasks(engine, idle_seconds=600, now=T0 + 30 * MINUTE)
    await engine.dispose()


@pytest.fixture
def ledger(db_url: str, tmp_path: Path) -> str:
    asyncio.run(_load(db_url, tmp_path / "spool"))
    return db_url


def _report(url: str, *args: str, columns: int = 120) -> Any:
    runner = CliRunner()
    env = {"COLUMNS": str(columns), "NO_COLOR": "1"}
    result = runner.invoke(cli.app, ["report", "--database-url", url, *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_json_keeps_outcomes_apart_and_rounds_shares(ledger: str) -> None:
    document = json.loads(_report(ledger, "--json"))
    assert document["task_statuses"] == ["finished"]
    (team,) = document["tasks"]
    assert team["finished_tasks"] == 3  # not the abandoned task, not the untasked request
    assert Decimal(team["cost_p50"]) == D(TASKS["plan-2"])
    assert team["output_share"] == "0.333"  # not 0.3333333333333333333333333333
    (outcomes,) = document["outcomes"]
    assert (outcomes["finished_tasks"], outcomes["abandoned_tasks"]) == (3, 1)
    assert (outcomes["untasked_requests"], outcomes["untasked_cost"]) == (1, "0.5")
    assert outcomes["abandoned_cost"] == "9.99"

    wider = json.loads(_report(ledger, "--json", "--include-abandoned"))
    assert wider["tasks"][0]["finished_tasks"] == 4
    failed = json.loads(_report(ledger, "--json", "--status", "failed"))
    assert failed["task_statuses"] == ["failed"] and failed["tasks"][0]["finished_tasks"] == 1


@pytest.mark.parametrize("columns", [120, 80, 40])
def test_money_is_never_cut_at_any_width(ledger: str, columns: int) -> None:
    output = _report(ledger, columns=columns)
    assert "…" not in output and "0.0000" not in output
    assert all(len(line) <= columns for line in output.splitlines())
    for shown in ("0.04568", "1,234.57", "9.99"):  # p50, max / spend, abandoned cost
        assert shown in output
    assert "Task outcomes" in output and "untasked" in output


def test_open_is_not_a_status_to_report(ledger: str) -> None:
    result = CliRunner().invoke(cli.app, ["report", "--database-url", ledger, "--status", "open"])
    assert result.exit_code == 2
