"""`farebox report --team/--project` on the ledger database (SQLite and PostgreSQL): the
filters reach the SQL, every table shows the chosen rows only."""

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

D = Decimal
CALLS = [("a1", "alpha", "web", "1.5"), ("a2", "alpha", "api", "0.5"), ("b1", "beta", "web", "7")]


async def _load(url: str, spool: Path) -> None:
    await migrate(url)
    engine = make_engine(url)
    writer = LedgerWriter(engine, WriterConfig(spool_dir=spool, idle_timeout=None))
    for task, team, project, cost in CALLS:
        writer.submit(record(task, id=task, team=team, project=project, created_at=T0,
                             cost_total=D(cost)))  # fmt: skip
        writer.finish_task(task, "success", at=T0 + timedelta(minutes=1))
    await writer.close()
    await engine.dispose()


@pytest.fixture
def ledger(db_url: str, tmp_path: Path) -> str:
    asyncio.run(_load(db_url, tmp_path / "spool"))
    return db_url


def _json(url: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli.app, ["report", "--database-url", url, "--json", *args])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def _spend(document: dict[str, Any]) -> dict[str, Decimal]:
    return {row["group"]: D(row["cost_total"]) for row in document["spend"]}


def test_team_and_project_filters_narrow_every_table(ledger: str) -> None:
    assert _spend(_json(ledger)) == {"alpha": D(2), "beta": D(7)}
    alpha = _json(ledger, "--team", "alpha")
    assert _spend(alpha) == {"alpha": D(2)}
    assert [(t["group"], t["finished_tasks"]) for t in alpha["tasks"]] == [("alpha", 2)]
    assert [o["group"] for o in alpha["outcomes"]] == ["alpha"]
    web = _json(ledger, "--project", "web", "--group-by", "team")
    assert _spend(web) == {"alpha": D("1.5"), "beta": D(7)}
    assert _spend(_json(ledger, "--team", "alpha", "--project", "web")) == {"alpha": D("1.5")}
