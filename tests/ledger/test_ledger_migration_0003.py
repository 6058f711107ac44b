"""Migration 0003 adds tier confirmation, lost cache dollars and thinking enforcement."""

from __future__ import annotations

from decimal import Decimal

from alembic import command
from ledger_helpers import fill_as_old_revision, record
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from gateway.ledger import get_task, make_engine, migrate
from gateway.ledger.engine import alembic_config
from gateway.ledger.records import RequestRecord
from gateway.ledger.store import insert_requests, task_deltas, upsert_tasks

NEW = ("tier_confirmed", "prefix_lost_usd", "thinking_enforcement", "dropped_params")


def _columns(connection: Connection) -> set[str]:
    return {c["name"] for c in inspect(connection).get_columns("requests")}


async def test_0003_upgrades_a_filled_0002_ledger(db_url: str) -> None:
    await migrate(db_url, revision="0002")
    engine = make_engine(db_url)
    old = record("t3", id="before")
    try:
        async with engine.begin() as connection:
            known = await connection.run_sync(_columns)
            assert not known & set(NEW)
            await fill_as_old_revision(connection, [old])
        await migrate(db_url)
        new = record(
            "t3", id="after", tier_confirmed=False, prefix_lost_usd=Decimal("0.0123456789"),
            thinking_enforcement="hint",
        )  # fmt: skip
        async with engine.begin() as connection:
            await upsert_tasks(connection, task_deltas(await insert_requests(connection, [new])))
        detail = await get_task(engine, "t3")
        assert detail is not None
        rows = {row.id: row for row in detail.requests}
        assert [getattr(rows["before"], n) for n in NEW] == [None] * len(NEW)
        assert rows["after"].tier_confirmed is False
        assert rows["after"].prefix_lost_usd == Decimal("0.0123456789")
        assert rows["after"].thinking_enforcement == "hint"
    finally:
        await engine.dispose()


async def test_0003_downgrades_to_0002(db_url: str) -> None:
    await migrate(db_url)
    config = alembic_config(db_url)

    def downgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.downgrade(config, "0002")

    engine = make_engine(db_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(downgrade)
        async with engine.connect() as connection:
            assert not await connection.run_sync(_columns) & set(NEW)
    finally:
        await engine.dispose()


def test_spooled_record_keeps_the_new_fields() -> None:
    row = record("t3", prefix_lost_usd=Decimal("0.5"), tier_confirmed=True)
    again = RequestRecord.from_json(row.to_json())
    assert again.prefix_lost_usd == Decimal("0.5") and again.tier_confirmed is True
    assert RequestRecord.from_json(record("t3").to_json()).prefix_lost_usd is None
