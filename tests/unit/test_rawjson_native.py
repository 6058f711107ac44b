"""The native walker (`gateway/_rawjson.c`) gives `patch_object` the same bytes as the str scan.

The str scan (decode the body, Python's `json` raw_decode per value) is what patched bodies
before the walker, and is still the fallback without a C compiler, so each case runs both
and compares output bytes, or that both raise `RawJsonError`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.rawjson import RawJsonError, patch_object, scan_raw

needs_native = pytest.mark.skipif(
    not rawjson.NATIVE and not os.environ.get("CI"),
    reason="the native JSON walker was not built (no C compiler); CI requires it",
)
pytestmark = needs_native

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
GIL_BYTES = 64 * 1024
KEYS = st.sampled_from(["model", "messages", "a", "é", 'q"uote', "\\", "", "\ud800", "😀"])
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats()
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
SET_VALUES = st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)  # orjson's range
SETS = st.dictionaries(st.sampled_from(["model", "a", "é", "new"]), SET_VALUES, max_size=3)
REMOVES = st.sets(KEYS, max_size=3)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _dumps(obj: Any, style: int) -> bytes:
    """Compact, spaced, pretty and oddly indented JSON; lone surrogates kept as UTF-8 fails."""
    text = [
        json.dumps(obj),
        json.dumps(obj, separators=(",", ":"), ensure_ascii=False),
        json.dumps(obj, indent=2, ensure_ascii=False),
        json.dumps(obj, indent="\t\r\n ", ensure_ascii=False),
    ][style]
    return text.encode("utf-8", "surrogatepass")


def _outcome(raw: bytes, set_fields: dict[str, Any], remove: set[str], native: bool) -> object:
    try:
        return patch_object(raw, set_fields, remove, native=native)
    except RawJsonError:
        return RawJsonError


def _same(raw: bytes, set_fields: dict[str, Any], remove: set[str]) -> None:
    native = _outcome(raw, set_fields, remove, True)
    assert native == _outcome(raw, set_fields, remove, False), raw[:200]


def test_the_native_walker_is_built_in_ci() -> None:
    # In CI a silent fallback to the str scan would hide a broken build (and a body
    # decoded whole, GIL held, on every alias rewrite), so its absence fails here.
    assert rawjson.NATIVE


@FAST
@given(st.dictionaries(KEYS, VALUES, max_size=6), st.integers(0, 3), SETS, REMOVES)
def test_objects_patch_to_the_same_bytes(
    obj: dict[str, Any], style: int, set_fields: dict[str, Any], remove: set[str]
) -> None:
    _same(_dumps(obj, style), set_fields, remove)


@FAST
@given(st.dictionaries(KEYS, VALUES, max_size=4), st.integers(0, 300), st.binary(max_size=3))
def test_mangled_objects_patch_or_fail_alike(obj: dict[str, Any], cut: int, junk: bytes) -> None:
    raw = _dumps(obj, cut % 4)
    _same(raw[:cut] + junk + raw[cut + 1 :], {"model": "x"}, {"a"})


@FAST
@given(st.binary(max_size=60))
def test_any_value_bytes_patch_or_fail_alike(value: bytes) -> None:
    _same(b'{"a":' + value + b',"model":1}', {"model": "x"}, set())
    _same(b'{"a":"' + value + b'"}', {"model": "x"}, set())


VALUES_EDGE = [
    b"0", b"-0.5e+3", b"01", b"1.", b"1e", b"-", b"NaN", b"-Infinity", b"Infinity", b"nul",
    b"1" * 4300, b"1" * 4301, b"-" + b"1" * 4301, b"1" * 5000 + b".5", b'"\\ud800"',
    b'"\\u12"', b'"\\x"', b'"\x7f"', b'"\x1f"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"',
    b'"\xc0\xaf"', b'"\xf0\x9f\x98\x80"', b"[1,]", b'{"k":1,}', b"[]", b"{ }", b"tru",
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES_EDGE)
def test_edge_values_patch_or_fail_alike(value: bytes) -> None:
    _same(b'{"a": ' + value + b' , "b": [' + value + b"]}", {"b": 1}, set())


@pytest.mark.parametrize("tail", [b"", b"\n", b" junk", b"\xff", "é".encode()])
def test_bytes_after_the_object_are_kept_or_refused_alike(tail: bytes) -> None:
    _same(b'{"model":"m"}' + tail, {"model": "x"}, set())


@pytest.mark.parametrize("depth", [900, 5_000, 100_000])
def test_deep_values_patch_alike(depth: int) -> None:
    _same(b'{"a":' + b"[" * depth + b"1" + b"]" * depth + b',"b":1}', {"b": 2}, {"c"})
    _same(b'{"a":' + b'{"k":' * depth + b"1" + b"}" * depth + b"}", {"b": 2}, set())


TOKENS = [b"123456789", b"-1.25e+10", b'"ab\\u00e9\\n\xc3\xa9"', b"true", b"NaN", b'"x' * 50]


@pytest.mark.parametrize("token", TOKENS)
def test_tokens_across_the_gil_boundary_are_walked_whole(token: bytes) -> None:
    # The first 64 KiB are walked holding the GIL, the rest again without it: a token
    # that straddles that point must be read whole, at every alignment.
    if token.startswith(b'"x'):
        token += b'"'
    for shift in range(24):
        filler = b"0," * ((GIL_BYTES - 30 + shift) // 2)
        value = b"[" + b" " * (shift % 2) + filler + token + b"," + token + b"]"
        _same(b'{"a":' + value + b',"model":"m"}', {"model": "x"}, set())
        _same(b'{"a":' + value[:-1] + b',"model":"m"}', {"model": "x"}, set())


@pytest.mark.parametrize("pad", [GIL_BYTES - 3, GIL_BYTES + 5, 3 * GIL_BYTES])
def test_long_whitespace_between_members_is_kept(pad: int) -> None:
    raw = b'{ "model":"m",' + b"\n" * pad + b'"a":1' + b" " * pad + b"}" + b"\t" * pad
    _same(raw, {"model": "x"}, {"a"})
    assert patch_object(raw, {"model": "x"}) == raw.replace(b'"m"', b'"x"', 1)


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.json")), ids=lambda p: p.stem)
def test_corpus_bodies_patch_alike(path: Path) -> None:
    raw = path.read_bytes()
    _same(raw, {"model": "upstream"}, set())
    _same(raw, {"stream": True}, {"model", "tools"})


def test_scan_raw_reports_byte_offsets_either_way() -> None:
    raw = '{"é":"ü", "model" : "m"}'.encode()
    native, text = scan_raw(raw), scan_raw(raw, native=False)
    assert native == text
    members, close = native
    assert raw[members[1].value_start : members[1].end] == b'"m"'
    assert raw[close : close + 1] == b"}"


def test_a_large_body_is_patched_in_place() -> None:
    content = r"é\n\"x\" " * 200_000  # ~2 MiB of escapes and non-ASCII
    raw = b'{"model":"alias","messages":[{"role":"user","content":"%s"}]}' % content.encode()
    out = patch_object(raw, {"model": "upstream"})
    assert out == raw.replace(b'"alias"', b'"upstream"', 1)


def test_malformed_input_names_the_offset() -> None:
    with pytest.raises(RawJsonError, match="offset 14"):
        patch_object(b'{"a": [1, 2, "\xff"]}', {"model": "x"})


def test_children_locates_each_member_and_element() -> None:
    raw = b' {"a" : [1, {"x":[2]}, "s"], "b":{} } '
    spans, deepest, end, done = rawjson.children(raw, 1)
    assert done
    triples = [tuple(spans[i : i + 3]) for i in range(0, len(spans), 3)]
    assert [raw[s:e] for s, _, e in triples] == [b'"a" : [1, {"x":[2]}, "s"]', b'"b":{}']
    assert [raw[v:e] for _, v, e in triples] == [b'[1, {"x":[2]}, "s"]', b"{}"]
    assert (deepest, raw[end - 1 : end]) == (3, b"}")
    spans, deepest, end, done = rawjson.children(raw, triples[0][1])
    assert [raw[v:e] for v, e in zip(spans[1::3], spans[2::3], strict=True)] == [
        b"1",
        b'{"x":[2]}',
        b'"s"',
    ]
    assert (deepest, end, done) == (2, triples[0][2], True)


@pytest.mark.parametrize("raw", [b'[1, "a" ,[2],{}, 5 ]', b'{"a":1 , "b":[2],"c":{"d":3}, "e":4}'])
@pytest.mark.parametrize("limit", [1, 2, 3, 10])
def test_children_in_windows_gives_what_one_walk_gives(raw: bytes, limit: int) -> None:
    whole, deepest, end, _ = rawjson.children(raw, 0)
    seen: list[int] = []
    deepest_seen, pos, resume_in, done = 0, 0, None, False
    while not done:
        spans, window_deepest, pos, done = rawjson.children(raw, pos, limit, resume_in)
        assert len(spans) <= 3 * limit
        seen += spans.tolist()
        deepest_seen = max(deepest_seen, window_deepest)
        resume_in = raw.startswith(b"{")
    assert (seen, deepest_seen, pos) == (whole.tolist(), deepest, end)


@pytest.mark.parametrize(
    "raw", [b'{"a":1,}', b"[1 2]", b'{"a" 1}', b"[", b"5", b'{"a":"\xff"}', b"[tru]"]
)
def test_children_refuses_what_is_not_json(raw: bytes) -> None:
    with pytest.raises(RawJsonError):
        rawjson.children(raw, 0)
