"""Engine factory and migrations, on SQLite files and on PostgreSQL."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from ledger_helpers import record
from sqlalchemy import inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerURLError, async_url, make_engine, migrate
from gateway.ledger.engine import alembic_config, head_revision
from gateway.ledger.models import Base
from gateway.ledger.store import REQUESTS, insert_requests
from gateway.settings import default_data_dir


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
        (None, f"sqlite+aiosqlite:///{default_data_dir() / 'farebox.db'}"),
    ],
)
def test_urls_are_rewritten_to_async_drivers(given: str | None, expected: str) -> None:
    assert async_url(given).render_as_string() == expected


def test_unsupported_url_says_what_to_use() -> None:
    with pytest.raises(LedgerURLError, match="sqlite\\+aiosqlite"):
        async_url("mysql://u@h/db")


async def test_sqlite_engine_creates_its_directory_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "ledger.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        async with engine.connect() as connection:
            mode = (await connection.execute(text("PRAGMA journal_mode"))).scalar_one()
        assert mode == "wal"
        assert path.parent.is_dir()
    finally:
        await engine.dispose()


def _schema(connection: Connection) -> tuple[set[str], str | None, list[object]]:
    """Return the tables, the Alembic revision and the model-vs-database differences."""
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    diff = compare_metadata(context, Base.metadata)
    return set(inspect(connection).get_table_names()), context.get_current_revision(), diff


async def _schema_of(db_url: str) -> tuple[set[str], str | None, list[object]]:
    engine = make_engine(db_url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(_schema)
    finally:
        await engine.dispose()


async def test_migrations_run_from_empty_and_match_the_models(db_url: str) -> None:
    await migrate(db_url)
    await migrate(db_url)  # a second run (another worker starting) is a no-op
    tables, revision, diff = await _schema_of(db_url)
    head = ScriptDirectory.from_config(alembic_config(db_url)).get_current_head()
    assert {"requests", "tasks", "alembic_version"} <= tables
    assert revision == head
    assert diff == []


def test_head_revision_read_from_the_files_is_alembics_head() -> None:
    # migrate() skips Alembic (12 MiB, ~0.15 s) when the database is at this revision.
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


async def test_a_database_behind_head_is_still_upgraded(db_url: str) -> None:
    await migrate(db_url, revision="0008")
    await migrate(db_url)  # not at head: the shortcut must not skip the upgrade
    tables, revision, diff = await _schema_of(db_url)
    assert "requests" in tables
    assert revision == head_revision()
    assert diff == []


async def test_money_keeps_ten_places_exactly_half_even(engine: AsyncEngine) -> None:
    values = {
        "a": Decimal("0.00000000005"),  # half: rounds to even, 0
        "b": Decimal("0.00000000015"),  # half: rounds to even, 0.0000000002
        "c": Decimal("12345.6789012345"),
    }
    rows = [record(id=key, cost_total=value) for key, value in values.items()]
    async with engine.begin() as connection:
        await insert_requests(connection, rows)
    async with engine.connect() as connection:
        stored = dict(
            (await connection.execute(select(REQUESTS.c.id, REQUESTS.c.cost_total))).all()
        )
    assert stored == {
        "a": Decimal("0"),
        "b": Decimal("0.0000000002"),
        "c": Decimal("12345.6789012345"),
    }
    assert all(isinstance(value, Decimal) for value in stored.values())
