"""`_locate` hashing with xxhash's own C function (`bind_xxh3`) gives xxhash's digests:
the segments' digests and the fingerprint chain are what the Python function gives."""

from __future__ import annotations

import os

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import locate
from gateway.prefix.record import chain_fingerprints, chain_seed
from gateway.prefix.segments import Segment, SegmentKind

pytestmark = pytest.mark.skipif(not locate.NATIVE, reason="needs the native _locate module")


def _locate_module():  # type: ignore[no-untyped-def]
    from gateway.prefix import _locate  # type: ignore[attr-defined]

    return _locate


def test_the_installed_xxhash_is_called_directly() -> None:
    # xxhash's wheels and source builds export XXH3_128bits: the direct call is taken.
    assert locate.XXH3_NATIVE


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=300) | st.binary(min_size=1000, max_size=3000), max_size=12)
)
def test_plain_segments_digests_are_xxhashs(pieces: list[bytes]) -> None:
    found: list[Segment] = []
    names = [f"messages[{i}]" for i in range(len(pieces))]
    roles = ["user"] * len(pieces)
    _locate_module().plain_segments(
        found, Segment, names, SegmentKind.MESSAGE, pieces, xxhash.xxh3_128_digest, roles
    )
    assert [s[3] for s in found] == [xxhash.xxh3_128_digest(p) for p in pieces]
    assert [s[2] for s in found] == pieces


def test_another_hasher_is_still_called() -> None:
    pieces = [b"a", b"bc"]
    found: list[Segment] = []
    _locate_module().plain_segments(
        found,
        Segment,
        ["x", "y"],
        SegmentKind.MESSAGE,
        pieces,
        lambda b: xxhash.xxh3_128_digest(b"salt" + b),
        ["", ""],
    )
    assert [s[3] for s in found] == [xxhash.xxh3_128_digest(b"salt" + p) for p in pieces]
    seed = os.urandom(16)
    digest = os.urandom(16).hex()
    chained = _locate_module().chain_hex(lambda b: xxhash.xxh3_64_digest(b) * 2, seed, [digest])
    assert chained == ((xxhash.xxh3_64_digest(seed + bytes.fromhex(digest)) * 2).hex(),)


def test_a_digest_with_any_non_hex_byte_takes_the_python_loop() -> None:
    good = os.urandom(16).hex()
    for bad in ("g", "G", "/", ":", "@", "`", "\x00", "\xff", "é"):
        odd = bad + good[1:]
        with pytest.raises(ValueError):
            chain_fingerprints("openai", "m", [odd])
    upper = good.upper()
    expected = xxhash.xxh3_128_digest(chain_seed("openai", "m") + bytes.fromhex(good))[:16]
    assert chain_fingerprints("openai", "m", [upper]) == (expected.hex(),)
    assert _locate_module().chain_hex(
        xxhash.xxh3_128_digest, chain_seed("openai", "m"), [upper]
    ) == (expected.hex(),)
