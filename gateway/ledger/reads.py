"""Ledger reads for the API and `farebox report`: bounded in time, with one meaning of "down".

A read answers within a bounded time whether or not the database does: on PostgreSQL its
engine connects within `connect_s` and runs each statement within `statement_s` (a SQLite
file has no network to wait on). `ledger_down()` lists what an unreachable database raises,
for the one place that turns it into a 503 (`gateway.api.deps.ledger_engine`).
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger.engine import async_url, make_engine
from gateway.ledger.writer import LedgerWriter

_DOWN: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, or timed out (TimeoutError is an OSError), raised unwrapped
    OperationalError,  # SQLAlchemy's wrapping of a lost connection; SQLite's "locked"
    InterfaceError,
    DisconnectionError,
    PoolTimeoutError,  # no pooled connection came free in time
)


def ledger_down() -> tuple[type[BaseException], ...]:
    """What an unreachable database raises, for `except ledger_down() as exc:`.

    asyncpg's own classes are in it once asyncpg is loaded: no asyncpg exception can be
    raised before, and a SQLite ledger never loads it (2.5 MiB and its import time in every
    process). An `except` clause evaluates this only when something was raised.
    """
    if "asyncpg" in sys.modules:
        return _with_asyncpg()
    return _DOWN


@cache
def _with_asyncpg() -> tuple[type[BaseException], ...]:
    import asyncpg

    return (
        *_DOWN,
        asyncpg.PostgresConnectionError,  # SQLSTATE 08
        asyncpg.InsufficientResourcesError,  # 53: too many connections, disk full
        asyncpg.OperatorInterventionError,  # 57: shutting down, starting up
        asyncpg.InterfaceError,  # the connection closed under a query
    )


def bounded_engine(
    url: str | URL | None, connect_s: float, statement_s: float | None = None
) -> AsyncEngine:
    """An engine whose connects (and statements, if `statement_s`) give up in time."""
    target = async_url(url)
    if target.get_backend_name() != "postgresql":
        return make_engine(target)
    connect_args: dict[str, Any] = {"timeout": connect_s}
    if statement_s is not None:
        connect_args["command_timeout"] = statement_s
    return make_engine(target, connect_args=connect_args, pool_timeout=connect_s)


async def catch_up(writer: LedgerWriter, engine: AsyncEngine) -> None:
    """Commit what this process has served, so that a read right after sees it.

    While the writer waits to retry a failed database, the database is asked first
    (within the read engine's timeouts): still down, the read fails now rather than
    after the writer's own attempt; back, the backlog is committed before the read.
    """
    if writer.retrying:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
    await writer.flush()
