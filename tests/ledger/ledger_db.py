"""Databases for the ledger tests: a SQLite file or a fresh PostgreSQL database.

Each PostgreSQL test gets a database of its own (created, then dropped), so test runs of
other engineers on the same server never see each other's rows. With CI=true an
unreachable PostgreSQL fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.ledger import LedgerWriter
from tests.pg import PG_HOST, PG_PORT, fresh_pg_database, pg_url, require_postgres

__all__ = ["PG_HOST", "PG_PORT", "fresh_pg_database", "pg_url", "require_postgres"]

WriterFactory = Callable[..., LedgerWriter]


DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def empty_database(dialect: str, directory: Path) -> AsyncIterator[str]:
    """Yield the URL of an empty database: a SQLite file in `directory`, or a fresh PostgreSQL one."""
    if dialect == "sqlite":
        yield f"sqlite+aiosqlite:///{directory / 'db' / 'ledger.db'}"
        return
    async with fresh_pg_database("ledger_test") as name:
        yield pg_url(name)
