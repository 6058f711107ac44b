"""Fixtures of the key tests: a migrated ledger on a SQLite file and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.keys.store import KeyStore
from gateway.ledger import make_engine, migrate
from tests.pg import fresh_pg_database, pg_url

DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=DIALECTS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated database: a SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'db' / 'ledger.db'}"
        await migrate(url)
        yield url
        return
    async with fresh_pg_database("keys_test") as name:
        await migrate(pg_url(name))
        yield pg_url(name)


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(db_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def store(engine: AsyncEngine) -> KeyStore:
    return KeyStore(engine)
