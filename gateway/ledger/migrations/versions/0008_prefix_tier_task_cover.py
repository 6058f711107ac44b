"""The served tier in the prefix rollups' key, and a covering index of finished tasks.

`rollup_prefix_hourly` and `rollup_prefix_daily` become keyed by (bucket, team, project,
model_alias, tier_served, prefix_status), so the Grafana panel *Prefix breaks*, which
filters by tier, reads them instead of the `requests` partitions (4.2 s over 30 days on
10M rows). A key column cannot be added to rows that were summed without it, so both
tables are dropped, created with the new key and filled again from the request rows
(0007's INSERT ... SELECT with the tier added); the writer keeps them from then on.

`ix_tasks_finished_at` becomes `ix_tasks_finished_at_cover`: the same key, carrying team,
status and cost_total (INCLUDE, PostgreSQL only), so *Cost per finished task* reads the
tasks finished in a range with an index-only scan instead of one heap page per task.
SQLite gets the plain key, as before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_first = importlib.import_module("gateway.ledger.migrations.versions.0001_ledger_tables")
_fifth = importlib.import_module("gateway.ledger.migrations.versions.0005_partitions_rollups")
_seventh = importlib.import_module("gateway.ledger.migrations.versions.0007_prefix_rollups")
money, timestamp, TOKENS, COSTS = _first.money, _first.timestamp, _first.TOKENS, _first.COSTS
DIMENSIONS = ("team", "project", "model_alias", "tier_served", "prefix_status")
KEY_SQL = _seventh.KEY_SQL | {"tier_served": "tier_served"}
COVERED = ["team", "status", "cost_total"]


def upgrade() -> None:
    _rebuild(DIMENSIONS)
    op.drop_index("ix_tasks_finished_at", table_name="tasks")
    op.create_index(
        "ix_tasks_finished_at_cover", "tasks", ["finished_at"], postgresql_include=COVERED
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_finished_at_cover", table_name="tasks")
    op.create_index("ix_tasks_finished_at", "tasks", ["finished_at"])
    _rebuild(_seventh.DIMENSIONS)


def _rebuild(dimensions: Sequence[str]) -> None:
    """Drop both prefix rollups and create them keyed by `dimensions`, filled from the rows."""
    buckets = _fifth.BUCKETS[op.get_bind().dialect.name]
    for table, grain in _seventh.ROLLUPS.items():
        op.drop_table(table)
        op.create_table(
            table,
            sa.Column("bucket", timestamp(), primary_key=True),
            *(sa.Column(name, sa.String(), primary_key=True) for name in dimensions),
            sa.Column("request_count", sa.BigInteger(), nullable=False),
            *(sa.Column(name, sa.BigInteger(), nullable=False) for name in TOKENS),
            *(sa.Column(name, money(), nullable=False) for name in COSTS),
            sa.Column("untasked_requests", sa.BigInteger(), nullable=False),
            sa.Column("untasked_cost", money(), nullable=False),
            sa.Column("expected_cached_tokens", sa.BigInteger(), nullable=False),
            sa.Column("prefix_lost_usd", money(), nullable=False),
        )
        _fill(table, buckets[grain], dimensions)


def _fill(table: str, bucket: str, dimensions: Sequence[str]) -> None:
    """Sum the request rows into one rollup (one INSERT ... SELECT, as 0007)."""
    names = ", ".join(dimensions)
    keys = ", ".join(KEY_SQL[name] for name in dimensions)
    sums = ", ".join(f"SUM({name})" for name in (*TOKENS, *COSTS))
    measures = ", ".join((*TOKENS, *COSTS))
    untasked = _fifth.UNTASKED
    op.execute(
        f"INSERT INTO {table} (bucket, {names}, request_count, {measures}, untasked_requests, "
        f"untasked_cost, expected_cached_tokens, prefix_lost_usd) "
        f"SELECT {bucket}, {keys}, COUNT(*), {sums}, "
        f"SUM(CASE WHEN {untasked} AND attempt = 0 THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {untasked} THEN cost_total ELSE 0 END), "
        f"COALESCE(SUM(expected_cached_tokens), 0), COALESCE(SUM(prefix_lost_usd), 0) "
        f"FROM requests GROUP BY {bucket}, {keys}"
    )
