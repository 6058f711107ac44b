"""deploy/compose/postgres-init.sh on the real PostgreSQL: Grafana's role reads what the
gateway's migrations create afterwards, and writes nothing.

The script runs as the postgres image runs it (psql as $POSTGRES_USER), here with roles
and a database of this test's own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from gateway.ledger import migrate
from tests.deploy.tools import DEPLOY
from tests.pg import PG_ADMIN_DB, PG_HOST, PG_PORT, PG_USER, require_postgres

pytestmark = pytest.mark.postgres
SCRIPT = DEPLOY / "compose" / "postgres-init.sh"


async def _sql(user: str, database: str, *statements: str) -> list[asyncpg.Record]:
    try:
        connection = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=user, database=database, timeout=5
        )
    except (OSError, TimeoutError) as exc:
        require_postgres(f"{type(exc).__name__}: {exc}")
        raise
    try:
        rows: list[asyncpg.Record] = []
        for statement in statements:
            rows = list(await connection.fetch(statement))
        return rows
    finally:
        await connection.close()


@pytest.fixture
def roles() -> Iterator[tuple[str, str, str]]:
    tag = uuid.uuid4().hex[:10]
    owner, reader, database = f"fb_owner_{tag}", f"fb_reader_{tag}", f"fb_init_{tag}"
    asyncio.run(
        _sql(PG_USER, PG_ADMIN_DB, f'CREATE ROLE "{owner}" LOGIN CREATEROLE',
             f'CREATE DATABASE "{database}" OWNER "{owner}"')
    )  # fmt: skip
    try:
        yield owner, reader, database
    finally:
        asyncio.run(
            _sql(PG_USER, PG_ADMIN_DB, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)',
                 f'DROP ROLE IF EXISTS "{reader}"', f'DROP ROLE IF EXISTS "{owner}"')
        )  # fmt: skip


def test_grafanas_role_reads_the_ledger_tables_made_after_it(
    roles: tuple[str, str, str],
) -> None:
    owner, reader, database = roles
    psql = shutil.which("psql")
    if psql is None:
        require_postgres("the psql client is not installed")
    env = {
        **os.environ,
        "PGHOST": PG_HOST,
        "PGPORT": str(PG_PORT),
        "POSTGRES_USER": owner,
        "POSTGRES_DB": database,
        "GRAFANA_DB_USER": reader,
        "GRAFANA_DB_PASSWORD": "grafana",
    }
    done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # Then the gateway starts and migrates, as the owner (compose: POSTGRES_USER).
    asyncio.run(migrate(f"postgresql+asyncpg://{owner}@{PG_HOST}:{PG_PORT}/{database}"))
    for table in ("requests", "tasks", "rollup_hourly"):  # what the dashboards read
        (row,) = asyncio.run(_sql(reader, database, f"SELECT count(*) AS n FROM {table}"))
        assert row["n"] == 0
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        asyncio.run(_sql(reader, database, "DELETE FROM tasks"))
