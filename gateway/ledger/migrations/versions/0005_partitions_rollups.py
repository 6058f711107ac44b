"""A ledger that stays fast: daily partitions of `requests` (PostgreSQL), hourly and daily
rollups of request sums, and an `untasked` flag on tasks.

On PostgreSQL the existing `requests` table becomes a table range-partitioned on
`created_at` by UTC day, its rows copied into one partition per day that has rows
(partitions live in the `ledger_partitions` schema). A partitioned table's primary key
must hold the partition column, so it becomes (id, created_at). SQLite keeps its table.
On both, the rollups (`rollup_hourly`, `rollup_daily` by team, project, model, backend
and tier; `rollup_steps_hourly`, `rollup_steps_daily` by team, project, step and step
kind, a missing step stored as '' and a present one as ':' + it) are created and filled
from the rows there are, and `tasks.untasked` is set for the gateway's wrappers of
requests without a task id.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_first = importlib.import_module("gateway.ledger.migrations.versions.0001_ledger_tables")
money, timestamp, TOKENS, COSTS = _first.money, _first.timestamp, _first.TOKENS, _first.COSTS

SCHEMA = "ledger_partitions"
DIMENSIONS = ("team", "project", "model_alias", "backend", "tier_served")
STEP_DIMENSIONS = ("team", "project", "task_step", "step_kind")
# How each key column is filled from a request row: nullable ones are encoded.
KEY_SQL = {name: name for name in DIMENSIONS} | {
    name: f"CASE WHEN {name} IS NULL THEN '' ELSE ':' || {name} END"
    for name in ("task_step", "step_kind")
}
ROLLUPS = {
    ("rollup_hourly", "hour"): DIMENSIONS,
    ("rollup_daily", "day"): DIMENSIONS,
    ("rollup_steps_hourly", "hour"): STEP_DIMENSIONS,
    ("rollup_steps_daily", "day"): STEP_DIMENSIONS,
}
REQUEST_INDEXES = {
    "ix_requests_created_at": ["created_at"],
    "ix_requests_task_id": ["task_id"],
    "ix_requests_team_created_at": ["team", "created_at"],
    "ix_requests_request_id": ["request_id"],
}
UNTASKED = (
    "substr(task_id, 1, 5) = 'task-' AND substr(request_id, 1, 4) = 'req-' "
    "AND substr(task_id, 6) = substr(request_id, 5)"
)
# The bucket of a row: PostgreSQL truncates in UTC; SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff'.
BUCKETS = {
    "postgresql": {"hour": "date_trunc('hour', created_at, 'UTC')",
                   "day": "date_trunc('day', created_at, 'UTC')"},
    "sqlite": {"hour": "strftime('%Y-%m-%d %H:00:00.000000', created_at)",
               "day": "strftime('%Y-%m-%d 00:00:00.000000', created_at)"},
}  # fmt: skip


def upgrade() -> None:
    """Partition (PostgreSQL), add the untasked flag, create and fill the rollups."""
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        _partition_requests()
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("untasked", sa.Boolean(), server_default=sa.false(),
                                   nullable=False))  # fmt: skip
    op.create_index("ix_tasks_finished_at", "tasks", ["finished_at"])
    op.execute(
        "UPDATE tasks SET untasked = TRUE WHERE EXISTS (SELECT 1 FROM requests "
        f"WHERE requests.task_id = tasks.task_id AND {UNTASKED})"
    )
    for (table, grain), dimensions in ROLLUPS.items():
        _create_rollup(table, dimensions)
        _fill_rollup(table, BUCKETS[dialect][grain], dimensions)


def _partition_requests() -> None:
    """Swap `requests` for a partitioned copy holding the same rows."""
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    op.execute("ALTER TABLE requests RENAME TO requests_unpartitioned")
    for name in REQUEST_INDEXES:
        op.execute(f"DROP INDEX {name}")
    op.execute("ALTER TABLE requests_unpartitioned DROP CONSTRAINT requests_pkey")
    op.execute(
        "CREATE TABLE requests (LIKE requests_unpartitioned INCLUDING DEFAULTS) "
        "PARTITION BY RANGE (created_at)"
    )
    rows = op.get_bind().execute(
        sa.text("SELECT DISTINCT date_trunc('day', created_at, 'UTC') FROM requests_unpartitioned")
    )
    today = datetime.now(UTC).date()
    days = {row[0].astimezone(UTC).date() for row in rows}
    days |= {today + timedelta(days=offset) for offset in range(-1, 3)}
    for day in sorted(days):
        op.execute(_partition_sql(day))
    op.execute("INSERT INTO requests SELECT * FROM requests_unpartitioned")
    op.execute("DROP TABLE requests_unpartitioned")
    # Indexes after the copy: building them once is faster than updating them per row.
    op.execute("ALTER TABLE requests ADD CONSTRAINT requests_pkey PRIMARY KEY (id, created_at)")
    for name, columns in REQUEST_INDEXES.items():
        op.create_index(name, "requests", columns)


def _partition_sql(day: object) -> str:
    """One day's partition, as gateway.ledger.partitions names it (frozen here)."""
    start = datetime.fromisoformat(f"{day}T00:00:00+00:00")
    end = start + timedelta(days=1)
    name = f"requests_p{start:%Y%m%d}"
    return (
        f'CREATE TABLE IF NOT EXISTS {SCHEMA}."{name}" PARTITION OF requests '
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def _create_rollup(table: str, dimensions: tuple[str, ...]) -> None:
    """Create one rollup table: its key and its sums."""
    op.create_table(
        table,
        sa.Column("bucket", timestamp(), primary_key=True),
        *(sa.Column(name, sa.String(), primary_key=True) for name in dimensions),
        sa.Column("request_count", sa.BigInteger(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in TOKENS),
        *(sa.Column(name, money(), nullable=False) for name in COSTS),
        sa.Column("untasked_requests", sa.BigInteger(), nullable=False),
        sa.Column("untasked_cost", money(), nullable=False),
    )


def _fill_rollup(table: str, bucket: str, dimensions: tuple[str, ...]) -> None:
    """Sum the existing rows into the rollup, as the writer would have."""
    names = ", ".join(dimensions)
    keys = ", ".join(KEY_SQL[name] for name in dimensions)
    sums = ", ".join(f"SUM({name})" for name in (*TOKENS, *COSTS))
    measures = ", ".join((*TOKENS, *COSTS))
    op.execute(
        f"INSERT INTO {table} (bucket, {names}, request_count, {measures}, untasked_requests, "
        f"untasked_cost) SELECT {bucket}, {keys}, COUNT(*), {sums}, "
        f"SUM(CASE WHEN {UNTASKED} AND attempt = 0 THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {UNTASKED} THEN cost_total ELSE 0 END) "
        f"FROM requests GROUP BY {bucket}, {keys}"
    )


def downgrade() -> None:
    """Drop the rollups and the flag; on PostgreSQL put the rows back in a plain table."""
    for table, _grain in ROLLUPS:
        op.drop_table(table)
    op.drop_index("ix_tasks_finished_at", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("untasked")
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE TABLE requests_plain (LIKE requests INCLUDING DEFAULTS)")
    op.execute("INSERT INTO requests_plain SELECT * FROM requests")
    op.execute("DROP TABLE requests")  # its partitions go with it
    op.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    op.execute("ALTER TABLE requests_plain RENAME TO requests")
    op.execute("ALTER TABLE requests ADD CONSTRAINT requests_pkey PRIMARY KEY (id)")
    for name, columns in REQUEST_INDEXES.items():
        op.create_index(name, "requests", columns)
