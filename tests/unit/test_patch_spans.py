"""`patch_spans` gives `patch_object`'s bytes for a parsed small body, or None where it
cannot be sure of them (`_rawjson.set_members` does the splice)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import compact_patch
from gateway.compact_patch import MAX_BYTES, MAX_SET_FIELDS, patch_rendered, patch_spans
from gateway.rawjson import patch_object

_rawjson = pytest.importorskip("gateway._rawjson")

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(['\\"', "\\", '"', "\u2028", "\x00", "\x7f", "é", "\U0001f600", "}", ","]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)
KEYS = st.sampled_from(["model", "messages", "usage", "a", 'q"\\', "é", "\x01", "", "mode"])
OBJECTS = st.dictionaries(KEYS, VALUES)
SETS = st.dictionaries(KEYS, VALUES, max_size=3)
REMOVES = st.sets(KEYS, max_size=3)
STYLES = [
    {},
    {"separators": (",", ":")},
    {"separators": (",", ":"), "ensure_ascii": False},
    {"indent": 1},
    {"indent": "\t", "ensure_ascii": False},
]


@settings(max_examples=300, deadline=None)
@given(OBJECTS, SETS, REMOVES, st.integers(min_value=0, max_value=len(STYLES) - 1))
def test_any_rendering_is_patched_to_the_spliced_bytes(
    body: dict[str, Any], set_fields: dict[str, Any], remove: set[str], style: int
) -> None:
    raw = json.dumps(body, **STYLES[style]).encode()  # type: ignore[arg-type]
    fast = patch_spans(raw, set_fields, remove)
    spliced = patch_object(raw, set_fields, remove, trusted=True)
    if fast is not None:
        assert fast == spliced
    escaped_key = any("\\" in json.dumps(key, **STYLES[style])[1:-1] for key in body)  # type: ignore[arg-type]
    removes = bool(set(remove) - set(set_fields))
    escaped_new = any(json.dumps(key)[1:-1] != key for key in set_fields if key not in body)
    sure = not (removes or escaped_key or escaped_new)
    if set_fields and sure and len(raw) <= MAX_BYTES:
        assert fast == spliced  # nothing it leaves to the splice: always the fast path
    assert patch_rendered(raw, orjson.loads(raw), set_fields, remove) in (None, spliced)


def test_a_spaced_request_is_renamed_in_place_and_appended_to() -> None:
    raw = b'{"model": "alias", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
    edits = {"model": "upstream-name", "stream_options": {"include_usage": True}}
    patched = patch_spans(raw, edits)
    assert patched == (
        b'{"model": "upstream-name", "messages": [{"role": "user", "content": "hi"}], '
        b'"stream": true,"stream_options":{"include_usage":true}}'
    )
    assert patched == patch_object(raw, edits, trusted=True)
    assert patch_rendered(raw, orjson.loads(raw), edits) == patched


def test_a_key_inside_a_value_is_not_a_member() -> None:
    raw = b'{"messages": [{"model": "x", "content": "\\"model\\": 1"}], "model" : "a" }'
    assert patch_spans(raw, {"model": "b"}) == (
        b'{"messages": [{"model": "x", "content": "\\"model\\": 1"}], "model" : "b" }'
    )


def test_every_repeat_of_a_key_is_edited_and_a_missing_one_appended() -> None:
    raw = b'{"a": 1, "a": 2}'
    edits = {"a": 3, "b": [1, 2]}
    assert patch_spans(raw, edits) == b'{"a": 3, "a": 3,"b":[1,2]}'
    assert patch_spans(raw, edits) == patch_object(raw, edits, trusted=True)
    assert patch_spans(b" {\n} ", {"b": None}) == b' {\n"b":null} '


def test_what_it_cannot_be_sure_of_is_left_to_the_splice() -> None:
    assert patch_spans(b'{"mod\\u0065l": "a"}', {"model": "b"}) is None  # escaped key
    assert patch_spans(b'{"a": 1, "b": 2}', {"a": 3}, {"b"}) is None  # a removal
    assert patch_spans(b'{"a": 1, "b": 2}', {"a": 3}, {"a"}) == b'{"a": 3, "b": 2}'  # set too
    assert patch_spans(b'{"a": 1}', {}) is None  # nothing to set
    assert patch_spans(b'{"a": 1}', {"a": 2**70}) is None  # orjson will not render it
    assert patch_spans(b'{"a": 1}', {"\ud800": 1}) is None  # a key that is not UTF-8
    assert patch_spans(b'{"a": 1}', {"\u00e9": 1}) is None  # a new key escaped by the splice
    there = '{"\u00e9": 1}'.encode()  # written in UTF-8, unescaped: found as bytes
    assert patch_spans(there, {"\u00e9": 2}) == '{"\u00e9": 2}'.encode()
    assert patch_spans(b"[1]", {"a": 1}) is None  # not an object
    many = {f"k{i}": i for i in range(MAX_SET_FIELDS + 1)}
    assert patch_spans(b"{}", many) is None  # more than one native call sets
    assert patch_rendered(b"{}", {}, many) == patch_object(b"{}", many, trusted=True)
    repeated = b'{"a": 1' + b', "a": 1' * MAX_SET_FIELDS + b"}"
    assert patch_spans(repeated, {"a": 2}) is None  # more members to edit than it keeps
    big = json.dumps({"a": "x" * MAX_BYTES}).encode()
    assert patch_spans(big, {"a": 1}) is None


def test_without_the_native_walker_nothing_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compact_patch, "_SET_MEMBERS", None)
    assert patch_spans(b'{"a": 1}', {"a": 2}) is None
    raw = b'{"a": 1, "b": 2}'
    assert patch_rendered(raw, orjson.loads(raw), {"a": 2}) == b'{"a": 2, "b": 2}'  # spaced


def test_set_members_keeps_every_other_byte_and_appends_plain_keys() -> None:
    raw = b'{"model": "a", "messages": [{"model": 1}], "max_tokens": 16}'
    keys, values = (b"max_tokens", b"model", b"zz"), (b"8", b'"b"', b"[]")
    assert _rawjson.set_members(raw, keys, values) == (
        b'{"model": "b", "messages": [{"model": 1}], "max_tokens": 8,"zz":[]}'
    )
    assert _rawjson.set_members(b"{}", (b"a", b"b"), (b"1", b"2")) == b'{"a":1,"b":2}'
    assert _rawjson.set_members(b'{"\\u0061": 1}', (b"a",), (b"2",)) is None  # escaped key
    assert _rawjson.set_members(b"{}", ("\u00e9".encode(),), (b"2",)) is None  # escaped new
    assert _rawjson.set_members(b"{}", (b"\x7f",), (b"2",)) is None
    with pytest.raises(TypeError):
        _rawjson.set_members(b"{}", ("a",), (b"1",))
    with pytest.raises(ValueError):
        _rawjson.set_members(b"{}", (b"a",), ())
