"""Virtual keys in the ledger database: create, list, get, revoke, rotate.

Every change sets `updated_at` and may carry an audit entry, inserted in the same
transaction. `fingerprint()` is what replicas poll to know whether to reload their cache.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.audit import AuditEntry, insert_entry
from gateway.keys.model import KeyAttributes, KeyRecord
from gateway.keys.secrets import hash_secret, new_key_id, new_secret, public_prefix
from gateway.ledger.models import API_KEYS as KEYS


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Cheap to read, and different after any change from any replica.

    Keys are never deleted and a revocation is never undone, so a create or rotation
    raises `count` and a revocation raises `revoked`, whatever the replicas' clocks say;
    `updated` catches the rest.
    """

    count: int
    revoked: int
    updated: datetime | None


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made, and its secret: the only time the secret exists outside a client."""

    record: KeyRecord
    secret: str


class KeyNotActive(Exception):
    """A revoked or expired key cannot be rotated; `state` says which."""

    def __init__(self, state: str) -> None:
        super().__init__(f"the key is {state}")
        self.state = state


class KeyStore:
    """Key records on the ledger engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(
        self,
        attributes: KeyAttributes,
        *,
        now: datetime | None = None,
        audit: AuditEntry | None = None,
    ) -> NewKey:
        """Store a new key for `attributes`; answer its record and its secret."""
        now = now or datetime.now(UTC)
        async with self._engine.begin() as connection:
            made = await _insert(connection, attributes, now, rotated_from=None)
            await _audit(connection, audit, made.record)
        return made

    async def list(self, *, include_revoked: bool = False) -> builtins.list[KeyRecord]:
        """Keys, oldest first; revoked ones only when asked."""
        statement = select(KEYS).order_by(KEYS.c.created_at, KEYS.c.id)
        if not include_revoked:
            statement = statement.where(KEYS.c.revoked_at.is_(None))
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).mappings().all()
        return _records(rows)

    async def get(self, key_id: str) -> KeyRecord | None:
        """The key `key_id`, or None."""
        async with self._engine.connect() as connection:
            return await _get(connection, key_id)

    async def revoke(
        self, key_id: str, *, now: datetime | None = None, audit: AuditEntry | None = None
    ) -> KeyRecord | None:
        """Revoke `key_id` from `now` (a second revocation keeps the first time); None: unknown."""
        now = now or datetime.now(UTC)
        async with self._engine.begin() as connection:
            record = await _get(connection, key_id)
            if record is None:
                return None
            if record.revoked_at is None:
                await _update(connection, key_id, now, revoked_at=now)
                record = record.model_copy(update={"revoked_at": now})
            await _audit(connection, audit, record)
        return record

    async def rotate(
        self,
        key_id: str,
        overlap_s: float,
        *,
        now: datetime | None = None,
        audit: AuditEntry | None = None,
    ) -> tuple[NewKey, KeyRecord] | None:
        """A new key with the same attributes; the old one expires `overlap_s` from `now`.

        Answers the new key and the old record as it now is; None: unknown id. Raises
        `KeyNotActive` for a revoked or expired key (its holder should get a new one).
        """
        now = now or datetime.now(UTC)
        async with self._engine.begin() as connection:
            old = await _get(connection, key_id)
            if old is None:
                return None
            state = old.state_at(now)
            if state != "active":
                raise KeyNotActive(state)
            end = now + timedelta(seconds=overlap_s)
            if old.expires_at is None or end < old.expires_at:
                await _update(connection, key_id, now, expires_at=end)
                old = old.model_copy(update={"expires_at": end})
            made = await _insert(connection, old.attributes, now, rotated_from=key_id)
            await _audit(connection, audit, made.record)
        return made, old

    async def all(self) -> builtins.list[KeyRecord]:
        """Every key, revoked and expired ones too (the cache says why a key is refused)."""
        return await self.list(include_revoked=True)

    async def fingerprint(self) -> Fingerprint:
        """What changes whenever any key does (one single-row query)."""
        statement = select(func.count(), func.count(KEYS.c.revoked_at), func.max(KEYS.c.updated_at))
        async with self._engine.connect() as connection:
            count, revoked, updated = (await connection.execute(statement)).one()
        return Fingerprint(int(count), int(revoked), updated)


async def _insert(
    connection: AsyncConnection, attributes: KeyAttributes, now: datetime, rotated_from: str | None
) -> NewKey:
    secret = new_secret()
    record = KeyRecord(
        id=new_key_id(), prefix=public_prefix(secret), secret_hash=hash_secret(secret),
        attributes=attributes, created_at=now, expires_at=attributes.expires_at,
        rotated_from=rotated_from,
    )  # fmt: skip
    values = record.model_dump(exclude={"attributes"})
    values["attributes"] = attributes.model_dump_json()
    await connection.execute(KEYS.insert(), [{**values, "updated_at": now}])
    return NewKey(record, secret)


async def _get(connection: AsyncConnection, key_id: str) -> KeyRecord | None:
    row = (await connection.execute(select(KEYS).where(KEYS.c.id == key_id))).mappings().first()
    return None if row is None else _record(row)


async def _update(connection: AsyncConnection, key_id: str, now: datetime, **values: Any) -> None:
    statement = KEYS.update().where(KEYS.c.id == key_id).values(updated_at=now, **values)
    await connection.execute(statement)


async def _audit(connection: AsyncConnection, entry: AuditEntry | None, record: KeyRecord) -> None:
    """Insert the change's audit entry, naming the key it made or changed (id, prefix)."""
    if entry is None:
        return
    detail = {**(entry.detail or {}), "id": record.id, "prefix": record.prefix}
    update: dict[str, Any] = {"detail": detail}
    if entry.target is None:
        update["target"] = record.id
    await insert_entry(connection, entry.model_copy(update=update))


def _record(row: Any) -> KeyRecord:
    values = dict(row)
    values.pop("updated_at")
    values["attributes"] = KeyAttributes.model_validate_json(values["attributes"])
    return KeyRecord.model_validate(values)


def _records(rows: Sequence[Any]) -> list[KeyRecord]:
    return [_record(row) for row in rows]
