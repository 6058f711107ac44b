"""Build the ledger's async engine from a URL, and bring its schema up to date with Alembic."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.ledger import template
from gateway.settings import default_data_dir

if TYPE_CHECKING:  # Alembic (and Mako, Pygments) is imported only to migrate: 12 MiB
    from alembic.config import Config


# The one default (Settings.data_dir's): never a path relative to the current directory.
def default_db_url() -> str:
    """A SQLite file in the per-user data folder (read when used: importing never fails)."""
    return f"sqlite+aiosqlite:///{default_data_dir() / 'farebox.db'}"


MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Any constant works; it only has to be the same in every Farebox process.
_MIGRATION_LOCK_KEY = 0x4641_5245_424F_58  # "FAREBOX"
_POSTGRES_DRIVERS = {"postgres", "postgresql", "postgresql+psycopg2", "postgresql+psycopg"}
_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}


class LedgerURLError(ValueError):
    """The database URL names a database the ledger does not support."""


def async_url(url: str | URL | None) -> URL:
    """Return `url` rewritten to the async driver (aiosqlite or asyncpg) of its database."""
    parsed = make_url(url or default_db_url())
    if parsed.drivername in _POSTGRES_DRIVERS:
        return parsed.set(drivername="postgresql+asyncpg")
    if parsed.drivername in _SQLITE_DRIVERS:
        return parsed.set(drivername="sqlite+aiosqlite")
    if parsed.drivername in {"postgresql+asyncpg", "sqlite+aiosqlite"}:
        return parsed
    raise LedgerURLError(
        f"unsupported ledger database URL scheme {parsed.drivername!r}: "
        "use sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host/db"
    )


def _sqlite_file(url: URL) -> Path | None:
    """Return the database file of a SQLite URL, or None for an in-memory database."""
    database = url.database or ""
    if database in {"", ":memory:"} or database.startswith("file:"):
        return None
    return Path(database)


def _set_sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    """Turn on WAL (readers never block the writer) and wait, not fail, on a busy lock."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL is durable across application crashes in WAL mode; the spool covers the rest.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str | URL | None = None, **kwargs: Any) -> AsyncEngine:
    """Create an async engine; SQLite gets its directory created and WAL mode."""
    target = async_url(url)
    if target.get_backend_name() == "sqlite":
        path = _sqlite_file(target)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(target, **kwargs)
        if path is not None:
            event.listen(engine.sync_engine, "connect", _set_sqlite_pragmas)
        return engine
    from gateway.ledger.models import with_postgresql_options

    with_postgresql_options()  # the dialect is loaded for this engine anyway
    kwargs.setdefault("pool_pre_ping", True)
    # Fail fast when PostgreSQL is down, so the writer can retry instead of hanging.
    kwargs.setdefault("connect_args", {"timeout": 10})
    return create_async_engine(target, **kwargs)


def head_revision() -> str:
    """The newest migration's revision, read from the files without importing Alembic."""
    revisions, parents = set(), set()
    for script in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"):
        source = script.read_text()
        revisions.update(re.findall(r'^revision[^=]*= "([^"]+)"', source, re.MULTILINE))
        parents.update(re.findall(r'^down_revision[^=]*= "([^"]+)"', source, re.MULTILINE))
    (head,) = revisions - parents
    return head


def _at_head(connection: Connection) -> bool:
    if not inspect(connection).has_table("alembic_version"):
        return False
    found = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return found == [head_revision()]


def alembic_config(url: str | URL | None = None) -> Config:
    """Build the Alembic config in code: the migrations live in the package, not in an ini."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolates '%'; a URL-encoded password must survive that.
    rendered = async_url(url).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def _upgrade(connection: Connection, config: Config, revision: str) -> None:
    """Run `alembic upgrade` on a lent connection, one process at a time on PostgreSQL."""
    if connection.dialect.name == "postgresql":
        # Several workers may start together; the lock makes the others wait, then no-op.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
    from alembic import command

    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def migrate(url: str | URL | None = None, revision: str = "head") -> None:
    """Apply the ledger's Alembic migrations to the database at `url` (default: head).

    A new SQLite ledger at head is built from the migrations' schema script instead
    (gateway/ledger/template.py); a `revision` named, even head's, runs the migrations.
    """
    path = _sqlite_path(url) if revision == "head" else None
    head = head_revision() if path is not None else ""  # read once: it scans every migration
    fresh = path if path is not None and template.is_new(path) else None
    if fresh is not None and template.copy_into(fresh, head):
        return
    if path is not None and fresh is None and template.recorded_version(path) == head:
        return  # at head, read with the sqlite3 module: no engine, no aiosqlite thread
    engine = make_engine(url)
    try:
        async with engine.begin() as connection:
            if revision == "head" and await connection.run_sync(_at_head):
                return  # nothing to apply: no Alembic import, no upgrade run
            await connection.run_sync(_upgrade, alembic_config(url), revision)
    finally:
        await engine.dispose()


def _sqlite_path(url: str | URL | None) -> Path | None:
    """The file of a SQLite ledger (there or not), else None."""
    target = async_url(url)
    return _sqlite_file(target) if target.get_backend_name() == "sqlite" else None
