"""64-bit token counts and durations; flag and keep usage the gateway had to clamp.

An upstream controls its token counts and how long it takes; a 32-bit column refused
any count over 2,147,483,647 and the row stalled the ledger. `usage_suspect` marks a
row whose usage was clamped before billing; `usage_reported` keeps what was sent.

On PostgreSQL the type changes rewrite both tables under a lock; on SQLite (where every
integer is 64-bit already) batch mode copies the tables so the declared types match.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The token columns as 0001 created them (history is frozen there, not restated here).
TOKENS: tuple[str, ...] = importlib.import_module(
    "gateway.ledger.migrations.versions.0001_ledger_tables"
).TOKENS
REQUEST_COUNTS = (*TOKENS, "ttft_ms", "ttfat_ms", "duration_ms", "expected_cached_tokens")
NULLABLE = frozenset({"ttft_ms", "ttfat_ms", "expected_cached_tokens"})


def _widen(table: str, columns: Sequence[str], to: type[sa.types.TypeEngine[int]]) -> None:
    """Change the integer type of `columns` of `table` (Integer <-> BigInteger)."""
    source = sa.BigInteger if to is sa.Integer else sa.Integer
    with op.batch_alter_table(table) as batch:
        for name in columns:
            batch.alter_column(
                name, existing_type=source(), type_=to(), existing_nullable=name in NULLABLE
            )


def upgrade() -> None:
    """Widen the counts, add the usage audit columns."""
    _widen("requests", REQUEST_COUNTS, sa.BigInteger)
    with op.batch_alter_table("requests") as batch:
        batch.add_column(
            sa.Column("usage_suspect", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("usage_reported", sa.Text(), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column(
            "first_ttft_ms", existing_type=sa.Integer(), type_=sa.BigInteger(), nullable=True
        )


def downgrade() -> None:
    """Drop the audit columns and narrow the counts (fails if a value no longer fits)."""
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column(
            "first_ttft_ms", existing_type=sa.BigInteger(), type_=sa.Integer(), nullable=True
        )
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("usage_reported")
        batch.drop_column("usage_suspect")
    _widen("requests", REQUEST_COUNTS, sa.Integer)
