"""Say what was served and what a cache break cost: tier confirmation, lost cache dollars,
how a thinking cap was enforced, and how long the whole request took apart from TTFT.

`tier_confirmed` is true when the upstream echoed the tier it served (OpenAI's
`service_tier`, Anthropic's `usage.speed` / `usage.service_tier`) or the route's
configured tier is the only one it can serve; false when the gateway billed the tier it
asked for without confirmation; NULL on rows written before this revision.
`prefix_lost_usd` is (expected cached - actual cached) x (input - cache-read price) for a
request whose prefix broke. `thinking_enforcement` says how a thinking budget was held:
`backend` (the upstream enforces it), `stream` (the gateway cut the stream), `hint` (sent,
not enforced) or NULL when no budget applied. `dropped_params` lists the request fields
the backend has no place for that were dropped as hints (comma-separated, as the
`x-farebox-dropped-params` header says), NULL when none were.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The money type as 0001 froze it.
money = importlib.import_module("gateway.ledger.migrations.versions.0001_ledger_tables").money


def upgrade() -> None:
    """Add the four columns; existing rows keep NULL (not known then)."""
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("tier_confirmed", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("prefix_lost_usd", money(), nullable=True))
        batch.add_column(sa.Column("thinking_enforcement", sa.String(), nullable=True))
        batch.add_column(sa.Column("dropped_params", sa.String(), nullable=True))


def downgrade() -> None:
    """Drop the four columns."""
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("dropped_params")
        batch.drop_column("thinking_enforcement")
        batch.drop_column("prefix_lost_usd")
        batch.drop_column("tier_confirmed")
