"""The ledger: one row per upstream call, running totals per task, and the queries over them.

Write side: build a `RequestRecord` per upstream call and `LedgerWriter.submit()` it;
`LedgerWriter.finish_task()` records a task's outcome. Read side: `gateway.ledger.queries`.
Schema: `migrate(url)` applies the Alembic migrations shipped in `migrations/`.
See docs/ledger.md for the durability guarantee.
"""

from __future__ import annotations

from gateway.ledger.engine import LedgerURLError, async_url, make_engine, migrate
from gateway.ledger.queries import (
    SpendRow,
    TaskCostStats,
    TaskDetail,
    TaskSummary,
    export_csv,
    get_task,
    spend,
    task_cost_stats,
)
from gateway.ledger.records import FinishedTask, RequestRecord, TaskFinish
from gateway.ledger.store import close_idle_tasks
from gateway.ledger.writer import LedgerWriter, OnTaskFinished, WriterConfig, WriterStats

__all__ = [
    "FinishedTask",
    "LedgerURLError",
    "LedgerWriter",
    "OnTaskFinished",
    "RequestRecord",
    "SpendRow",
    "TaskCostStats",
    "TaskDetail",
    "TaskFinish",
    "TaskSummary",
    "WriterConfig",
    "WriterStats",
    "async_url",
    "close_idle_tasks",
    "export_csv",
    "get_task",
    "make_engine",
    "migrate",
    "spend",
    "task_cost_stats",
]
