"""PostgreSQL's parts of the ledger load where PostgreSQL is used, and say the same there.

Importing the ledger loads neither asyncpg nor SQLAlchemy's PostgreSQL dialect (a SQLite
ledger's gateway never needs them: tests/e2e/test_serve_imports.py); a PostgreSQL engine
gives the covering indexes their INCLUDE columns, the statements are the ones built from
the compiled INSERT, and `ledger_down()` names asyncpg's failures once asyncpg is loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import asyncpg
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex

from gateway.ledger import make_engine, pgjson, store
from gateway.ledger.reads import ledger_down

FRESH = """
import json, sys
import gateway.ledger, gateway.ledger.batch, gateway.ledger.reads, gateway.ledger.models as m
loaded = lambda: sorted(n for n in sys.modules if n == "asyncpg" or "postgresql" in n)
before = loaded()
down = [c.__module__ for c in gateway.ledger.reads.ledger_down()]
includes = {i.name: i.kwargs.get("postgresql_include") for i in m.TaskRow.__table__.indexes}
gateway.ledger.make_engine("postgresql://u@127.0.0.1:1/none")  # connects to nothing yet
after = {i.name: i.kwargs.get("postgresql_include") for i in m.TaskRow.__table__.indexes}
print(json.dumps([before, down, includes, after, "asyncpg" in sys.modules]))
"""

INCLUDES = {
    "ix_tasks_finished_at_cover": ["team", "status", "cost_total"],
    "ix_tasks_team_cost": ["status", "finished_at", "request_count", "untasked"],
    "ix_tasks_team_status_cost": ["finished_at", "request_count", "untasked"],
    "ix_tasks_project_cost": ["status", "finished_at", "request_count", "untasked"],
    "ix_tasks_status_last_activity_at": None,
    "ix_tasks_team_finished_at": None,
}


def test_the_ledger_loads_postgresql_only_for_a_postgresql_engine() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, check=True, timeout=60
    )
    before, down, includes, after, asyncpg_loaded = json.loads(done.stdout)
    assert before == []
    assert "asyncpg.exceptions" not in down and "builtins" in down  # OSError, ...
    assert includes == dict.fromkeys(INCLUDES)
    assert after == INCLUDES
    assert asyncpg_loaded  # the engine's dialect imports its driver


def test_a_postgresql_engine_renders_the_covering_indexes() -> None:
    make_engine("postgresql://u@127.0.0.1:1/none")
    ddl = {
        str(index.name): str(CreateIndex(index).compile(dialect=postgresql.dialect()))
        for index in store.TASKS.indexes
    }
    assert ddl["ix_tasks_team_cost"] == (
        "CREATE INDEX ix_tasks_team_cost ON tasks (team, cost_total) "
        "INCLUDE (status, finished_at, request_count, untasked)"
    )
    assert ddl["ix_tasks_team_finished_at"] == (
        "CREATE INDEX ix_tasks_team_finished_at ON tasks (team, finished_at)"
    )


def test_the_request_rows_conflict_clause_is_the_compiled_statements() -> None:
    assert pgjson.conflict_tail(store._postgresql_request_insert()) == store.REQUEST_CONFLICT


def test_ledger_down_names_asyncpgs_failures_once_it_is_loaded() -> None:
    down = ledger_down()
    for failure in (
        OSError,
        asyncpg.PostgresConnectionError,
        asyncpg.InsufficientResourcesError,
        asyncpg.OperatorInterventionError,
        asyncpg.InterfaceError,
    ):
        assert failure in down
    try:
        raise asyncpg.CannotConnectNowError("the database system is starting up")
    except ledger_down() as exc:  # a subclass of PostgresConnectionError: caught
        caught: BaseException = exc
    assert isinstance(caught, asyncpg.CannotConnectNowError)
