"""Rollups by prefix verdict: `rollup_prefix_hourly` and `rollup_prefix_daily`.

Keyed by (bucket, team, project, model_alias, prefix_status), the verdict stored as ''
when missing and ':' + it otherwise (as 0005 stores steps), with the sums of the other
rollups plus `expected_cached_tokens` and `prefix_lost_usd` (NULL summed as 0). Filled
from the rows there are with one INSERT ... SELECT each; the writer keeps them from then
on (gateway.ledger.rollup), so the explorer's prefix panel reads them, not the rows.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_first = importlib.import_module("gateway.ledger.migrations.versions.0001_ledger_tables")
_fifth = importlib.import_module("gateway.ledger.migrations.versions.0005_partitions_rollups")
money, timestamp, TOKENS, COSTS = _first.money, _first.timestamp, _first.TOKENS, _first.COSTS

DIMENSIONS = ("team", "project", "model_alias", "prefix_status")
KEY_SQL = {name: name for name in DIMENSIONS[:3]} | {
    "prefix_status": "CASE WHEN prefix_status IS NULL THEN '' ELSE ':' || prefix_status END"
}
ROLLUPS = {"rollup_prefix_hourly": "hour", "rollup_prefix_daily": "day"}


def upgrade() -> None:
    buckets = _fifth.BUCKETS[op.get_bind().dialect.name]
    for table, grain in ROLLUPS.items():
        op.create_table(
            table,
            sa.Column("bucket", timestamp(), primary_key=True),
            *(sa.Column(name, sa.String(), primary_key=True) for name in DIMENSIONS),
            sa.Column("request_count", sa.BigInteger(), nullable=False),
            *(sa.Column(name, sa.BigInteger(), nullable=False) for name in TOKENS),
            *(sa.Column(name, money(), nullable=False) for name in COSTS),
            sa.Column("untasked_requests", sa.BigInteger(), nullable=False),
            sa.Column("untasked_cost", money(), nullable=False),
            sa.Column("expected_cached_tokens", sa.BigInteger(), nullable=False),
            sa.Column("prefix_lost_usd", money(), nullable=False),
        )
        _fill(table, buckets[grain])


def _fill(table: str, bucket: str) -> None:
    """Sum the request rows into one rollup (one INSERT ... SELECT)."""
    names = ", ".join(DIMENSIONS)
    keys = ", ".join(KEY_SQL[name] for name in DIMENSIONS)
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


def downgrade() -> None:
    for table in ROLLUPS:
        op.drop_table(table)
