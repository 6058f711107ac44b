"""Migration 0004 adds the api_keys and audit_log tables, on a filled 0003 ledger and back."""

from __future__ import annotations

from alembic import command
from ledger_helpers import fill_as_old_revision, record
from sqlalchemy import inspect, select
from sqlalchemy.engine import Connection

from gateway.audit import AuditLog
from gateway.keys.model import KeyAttributes
from gateway.keys.store import KeyStore
from gateway.ledger import make_engine, migrate
from gateway.ledger.engine import alembic_config
from gateway.ledger.store import REQUESTS

NEW = {"api_keys", "audit_log"}


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


async def test_0004_upgrades_a_filled_0003_ledger(db_url: str) -> None:
    await migrate(db_url, revision="0003")
    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            assert not await connection.run_sync(_tables) & NEW
            await fill_as_old_revision(connection, [record("t4", id="before")])
        await migrate(db_url)
        made = await KeyStore(engine).create(KeyAttributes(team="research"))
        audit = AuditLog(engine)
        await audit.record(actor="admin", action="keys.create", target=made.record.id,
                           outcome="accepted", detail={"team": "research"})  # fmt: skip
        assert await KeyStore(engine).get(made.record.id) == made.record
        [entry] = await audit.read()
        assert entry.detail == {"team": "research"} and entry.id is not None
        async with engine.connect() as connection:
            ids = (await connection.execute(select(REQUESTS.c.id))).scalars().all()
        assert ids == ["before"]
    finally:
        await engine.dispose()


async def test_0004_downgrades_to_0003(db_url: str) -> None:
    await migrate(db_url)
    config = alembic_config(db_url)

    def downgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.downgrade(config, "0003")

    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(downgrade)
        async with engine.connect() as connection:
            assert not await connection.run_sync(_tables) & NEW
        await migrate(db_url)  # and up again
        async with engine.connect() as connection:
            assert await connection.run_sync(_tables) >= NEW
    finally:
        await engine.dispose()
