"""`patch_compact` gives `patch_object`'s bytes, or None where it cannot be sure of them."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.compact_patch import MAX_BYTES, patch_compact, patch_spaced
from gateway.rawjson import patch_object

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(['\\"', "\\", '"', "\u2028", "\x00", "\x7f", "é", "\U0001f600"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)
KEYS = st.sampled_from(["model", "messages", "usage", "a", 'q"\\', "é", "\x01"])
OBJECTS = st.dictionaries(KEYS, VALUES)
SETS = st.dictionaries(KEYS, VALUES, max_size=3)
REMOVES = st.sets(KEYS, max_size=3)
STYLES = [
    {},
    {"separators": (",", ":")},
    {"separators": (",", ":"), "ensure_ascii": False},
    {"indent": 1},
]


@settings(max_examples=200, deadline=None)
@given(OBJECTS, SETS, REMOVES)
def test_compact_bodies_patch_to_the_spliced_bytes(
    body: dict[str, Any], set_fields: dict[str, Any], remove: set[str]
) -> None:
    raw = orjson.dumps(body)
    fast = patch_compact(raw, orjson.loads(raw), set_fields, remove)
    spliced = patch_object(raw, set_fields, remove, trusted=True)
    if len(raw) > MAX_BYTES:
        assert fast is None
    elif all(
        key.isascii() and key.isprintable() and not {'"', "\\"} & set(key) for key in set_fields
    ):
        assert fast == spliced  # plain keys: always the fast path
    else:
        assert fast in (None, spliced)  # a new key `patch_object` escapes: its splice


@settings(max_examples=200, deadline=None)
@given(OBJECTS, SETS, REMOVES, st.integers(min_value=0, max_value=len(STYLES) - 1))
def test_other_renderings_are_patched_exactly_or_left_to_the_splice(
    body: dict[str, Any], set_fields: dict[str, Any], remove: set[str], style: int
) -> None:
    raw = json.dumps(body, **STYLES[style]).encode()  # type: ignore[arg-type]
    fast = patch_compact(raw, orjson.loads(raw), set_fields, remove)
    if fast is not None:  # only where the body was orjson's rendering to the byte
        assert orjson.dumps(orjson.loads(raw)) == raw
        assert fast == patch_object(raw, set_fields, remove, trusted=True)


def test_a_reply_with_spaces_or_a_repeated_key_is_left_to_the_splice() -> None:
    spaced = b'{"id": "x", "usage": {"prompt_tokens": 1}}'
    assert patch_compact(spaced, orjson.loads(spaced), {"usage": {}}) is None
    repeated = b'{"id":"x","id":"y","usage":{}}'
    assert patch_compact(repeated, orjson.loads(repeated), {"usage": {"cost": 1}}) is None
    assert (
        patch_object(repeated, {"usage": {"cost": 1}}) == b'{"id":"x","id":"y","usage":{"cost":1}}'
    )


def test_a_new_key_that_patch_object_escapes_is_left_to_it() -> None:
    raw = b'{"a":1}'
    assert patch_compact(raw, orjson.loads(raw), {"\u00e9": 1}) is None
    assert patch_compact(raw, orjson.loads(raw), {"a": "\u00e9"}) == '{"a":"\u00e9"}'.encode()


def test_a_value_orjson_cannot_render_is_left_to_the_splice() -> None:
    raw = b'{"n":1}'
    assert patch_compact(raw, {"n": 2**70}, {"x": 1}) is None  # not raw's parse: no match
    assert patch_compact(raw, orjson.loads(raw), {"x": 2**70}) is None


def test_a_compact_reply_is_patched_in_place_and_appended_to() -> None:
    raw = b'{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":3}}'
    patched = patch_compact(raw, orjson.loads(raw), {"usage": {"total_tokens": 3, "cost": "1"}})
    assert (
        patched
        == b'{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":3,"cost":"1"}}'
    )
    added = patch_compact(raw, orjson.loads(raw), {"z": None}, {"id"})
    assert (
        added == b'{"choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":3},"z":null}'
    )


@settings(max_examples=200, deadline=None)
@given(OBJECTS, SETS, REMOVES)
def test_spaced_bodies_patch_to_the_spliced_bytes(
    body: dict[str, Any], set_fields: dict[str, Any], remove: set[str]
) -> None:
    raw = json.dumps(body).encode()  # `json.dumps`' defaults, as `requests`' `json=` sends
    fast = patch_spaced(raw, orjson.loads(raw), set_fields, remove)
    spliced = patch_object(raw, set_fields, remove, trusted=True)
    if fast is not None:
        assert fast == spliced
    plain = [v for k, v in set_fields.items() if k in body]
    if len(raw) <= MAX_BYTES and all(
        isinstance(v, int) or (isinstance(v, str) and v.isascii() and v.isalnum()) for v in plain
    ):
        assert fast == spliced  # edits every rendering writes alike: always the fast path


@settings(max_examples=200, deadline=None)
@given(OBJECTS, SETS, REMOVES, st.integers(min_value=0, max_value=len(STYLES) - 1))
def test_spaced_patch_leaves_other_renderings_to_the_splice(
    body: dict[str, Any], set_fields: dict[str, Any], remove: set[str], style: int
) -> None:
    raw = json.dumps(body, **STYLES[style]).encode()  # type: ignore[arg-type]
    fast = patch_spaced(raw, orjson.loads(raw), set_fields, remove)
    if fast is not None:  # only where the body was `json.dumps`' rendering to the byte
        assert json.dumps(orjson.loads(raw)).encode() == raw
        assert fast == patch_object(raw, set_fields, remove, trusted=True)


def test_a_spaced_request_is_renamed_in_place_and_appended_to() -> None:
    raw = b'{"model": "alias", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
    edits = {"model": "upstream-name", "stream_options": {"include_usage": True}}
    patched = patch_spaced(raw, orjson.loads(raw), edits)
    assert patched == (
        b'{"model": "upstream-name", "messages": [{"role": "user", "content": "hi"}], '
        b'"stream": true,"stream_options":{"include_usage":true}}'
    )
    assert patched == patch_object(raw, edits, trusted=True)
    dropped = patch_spaced(raw, orjson.loads(raw), {}, {"messages"})
    assert dropped == b'{"model": "alias", "stream": true}'


def test_a_spaced_body_whose_edit_renders_apart_is_left_to_the_splice() -> None:
    raw = b'{"a": 1, "b": {"x": 1}}'
    assert patch_spaced(raw, orjson.loads(raw), {"b": {"x": 1, "y": 2}}) is None  # ", " vs ","
    assert patch_spaced(raw, orjson.loads(raw), {"a": "\u00e9"}) is None  # escaped vs UTF-8
    assert patch_spaced(raw, orjson.loads(raw), {"a": 1.5}) == b'{"a": 1.5, "b": {"x": 1}}'
    repeated = b'{"a": 1, "a": 2}'
    assert patch_spaced(repeated, orjson.loads(repeated), {"a": 3}) is None
    compact = b'{"a":1,"b":2}'
    assert patch_spaced(compact, orjson.loads(compact), {"a": 3}) is None
