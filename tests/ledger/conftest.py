"""Fixtures of the ledger tests: the same tests run on a SQLite file and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ledger_db import DIALECTS, WriterFactory, empty_database, fresh_pg_database
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, OnTaskFinished, WriterConfig, make_engine, migrate


@pytest.fixture
async def pg_database() -> AsyncIterator[str]:
    """A fresh PostgreSQL database (PostgreSQL-only tests)."""
    async with fresh_pg_database() as name:
        yield name


@pytest.fixture(params=DIALECTS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database, a SQLite file or a fresh PostgreSQL database."""
    async with empty_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a migrated, empty database."""
    await migrate(db_url)
    engine = make_engine(db_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    """A spool directory of this test's own."""
    return tmp_path / "spool"


@pytest.fixture
async def make_writer(engine: AsyncEngine, spool_dir: Path) -> AsyncIterator[WriterFactory]:
    """Build writers with fast test timings; any left open are closed after the test."""
    writers: list[LedgerWriter] = []

    fast = WriterConfig(
        spool_dir=spool_dir,
        flush_interval=0.02,
        retry_initial=0.02,
        retry_max=0.1,
        idle_timeout=None,
    )

    def build(on_task_finished: OnTaskFinished | None = None, **overrides: Any) -> LedgerWriter:
        writer = LedgerWriter(engine, replace(fast, **overrides), on_task_finished)
        writers.append(writer)
        return writer

    yield build
    for writer in writers:
        await writer.close()


@pytest.fixture
def repo_root() -> Path:
    """The repository root, for subprocesses that import `gateway`."""
    return Path(__file__).resolve().parents[2]
