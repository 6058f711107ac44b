"""A PostgreSQL database of a test's own on the local server (created, or emptied again).

With CI=true an unreachable PostgreSQL fails the test; elsewhere it is skipped with the
reason, so a laptop without the service still runs everything else.
"""

from __future__ import annotations

import asyncio
import atexit
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


# Databases this process made and emptied again, free for the next test, by prefix. A
# CREATE DATABASE and its DROP (the copy of template1, a checkpoint) took 80-170 ms on a
# quiet box and 0.25-0.8 s on a loaded one, for each of ~120 tests; emptying one that
# holds a migrated ledger takes 25-32 ms.
_FREE: dict[str, list[str]] = {}
_MADE: list[str] = []
# What a fresh database holds: the public schema as PostgreSQL 15 makes it.
_SYSTEM_SCHEMAS = "nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"


@contextlib.asynccontextmanager
async def fresh_pg_database(prefix: str = "farebox_test") -> AsyncIterator[str]:
    """An empty PostgreSQL database of the caller's own, uniquely named: created, or one
    this process emptied after an earlier test (its connections closed, as DROP DATABASE
    ... WITH (FORCE) closed them, and every schema dropped); dropped when the process ends."""
    free = _FREE.setdefault(prefix, [])
    name = free.pop() if free else f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        if name not in _MADE:
            await admin.execute(f'CREATE DATABASE "{name}"')
            _MADE.append(name)
        yield name
    finally:
        try:
            await _empty(admin, name)
            free.append(name)
        except (OSError, asyncpg.PostgresError):  # not reusable: gone as before
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def _empty(admin: asyncpg.Connection, name: str) -> None:
    """Close the database's other connections and drop everything the test made in it."""
    await admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = $1 AND pid <> pg_backend_pid()",
        name,
    )
    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=name)
    try:
        schemas = await conn.fetch(f"SELECT nspname FROM pg_namespace WHERE {_SYSTEM_SCHEMAS}")
        async with conn.transaction():
            for (schema,) in schemas:
                await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await conn.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
            await conn.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
    finally:
        await conn.close()


@atexit.register
def _drop_made() -> None:
    """Drop the databases this process made (at its exit: no test holds one then)."""
    if not _MADE:
        return

    async def drop() -> None:
        admin = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=5
        )
        try:
            for name in _MADE:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    with contextlib.suppress(Exception):  # a server gone by then keeps them; nothing to fail
        asyncio.run(drop())
