"""The builtin SHA-256 the caller id and key lookups use gives hashlib's digests."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.keys import secrets
from gateway.keys.secrets import hash_secret, sha256_hex
from gateway.pipeline.identify import caller_id


@given(st.binary(max_size=300))
def test_sha256_hex_is_hashlibs(data: bytes) -> None:
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


@given(st.text(max_size=80))
def test_caller_id_and_secret_hash_unchanged(token: str) -> None:
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    expected = f"key-{digest[:16]}" if token.strip() else None
    assert caller_id(f"Bearer {token}") == expected
    assert hash_secret(token) == hashlib.sha256(token.encode()).hexdigest()


def test_a_long_token_hashes_as_hashlib_does() -> None:
    token = "fbx-" + "x" * 100_000
    assert sha256_hex(token.encode()) == hashlib.sha256(token.encode()).hexdigest()


def test_without_the_builtin_modules_hashlib_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def refuse(name: str) -> Any:
        if name in ("_sha2", "_sha256"):
            raise ImportError(f"no {name} in this build")
        return real_import(name)

    monkeypatch.setattr(secrets.importlib, "import_module", refuse)
    assert secrets._builtin_sha256() is hashlib.sha256


def _has_builtin() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in ("_sha2", "_sha256"))


@pytest.mark.skipif(not _has_builtin(), reason="this Python was built without them")
def test_the_builtin_is_used_where_there_is_one() -> None:
    assert secrets.SHA256 is not hashlib.sha256
    assert secrets.SHA256(b"abc").hexdigest() == hashlib.sha256(b"abc").hexdigest()
