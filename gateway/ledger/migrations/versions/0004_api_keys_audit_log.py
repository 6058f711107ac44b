"""Virtual keys and the audit log.

`api_keys` holds each key's SHA-256 (never its secret), its public prefix, its attributes
as JSON text, and its life: created, updated (what replicas poll to refresh their cache),
revoked, expires (the attribute, or the end of a rotation's overlap), rotated from.
`audit_log` holds one row per admin action or policy reload: when, who (`admin`,
`key:<id>`, `open`, `sighup`, `file-watch`), what (action, target, a JSON detail, the
content hash of a reloaded policy) and whether it was accepted or refused.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The timestamp type as 0001 froze it.
timestamp = importlib.import_module(
    "gateway.ledger.migrations.versions.0001_ledger_tables"
).timestamp


def upgrade() -> None:
    """Create both tables."""
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("prefix", sa.String(), nullable=False),
        sa.Column("secret_hash", sa.String(), nullable=False),
        sa.Column("attributes", sa.Text(), nullable=False),
        sa.Column("created_at", timestamp(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.Column("revoked_at", timestamp(), nullable=True),
        sa.Column("expires_at", timestamp(), nullable=True),
        sa.Column("rotated_from", sa.String(), nullable=True),
    )
    op.create_index("ix_api_keys_secret_hash", "api_keys", ["secret_hash"], unique=True)
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", timestamp(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=True),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("content_hash", sa.String(), nullable=True),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    """Drop both tables (the keys and the audit trail with them)."""
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_index("ix_api_keys_secret_hash", table_name="api_keys")
    op.drop_table("api_keys")
