"""The trusted scan (for bodies already parsed) finds the same members as the validating walk."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.rawjson import patch_object, scan_raw

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(['\\"', "\\", '"', "\\\\", '\\\\"', "\u2028"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)
OBJECTS = st.dictionaries(st.sampled_from(["model", "messages", "a", 'q"\\', "é"]), VALUES)
STYLES = [{}, {"indent": 1}, {"separators": (",", ":")}, {"ensure_ascii": False}]


@settings(max_examples=300, deadline=None)
@given(OBJECTS, st.integers(min_value=0, max_value=len(STYLES) - 1))
def test_trusted_scan_matches_the_validating_walk(body: dict[str, Any], style: int) -> None:
    assert rawjson.NATIVE  # the trusted skip is native only
    raw = json.dumps(body, **STYLES[style]).encode()  # type: ignore[arg-type]
    assert scan_raw(raw, trusted=True) == scan_raw(raw)
    edits = {"model": "upstream", "n": 2}
    assert patch_object(raw, edits, {"a"}, trusted=True) == patch_object(raw, edits, {"a"})


def test_a_long_string_of_escapes_is_skipped_whole() -> None:
    text = '\\"' * 50_000 + "\\\\"
    raw = json.dumps({"messages": [{"content": text}], "model": "alias"}).encode()
    out = patch_object(raw, {"model": "m"}, trusted=True)
    assert json.loads(out) == {"messages": [{"content": text}], "model": "m"}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(VALUES, max_size=6) | st.dictionaries(st.text(max_size=4), VALUES, max_size=6),
    st.integers(min_value=0, max_value=len(STYLES) - 1),
    st.integers(min_value=0, max_value=6),
)
def test_trusted_children_are_the_validating_walk_s(
    container: list[Any] | dict[str, Any], style: int, resume_after: int
) -> None:
    """Where each child lies, from the opening bracket and resumed after any child."""
    raw = json.dumps({"m": container}, **STYLES[style]).encode()  # type: ignore[arg-type]
    start = rawjson.space_end(raw, raw.index(b":") + 1)
    triples, _, end, _ = rawjson.children(raw, start)
    trusted, trusted_end = rawjson.trusted_children(raw, start)
    assert (list(trusted), trusted_end) == (list(triples), end)
    if resume_after < len(triples) // 3:  # resumed just past a child, as a later call does
        after = triples[3 * resume_after + 2]
        inside = isinstance(container, dict)
        rest, _, rest_end, _ = rawjson.children(raw, after, 0, inside)
        got, got_end = rawjson.trusted_children(raw, after, inside)
        assert (list(got), got_end) == (list(rest), rest_end)


def test_trusted_children_refuse_what_is_not_a_container() -> None:
    for bad in (b"[1,", b"[", b'{"a"}', b"[,]", b"[1 2]", b'{"a":}', b'["abc]', b"", b"7"):
        with pytest.raises(rawjson.RawJsonError):
            rawjson.trusted_children(bad, 0)
    assert list(rawjson.trusted_children(b"[ ]", 0)[0]) == []
    with pytest.raises(rawjson.RawJsonError):
        rawjson.trusted_children(b"[1]", 5)


def test_a_large_body_s_trusted_scan_is_kept_for_its_next_caller() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 1000}] * 80, "n": 1}
    raw = json.dumps(body).encode()
    assert rawjson.MEMO_BYTES[0] <= len(raw) <= rawjson.MEMO_BYTES[1]
    first = scan_raw(raw, trusted=True)
    assert first == scan_raw(raw)  # what the validating walk finds
    first[0].clear()  # a caller's list is its own
    again = scan_raw(raw, trusted=True)
    assert again == scan_raw(raw) and rawjson._SCANNED[0] is not None
    other = json.dumps({**body, "n": 22}).encode()  # other bytes: scanned for themselves
    assert scan_raw(other, trusted=True) == scan_raw(other)
    assert patch_object(raw, {"model": "u"}, trusted=True) == patch_object(raw, {"model": "u"})


def _has_list_or_marker(value: Any) -> bool:
    if isinstance(value, list):
        return any(map(_has_list_or_marker, value))
    if not isinstance(value, dict):
        return False
    if "cache_control" in value or "prompt_cache_breakpoint" in value:
        return True
    if isinstance(value.get("content"), list):
        return True
    return any(map(_has_list_or_marker, value.values()))


KEYED = st.recursive(
    SCALARS | st.sampled_from(["cache_control", "content", '"content":[']),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["content", "cache_control", "prompt_cache_breakpoint", "a", "content "]
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(KEYED, st.integers(min_value=0, max_value=len(STYLES) - 1))
def test_list_or_marker_finds_exactly_those_keys(value: Any, style: int) -> None:
    raw = json.dumps(value, **STYLES[style]).encode()  # type: ignore[arg-type]
    assert rawjson.list_or_marker(raw) == _has_list_or_marker(value)


def test_list_or_marker_is_careful_with_what_is_not_json() -> None:
    assert rawjson.list_or_marker(b'{"a":"no end')  # a string that does not end: careful
    assert not rawjson.list_or_marker(b'{"content":"x"}')
    assert rawjson.list_or_marker(b'{"content" : [1]}')
