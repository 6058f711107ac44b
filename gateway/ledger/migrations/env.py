"""Alembic environment of the ledger: run on a connection `migrate()` lends, or on its own.

`gateway.ledger.engine.migrate` passes an open connection in `config.attributes`, which
is how Alembic runs inside an event loop that is already running. Called from
synchronous code (e.g. `alembic.command.revision(alembic_config(url), autogenerate=True)`)
it opens its own async engine; in offline mode it prints SQL for the URL's dialect.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.ledger.engine import make_engine
from gateway.ledger.models import METADATA, with_postgresql_options

with_postgresql_options()  # a migration may compare or render PostgreSQL's indexes
target_metadata = METADATA


def run_on(connection: Connection) -> None:
    """Run the pending migrations on a synchronous connection."""
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_with_own_engine(url: str) -> None:
    """Open an engine for `url`, migrate, and dispose of it."""
    engine = make_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run_on)
    finally:
        await engine.dispose()


def main() -> None:
    """Dispatch on how Alembic was invoked."""
    config = context.config
    lent = config.attributes.get("connection")
    url = config.get_main_option("sqlalchemy.url") or ""
    if lent is not None:
        run_on(lent)
    elif context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
    else:
        asyncio.run(run_with_own_engine(url))


main()
