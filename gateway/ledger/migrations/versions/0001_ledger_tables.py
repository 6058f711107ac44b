"""Create the requests and tasks tables.

Revision ID: 0001
Revises:
Create Date: 2025-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKENS = (
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "completion_tokens",
    "reasoning_tokens",
)
COSTS = (
    "cost_input",
    "cost_cached",
    "cost_cache_write",
    "cost_output",
    "cost_reasoning",
    "cost_total",
)


def money() -> sa.types.TypeEngine[Any]:
    """Return the money type; frozen here so later model changes cannot rewrite history."""
    # SQLite has no exact decimal: integer 1e-10 units there (see gateway.ledger.models).
    return sa.Numeric(20, 10).with_variant(sa.BigInteger(), "sqlite")


def timestamp() -> sa.DateTime:
    """Return the timestamp type (timestamptz on PostgreSQL, UTC text on SQLite)."""
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create both tables and the indexes the spend and idle queries use."""
    create_requests()
    create_tasks()


def create_requests() -> None:
    """Create the per-call table."""
    op.create_table(
        "requests",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", timestamp(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("task_step", sa.String(), nullable=True),
        sa.Column("step_kind", sa.String(), nullable=True),
        sa.Column("team", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("caller", sa.String(), nullable=True),
        sa.Column("model_alias", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("upstream_model", sa.String(), nullable=False),
        sa.Column("tier_requested", sa.String(), nullable=False),
        sa.Column("tier_served", sa.String(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("error_type", sa.String(), nullable=True),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("estimated", sa.Boolean(), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in TOKENS),
        *(sa.Column(name, money(), nullable=False) for name in COSTS),
        sa.Column("ttft_ms", sa.Integer(), nullable=True),
        sa.Column("ttfat_ms", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("decode_tps", sa.Float(), nullable=True),
        sa.Column("expected_cached_tokens", sa.Integer(), nullable=True),
        sa.Column("prefix_status", sa.String(), nullable=True),
        sa.Column("output_cap_clamped", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_requests_created_at", "requests", ["created_at"])
    op.create_index("ix_requests_task_id", "requests", ["task_id"])
    op.create_index("ix_requests_team_created_at", "requests", ["team", "created_at"])
    op.create_index("ix_requests_request_id", "requests", ["request_id"])


def create_tasks() -> None:
    """Create the per-task totals table."""
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(), primary_key=True),
        sa.Column("team", sa.String(), nullable=True),
        sa.Column("project", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("started_at", timestamp(), nullable=False),
        sa.Column("last_activity_at", timestamp(), nullable=False),
        sa.Column("finished_at", timestamp(), nullable=True),
        sa.Column("request_count", sa.BigInteger(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in TOKENS),
        *(sa.Column(name, money(), nullable=False) for name in COSTS),
        sa.Column("first_ttft_ms", sa.Integer(), nullable=True),
    )
    op.create_index("ix_tasks_status_last_activity_at", "tasks", ["status", "last_activity_at"])
    op.create_index("ix_tasks_team_finished_at", "tasks", ["team", "finished_at"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("tasks")
    op.drop_table("requests")
