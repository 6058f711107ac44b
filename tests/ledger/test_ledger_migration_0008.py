"""Migration 0008 keys the prefix rollups by served tier too (filled again from the rows)
and makes the finished-task index a covering one; on a filled 0007 ledger and back."""

from __future__ import annotations

from alembic import command
from ledger_helpers import fill_as_old_revision
from rollup_workload import base_rows, expected_rollup, stored_rollup, workload
from sqlalchemy import Column, MetaData, Table, inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import make_engine, migrate
from gateway.ledger.engine import alembic_config
from gateway.ledger.partitions import ensure_partitions
from gateway.ledger.records import RequestRecord
from gateway.ledger.rollup import PREFIX, PREFIX_EXTRA, hour_of

OLD_KEY = ("team", "project", "model_alias", "prefix_status")
# The hourly prefix rollup as 0007 made it (the model has the tier since 0008).
OLD_HOURLY = Table("rollup_prefix_hourly", MetaData(), *(
    Column(c.name, c.type, primary_key=c.primary_key)
    for c in PREFIX.hourly.columns if c.name != "tier_served"))  # fmt: skip


def _shape(connection: Connection) -> tuple[list[str], set[str]]:
    """The hourly prefix rollup's key columns and the names of the tasks indexes."""
    inspector = inspect(connection)
    key = inspector.get_pk_constraint("rollup_prefix_hourly")["constrained_columns"]
    return key, {index["name"] for index in inspector.get_indexes("tasks")}


async def _fill_0007(engine: AsyncEngine) -> None:
    records = [e for e in workload() if isinstance(e, RequestRecord)]
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await ensure_partitions(connection, {r.created_at.date() for r in records})
        await fill_as_old_revision(connection, records)


async def test_0008_upgrades_a_filled_0007_ledger(db_url: str) -> None:
    await migrate(db_url, revision="0007")
    engine = make_engine(db_url)
    try:
        await _fill_0007(engine)
        await migrate(db_url)
        async with engine.connect() as connection:
            key, indexes = await connection.run_sync(_shape)
        assert key == ["bucket", *PREFIX.dimensions] and "tier_served" in key
        assert "ix_tasks_finished_at_cover" in indexes and "ix_tasks_finished_at" not in indexes
        records = await base_rows(engine)
        tiers = set()
        for table, floor in PREFIX.grains():  # the backfill equals the rows, tier by tier
            stored = await stored_rollup(engine, table, PREFIX.dimensions, PREFIX_EXTRA)
            assert stored == expected_rollup(records, floor, PREFIX.dimensions, PREFIX_EXTRA)
            tiers |= {k[PREFIX.dimensions.index("tier_served") + 1] for k in stored}
        assert tiers == {"standard", "priority", "flex"}
    finally:
        await engine.dispose()


async def test_0008_downgrades_to_0007(db_url: str) -> None:
    await migrate(db_url, revision="0007")
    engine = make_engine(db_url)
    config = alembic_config(db_url)

    def downgrade(connection: Connection) -> None:
        config.attributes["connection"] = connection
        command.downgrade(config, "0007")

    try:
        await _fill_0007(engine)
        await migrate(db_url)
        async with engine.begin() as connection:
            await connection.run_sync(downgrade)
        async with engine.connect() as connection:
            key, indexes = await connection.run_sync(_shape)
        assert key == ["bucket", *OLD_KEY]
        assert "ix_tasks_finished_at" in indexes and "ix_tasks_finished_at_cover" not in indexes
        stored = await stored_rollup(engine, OLD_HOURLY, OLD_KEY, PREFIX_EXTRA)
        assert stored == expected_rollup(await base_rows(engine), hour_of, OLD_KEY, PREFIX_EXTRA)
    finally:
        await engine.dispose()
