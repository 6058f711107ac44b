"""Databases for the ledger tests: a SQLite file or a fresh PostgreSQL database.

Each PostgreSQL test gets a database of its own (created, then dropped), so test runs of
other engineers on the same server never see each other's rows. With CI=true an
unreachable PostgreSQL fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from gateway.ledger import LedgerWriter

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_ADMIN_DB = "test"

WriterFactory = Callable[..., LedgerWriter]


def pg_url(database: str, port: int = PG_PORT) -> str:
    """Return the SQLAlchemy URL of a database on the test server (or via a proxy port)."""
    return f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{port}/{database}"


def require_postgres(reason: str) -> None:
    """Fail under CI, where PostgreSQL is part of the contract; skip on a laptop."""
    message = f"PostgreSQL at {PG_HOST}:{PG_PORT} is unreachable ({reason}); run `make services`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


async def _admin() -> asyncpg.Connection:
    """Connect to the admin database, or fail/skip the test with the reason."""
    try:
        return await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=5
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require_postgres(f"{type(exc).__name__}: {exc}")
        raise  # unreachable: require_postgres always raises


@contextlib.asynccontextmanager
async def fresh_pg_database() -> AsyncIterator[str]:
    """Create an empty, uniquely named PostgreSQL database; drop it afterwards."""
    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def empty_database(dialect: str, directory: Path) -> AsyncIterator[str]:
    """Yield the URL of an empty database: a SQLite file in `directory`, or a fresh PostgreSQL one."""
    if dialect == "sqlite":
        yield f"sqlite+aiosqlite:///{directory / 'db' / 'ledger.db'}"
        return
    async with fresh_pg_database() as name:
        yield pg_url(name)
