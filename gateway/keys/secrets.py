"""New key secrets, their public prefix, their hash, and key ids.

A secret is `fbx-` and 32 random bytes (256 bits) in urlsafe base64. It is stored only as
its SHA-256: with that much entropy nobody can guess a secret from its hash, so a slow
password hash (bcrypt, argon2) would add no safety, only cost; and a fast, unsalted hash
lets every request find its key with one dictionary lookup instead of a database query.
"""

from __future__ import annotations

import hashlib
import secrets

SECRET_PREFIX = "fbx-"
SECRET_BYTES = 32
PUBLIC_PREFIX_CHARS = 12  # `fbx-` and 8 random characters: safe in logs, enough to tell apart


def new_secret() -> str:
    """A fresh key secret: `fbx-` and 43 urlsafe characters."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def public_prefix(secret: str) -> str:
    """The part of a secret that may be shown in listings and logs."""
    return secret[:PUBLIC_PREFIX_CHARS]


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a secret, as stored and as looked up."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key_id() -> str:
    """A key's public id, used in URLs, the audit log and the ledger's `caller` column."""
    return "key_" + secrets.token_hex(12)
