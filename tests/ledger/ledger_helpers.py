"""Builders and waits shared by the ledger tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Table, func, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord
from gateway.ledger.store import REQUESTS, TASKS, task_deltas

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def record(task_id: str = "task-1", **fields: Any) -> RequestRecord:
    """Build a request record with plausible defaults; `fields` override them."""
    values: dict[str, Any] = {
        "request_id": f"req-{task_id}",
        "task_id": task_id,
        "team": "team-a",
        "project": "proj-a",
        "model_alias": "smart",
        "backend": "openai",
        "provider": "openai",
        "upstream_model": "gpt-x",
        "tier_requested": "standard",
        "tier_served": "standard",
        "prompt_tokens": 1000,
        "cached_tokens": 600,
        "completion_tokens": 200,
        "reasoning_tokens": 50,
        "cost_input": Decimal("0.0004"),
        "cost_cached": Decimal("0.00003"),
        "cost_output": Decimal("0.0015"),
        "cost_reasoning": Decimal("0.0005"),
        "cost_total": Decimal("0.00243"),
        "duration_ms": 900,
        "ttft_ms": 120,
    }
    values.update(fields)
    return RequestRecord(**values)


def sums(records: list[RequestRecord]) -> dict[str, Any]:
    """Sum tokens and costs of records in Python, the reference for the database."""
    totals: dict[str, Any] = {name: sum(getattr(r, name) for r in records) for name in TOKEN_FIELDS}
    for name in COST_FIELDS:
        totals[name] = sum((getattr(r, name) for r in records), Decimal(0))
    return totals


async def count_requests(engine: AsyncEngine) -> int:
    """Count request rows."""
    async with engine.connect() as connection:
        return int(
            (await connection.execute(select(func.count()).select_from(REQUESTS))).scalar_one()
        )


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `predicate` until it holds; fail with a clear message after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


async def fill_as_old_revision(connection: AsyncConnection, records: list[RequestRecord]) -> None:
    """Write request rows and their new tasks with only the columns an older revision has,
    as the release of that revision did (today's writer also fills later tables)."""

    def columns(sync: Connection, table: Table) -> set[str]:
        return {c["name"] for c in inspect(sync).get_columns(table.name)}

    for table, rows in ((REQUESTS, [vars_of(r) for r in records]), (TASKS, task_deltas(records))):
        known = await connection.run_sync(columns, table)
        await connection.execute(table.insert(), [{k: v for k, v in row.items() if k in known}
                                                  for row in rows])  # fmt: skip


def vars_of(item: RequestRecord) -> dict[str, Any]:
    """A record's fields by name."""
    return {name: getattr(item, name) for name in item.__slots__}  # type: ignore[attr-defined]
