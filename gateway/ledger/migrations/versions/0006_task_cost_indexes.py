"""Indexes that let PostgreSQL read exact cost-per-task percentiles without sorting.

`ix_tasks_team_cost` orders tasks by (team, cost_total) and `ix_tasks_team_status_cost`
by (team, status, cost_total); both carry the columns the statistics filter on
(INCLUDE, PostgreSQL only), so the k-th cheapest task of a team (or team and outcome)
is an index-only scan of k entries (gateway.ledger.ranked). SQLite gets the plain keys.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILTERS = ["finished_at", "request_count", "untasked"]
INDEXES = {
    "ix_tasks_team_cost": (["team", "cost_total"], ["status", *FILTERS]),
    "ix_tasks_team_status_cost": (["team", "status", "cost_total"], FILTERS),
}


def upgrade() -> None:
    for name, (columns, carried) in INDEXES.items():
        op.create_index(name, "tasks", columns, postgresql_include=carried)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="tasks")
