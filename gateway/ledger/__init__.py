"""The ledger: one row per upstream call, running totals per task, and the queries over them.

Write side: build a `RequestRecord` per upstream call and `LedgerWriter.submit()` it;
`LedgerWriter.finish_task()` records a task's outcome. Read side: `gateway.ledger.queries`.
Schema: `migrate(url)` applies the Alembic migrations shipped in `migrations/`.
See docs/ledger.md for the durability guarantee.

The names below are imported on first use (PEP 562): a module that needs only the plain
records (`gateway.ledger.records`: the tenants' limits, the settings, every CLI command
through gateway.config) must not pay for SQLAlchemy's import by reaching this package
(bench/cli_start.py measures a command line's start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.ledger.engine import LedgerURLError, async_url, make_engine, migrate
    from gateway.ledger.queries import export_csv, get_task, spend, task_cost_stats
    from gateway.ledger.read_rows import SpendRow, TaskCostStats, TaskDetail, TaskSummary
    from gateway.ledger.records import FinishedTask, RequestRecord, TaskFinish
    from gateway.ledger.store import close_idle_tasks
    from gateway.ledger.writer import LedgerWriter, OnTaskFinished, WriterConfig, WriterStats

_HOMES = {
    "engine": ("LedgerURLError", "async_url", "make_engine", "migrate"),
    "queries": ("export_csv", "get_task", "spend", "task_cost_stats"),
    "read_rows": ("SpendRow", "TaskCostStats", "TaskDetail", "TaskSummary"),
    "records": ("FinishedTask", "RequestRecord", "TaskFinish"),
    "store": ("close_idle_tasks",),
    "writer": ("LedgerWriter", "OnTaskFinished", "WriterConfig", "WriterStats"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

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


def __getattr__(name: str) -> Any:
    """Import an exported name's module on first use, and keep the name here after."""
    module = _HOME.get(name)
    if module is None:  # a submodule (`from gateway.ledger import store`) is found by import
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
