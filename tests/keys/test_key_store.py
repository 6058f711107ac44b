"""The key store on a real ledger (SQLite and PostgreSQL): hashes only, rotation, revocation."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.audit import AUDIT, AuditEntry
from gateway.keys.model import KeyAttributes, KeyBudget
from gateway.keys.secrets import PUBLIC_PREFIX_CHARS, hash_secret, new_secret
from gateway.keys.store import KeyNotActive, KeyStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ATTRIBUTES = KeyAttributes(
    name="ci bot", team="research", project="agents", models=("sim-*",),
    budget=KeyBudget(daily_usd=Decimal("12.50")),
)  # fmt: skip


def test_secrets_are_long_random_and_hashed_with_sha256() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("fbx-") and len(secret) >= 4 + 43
    secret = secrets.pop()
    assert hash_secret(secret) == hashlib.sha256(secret.encode()).hexdigest()


async def test_the_database_keeps_the_hash_and_prefix_never_the_secret(
    store: KeyStore, engine: AsyncEngine
) -> None:
    made = await store.create(ATTRIBUTES, now=T0)
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT * FROM api_keys"))).mappings().all()
    assert len(rows) == 1
    row = dict(rows[0])
    assert made.secret not in " ".join(str(value) for value in row.values())
    assert row["secret_hash"] == hashlib.sha256(made.secret.encode()).hexdigest()
    assert row["prefix"] == made.secret[:PUBLIC_PREFIX_CHARS] == made.record.prefix
    assert row["id"] == made.record.id and row["id"].startswith("key_")
    again = await store.get(made.record.id)
    assert again == made.record
    assert again is not None and again.attributes.budget == KeyBudget(daily_usd=Decimal("12.5"))


async def test_list_hides_revoked_keys_unless_asked(store: KeyStore) -> None:
    kept = await store.create(ATTRIBUTES, now=T0)
    gone = await store.create(KeyAttributes(team="other"), now=T0 + timedelta(seconds=1))
    revoked = await store.revoke(gone.record.id, now=T0 + timedelta(minutes=1))
    assert revoked is not None and revoked.state_at(T0 + timedelta(minutes=1)) == "revoked"
    assert [r.id for r in await store.list()] == [kept.record.id]
    listed = await store.list(include_revoked=True)
    assert [r.id for r in listed] == [kept.record.id, gone.record.id]
    # A second revocation keeps the first time.
    twice = await store.revoke(gone.record.id, now=T0 + timedelta(hours=1))
    assert twice is not None and twice.revoked_at == T0 + timedelta(minutes=1)
    assert await store.revoke("key_unknown") is None
    assert await store.get("key_unknown") is None


async def test_rotation_keeps_attributes_and_the_old_key_until_the_overlap_ends(
    store: KeyStore,
) -> None:
    old = await store.create(ATTRIBUTES, now=T0)
    rotated = await store.rotate(old.record.id, 600, now=T0 + timedelta(hours=1))
    assert rotated is not None
    new, previous = rotated
    end = T0 + timedelta(hours=1, minutes=10)
    assert new.record.attributes == ATTRIBUTES
    assert new.record.rotated_from == old.record.id
    assert new.secret != old.secret and new.record.secret_hash == hash_secret(new.secret)
    assert previous.expires_at == end
    assert (await store.get(old.record.id)) == previous
    assert previous.state_at(end - timedelta(microseconds=1)) == "active"
    assert previous.state_at(end) == "expired"
    assert new.record.state_at(end + timedelta(days=365)) == "active"
    # An expired or revoked key is not rotated.
    with pytest.raises(KeyNotActive, match="expired"):
        await store.rotate(old.record.id, 60, now=end)
    await store.revoke(new.record.id, now=end)
    with pytest.raises(KeyNotActive, match="revoked"):
        await store.rotate(new.record.id, 60, now=end)
    assert await store.rotate("key_unknown", 60) is None


async def test_rotation_never_lengthens_an_earlier_expiry(store: KeyStore) -> None:
    soon = T0 + timedelta(minutes=5)
    old = await store.create(KeyAttributes(expires_at=soon), now=T0)
    rotated = await store.rotate(old.record.id, 3600, now=T0)
    assert rotated is not None
    assert rotated[1].expires_at == soon


async def test_fingerprint_changes_with_every_change_whatever_the_clock(store: KeyStore) -> None:
    seen = {await store.fingerprint()}
    made = await store.create(ATTRIBUTES, now=T0)
    seen.add(await store.fingerprint())
    # A replica whose clock is behind still changes the fingerprint.
    await store.revoke(made.record.id, now=T0 - timedelta(hours=1))
    seen.add(await store.fingerprint())
    other = await store.create(ATTRIBUTES, now=T0 - timedelta(hours=2))
    seen.add(await store.fingerprint())
    await store.rotate(other.record.id, 60, now=T0 - timedelta(hours=2))
    seen.add(await store.fingerprint())
    assert len(seen) == 5


async def test_a_change_and_its_audit_entry_are_written_together(
    store: KeyStore, engine: AsyncEngine
) -> None:
    entry = AuditEntry(at=T0, actor="admin", action="keys.create", outcome="accepted")
    made = await store.create(ATTRIBUTES, now=T0, audit=entry)
    async with engine.connect() as connection:
        rows = (await connection.execute(select(AUDIT))).mappings().all()
    assert len(rows) == 1
    assert rows[0]["target"] == made.record.id and rows[0]["actor"] == "admin"
    assert made.record.prefix in rows[0]["detail"] and made.secret not in rows[0]["detail"]
