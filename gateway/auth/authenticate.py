"""Who the credential belongs to: the open mode, the admin key, or an active virtual key.

Pure: the key cache's `lookup` is an in-memory dict read (no I/O on the hot path), and
the clock is passed in. A refusal says which of missing, invalid, revoked or expired, and
names a stored key only by its public prefix, never by its secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import datetime

from gateway.auth.principal import ADMIN, OPEN, Principal
from gateway.errors import AuthenticationError
from gateway.keys.model import KeyRecord

Lookup = Callable[[str], KeyRecord | None]
Clock = Callable[[], datetime]

MISSING = (
    "no API key: send `Authorization: Bearer <key>` (or `x-api-key: <key>`); "
    "this gateway requires a key on every endpoint but /healthz"
)
INVALID = "invalid API key: no such key on this gateway (ask its operator for one)"


def authenticate(
    credential: str | None, *, admin_key: bytes | None, lookup: Lookup, clock: Clock
) -> Principal:
    """The principal for `credential`; AuthenticationError (401) if it is not a valid one.

    `admin_key` None is the open mode: every caller is OPEN, whatever it sends. `clock`
    is read only for a key that is revoked or expires (most keys: never).
    """
    if admin_key is None:
        return OPEN
    if credential is None:
        raise AuthenticationError(MISSING)
    if hmac.compare_digest(credential.encode("latin-1", "replace"), admin_key):
        return ADMIN
    record = lookup(credential)
    if record is None:
        raise AuthenticationError(INVALID)
    if record.revoked_at is None and record.expires_at is None:
        return Principal("key", record)
    now = clock()
    state = record.state_at(now)
    if state != "active":
        when = record.revoked_at if state == "revoked" else record.expires_at
        raise AuthenticationError(
            f"API key {record.prefix}... ({record.id}) was {state} at "
            f"{when.isoformat() if when else 'an unknown time'}: ask for a new key"
        )
    return Principal("key", record)
