"""A PostgreSQL database of a test's own on the local server (created, then dropped).

With CI=true an unreachable PostgreSQL fails the test; elsewhere it is skipped with the
reason, so a laptop without the service still runs everything else.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_ADMIN_DB = "test"


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
async def fresh_pg_database(prefix: str = "farebox_test") -> AsyncIterator[str]:
    """Create an empty, uniquely named PostgreSQL database; drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
