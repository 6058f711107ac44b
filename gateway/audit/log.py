"""Write and read the `audit_log` table of the ledger database.

Admin actions are rare, so each entry is one direct insert, not a batch through the
ledger writer. An entry that goes with a change (a key created, revoked, rotated) is
inserted in the change's own transaction (`insert_entry`), so the two stand or fall
together; `AuditLog.record` writes one on its own (refusals, reloads).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.ledger.models import AUDIT_LOG as AUDIT
from gateway.ledger.reads import ledger_down

log = logging.getLogger("farebox.audit")

Outcome = Literal["accepted", "refused"]
MAX_READ = 1000


class AuditEntry(BaseModel):
    """One admin action or policy reload."""

    model_config = ConfigDict(frozen=True)

    id: int | None = None  # set by the database
    at: datetime
    actor: str  # admin, key:<id>, open, sighup, file-watch
    action: str  # e.g. keys.create, keys.revoke, keys.rotate, config.reload
    target: str | None = None  # what it acted on: a key id, a config path
    outcome: Outcome
    detail: dict[str, Any] | None = None  # a summary of what changed, or why it was refused
    content_hash: str | None = None  # of a reloaded policy file

    def row(self) -> dict[str, Any]:
        """The entry as `audit_log` columns."""
        values = self.model_dump(exclude={"id", "detail"})
        values["detail"] = None if self.detail is None else json.dumps(self.detail, default=str)
        return values


class AuditQuery(BaseModel):
    """Filters of a read: newest first, at most `limit` entries."""

    model_config = ConfigDict(frozen=True)

    since: AwareDatetime | None = None
    action: str | None = None
    actor: str | None = None
    limit: int = Field(default=100, gt=0, le=MAX_READ)


async def insert_entry(connection: AsyncConnection, entry: AuditEntry) -> None:
    """Insert `entry` in the caller's transaction."""
    await connection.execute(AUDIT.insert(), [entry.row()])


class AuditLog:
    """The audit log of one gateway process, on the ledger database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(
        self,
        *,
        actor: str,
        action: str,
        target: str | None,
        outcome: Outcome,
        detail: dict[str, Any] | None = None,
        content_hash: str | None = None,
    ) -> None:
        """Write one entry now; a database outage is logged with the entry, never raised.

        The action it records has already happened (or been refused): failing it now
        would not undo it, and the log line keeps the entry where an operator looks.
        """
        entry = AuditEntry(
            at=datetime.now(UTC), actor=actor, action=action, target=target,
            outcome=outcome, detail=detail, content_hash=content_hash,
        )  # fmt: skip
        try:
            async with self._engine.begin() as connection:
                await insert_entry(connection, entry)
        except ledger_down() as exc:
            log.error("audit entry not written (%s: %s): %s", type(exc).__name__, exc, entry.row())

    async def read(self, query: AuditQuery | None = None) -> list[AuditEntry]:
        """Entries matching `query`, newest first."""
        query = query or AuditQuery()
        statement = select(AUDIT).order_by(AUDIT.c.at.desc(), AUDIT.c.id.desc())
        if query.since is not None:
            statement = statement.where(AUDIT.c.at >= query.since)
        if query.action is not None:
            statement = statement.where(AUDIT.c.action == query.action)
        if query.actor is not None:
            statement = statement.where(AUDIT.c.actor == query.actor)
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement.limit(query.limit))).mappings().all()
        return [_entry(row) for row in rows]


def _entry(row: Any) -> AuditEntry:
    values = dict(row)
    values["detail"] = None if values["detail"] is None else json.loads(values["detail"])
    return AuditEntry.model_validate(values)
