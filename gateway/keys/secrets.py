"""New key secrets, their public prefix, their hash, and key ids.

A secret is `fbx-` and 32 random bytes (256 bits) in urlsafe base64. It is stored only as
its SHA-256: with that much entropy nobody can guess a secret from its hash, so a slow
password hash (bcrypt, argon2) would add no safety, only cost; and a fast, unsalted hash
lets every request find its key with one dictionary lookup instead of a database query.
"""

from __future__ import annotations

import hashlib
import importlib
import secrets
from collections.abc import Callable
from typing import Any

SECRET_PREFIX = "fbx-"
SECRET_BYTES = 32
PUBLIC_PREFIX_CHARS = 12  # `fbx-` and 8 random characters: safe in logs, enough to tell apart


def new_secret() -> str:
    """A fresh key secret: `fbx-` and 43 urlsafe characters."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def public_prefix(secret: str) -> str:
    """The part of a secret that may be shown in listings and logs."""
    return secret[:PUBLIC_PREFIX_CHARS]


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 constructor (`_sha2` from 3.12, `_sha256` before), else hashlib's.

    The same digest either way. Per request the gateway hashes one short token (the open
    mode's caller id, a key's lookup); OpenSSL's path through its EVP layer is much more
    code per call than the builtin's, which at concurrency 1, with the caches cold between
    requests, cost 6-14 µs against ~0.4 µs hot (docs/performance.md, pipeline tenth
    pass). A build without the builtin modules (some FIPS builds) gets hashlib's.
    """
    for name in ("_sha2", "_sha256"):
        try:
            constructor: Callable[[bytes], Any] = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return constructor
    return hashlib.sha256


SHA256 = _builtin_sha256()


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 of `data` (a token or a secret: short, once per request)."""
    return str(SHA256(data).hexdigest())


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a secret, as stored and as looked up."""
    return sha256_hex(secret.encode())


def new_key_id() -> str:
    """A key's public id, used in URLs, the audit log and the ledger's `caller` column."""
    return "key_" + secrets.token_hex(12)
