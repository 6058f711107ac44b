"""An index that lets PostgreSQL read exact cost-per-task percentiles by project by rank.

`ix_tasks_project_cost` orders tasks by (project, cost_total) and carries the columns the
statistics filter on (INCLUDE, PostgreSQL only), as 0006's `ix_tasks_team_cost` does for
teams, so cost per task by project (`/v1/spend/tasks?group_by=project`, `farebox report`)
reads the k-th cheapest task of a project with an index-only scan instead of sorting
every task (gateway.ledger.ranked): 1.9-2.1 s -> 0.40 s over the whole 10M-row ledger
(1.26M tasks, bench/LEDGER_RESULTS.md). SQLite gets the plain key.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CARRIED = ["status", "finished_at", "request_count", "untasked"]


def upgrade() -> None:
    op.create_index("ix_tasks_project_cost", "tasks", ["project", "cost_total"],
                    postgresql_include=CARRIED)  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_tasks_project_cost", table_name="tasks")
