"""The native helpers that keep large requests from holding the event loop give exactly
what the plain Python they replace gives.

- `rawjson.string_value` decodes a JSON string as orjson does, or says None where orjson
  must decide (it then gives its own value or error).
- `untracked` / `untracked_tuple` take a container out of cyclic GC only when all its
  items are untracked, and never change what it holds.
- `dump_each` a chunk at a time, and the record's columns a chunk at a time, equal the
  one-call versions.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.prefix import locate, record, segments
from gateway.prefix.cache_rules import rule_from_model_info
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.segments import dump_each, split_request

native = pytest.mark.skipif(
    not (rawjson.NATIVE and locate.NATIVE) and not os.environ.get("CI"),
    reason="the native helpers were not built (no C compiler); CI requires them",
)


def _orjson_or_error(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return orjson.JSONDecodeError


def _escaped(text: str, ascii_only: bool, slash: bool, upper: bool) -> bytes:
    """`text` as a JSON string the way various clients write it."""
    raw = json.dumps(text, ensure_ascii=ascii_only)
    if slash:
        raw = raw.replace("/", "\\/")
    if upper:  # \u00E9 as well as \u00e9 (an escaped backslash is left alone)
        raw = re.sub(r"(\\\\)|\\u([0-9a-f]{4})", lambda m: m[1] or "\\u" + m[2].upper(), raw)
    return raw.encode()


@native
@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
    | st.text(
        alphabet=st.sampled_from('a"\\/\n\t\b\f\r\x00\x1fé\u07ff\u0800\uffff😀'), max_size=40
    ),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_string_value_decodes_as_orjson_does(
    text: str, ascii_only: bool, slash: bool, upper: bool
) -> None:
    raw = _escaped(text, ascii_only, slash, upper)
    assert rawjson.string_value(raw, 0, len(raw)) == orjson.loads(raw) == text


@native
@pytest.mark.parametrize(
    "raw",
    [
        b'"\\ud800"',  # lone surrogates: orjson refuses them
        b'"\\udc00"',
        b'"\\ud800\\u0041"',
        b'"\\ud83d"',
        b'"a\x01"',  # a control character
        b'"\xed\xa0\x80"',  # an encoded surrogate
        b'"\xc0\xaf"',  # overlong
        b'"\xf4\x90\x80\x80"',  # past U+10FFFF
        b'"\xe2\x82"',  # truncated
        b'"\\x"',
        b'"\\u12"',
        b'"\\"',
    ],
)
def test_string_value_leaves_to_orjson_what_it_does_not_decode(raw: bytes) -> None:
    assert rawjson.string_value(raw, 0, len(raw)) is None
    assert _orjson_or_error(raw) is orjson.JSONDecodeError


@native
def test_string_value_decodes_a_long_string_without_the_lock() -> None:
    text = 'a "log" line\twith é and 😀\n' * 20_000  # over 64 KiB: the lock-free path
    raw = b'{"content":' + orjson.dumps(text) + b"}"
    start = raw.index(b":") + 1
    assert rawjson.string_value(raw, start, len(raw) - 1) == text
    with pytest.raises(ValueError):
        rawjson.string_value(raw, 0, len(raw))  # not a string span


@native
def test_untracked_containers_hold_the_same_items() -> None:
    atoms = [f"messages[{i}]" for i in range(5000)]
    assert locate.untracked(atoms) is atoms and not gc.is_tracked(atoms)
    made = locate.untracked_tuple(atoms)
    assert made == tuple(atoms) and not gc.is_tracked(made)
    mixed = [*atoms, [1]]  # a tracked item: could be in a cycle, so stays tracked
    assert gc.is_tracked(locate.untracked(mixed))
    assert gc.is_tracked(locate.untracked_tuple(mixed))
    assert locate.untracked_tuple([]) == ()


def test_dump_each_a_chunk_at_a_time_equals_one_dump_per_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(segments, "DUMP_CHUNK", 3)
    monkeypatch.setattr(segments, "DUMP_FIRST", 2)
    monkeypatch.setattr(segments, "DUMP_BYTES", 40)  # chunks of 1 to 3 values
    values: list[Any] = [{"a": i, "s": 'x","y' * i} for i in range(10)]
    values += [[1, [2, {}]], "plain", None, 1.5, {"n": 2**70}, "é😀"]
    pieces = dump_each(values, 2)
    assert [json.loads(piece) for piece in pieces] == values[2:]
    assert pieces[:-3] == [orjson.dumps(v) for v in values[2:-3]]


def test_record_columns_a_chunk_at_a_time_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record, "COLUMN_CHUNK", 7)
    sizes = list(range(50))
    assert record._running_sums(sizes) == tuple(itertools.accumulate(sizes))
    assert record._running_sums([]) == ()
    body = {"model": "m", "messages": [{"role": "user", "content": str(i)} for i in range(40)]}
    request = split_request(body, rule_from_model_info("openai", {}))
    built = record.build_record(request, rule_from_model_info("openai", {}))
    assert built.segment_names == tuple(s.name for s in request.segments)
    assert built.segment_digests == tuple(s.digest.hex() for s in request.segments)
    assert built.cumulative_tokens == tuple(
        itertools.accumulate((len(s.data) + 3) // 4 for s in request.segments)
    )
    assert record.PrefixRecord.from_dict(built.to_dict()) == built


@native
def test_a_long_conversation_leaves_no_big_container_to_the_collector() -> None:
    count = segments.UNTRACK_EVERY * 3
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    messages = [{"role": "system", "content": "be brief"}]
    messages += [{"role": "user", "content": f"message {i}"} for i in range(count)]
    body = {"model": "m", "tools": tools, "messages": messages}
    rule = rule_from_model_info("openai", {})
    request = split_request(body, rule)
    assert request.header_count > 0 and len(request.segments) == request.header_count + count
    assert not gc.is_tracked(request.segments)  # header segments too are atoms
    built = record.build_record(request, rule)
    for column in (built.segment_names, built.segment_digests, built.cumulative_tokens):
        assert not gc.is_tracked(column)
    check = PrefixChecker().check(body, rule)
    assert not gc.is_tracked(check.unscanned)
    short = split_request({"model": "m", "messages": messages[:5]}, rule)
    messages_of_short = short.segments[short.header_count :]
    assert all(gc.is_tracked(s) for s in messages_of_short)  # small requests: as before


@native
def test_an_acyclic_list_is_an_ordinary_list_out_of_the_collector() -> None:
    items = locate.acyclic_list()
    items += [{"role": "user", "content": []}, [1, 2]]  # tracked items: a JSON tree
    assert items == [{"role": "user", "content": []}, [1, 2]]
    assert not gc.is_tracked(items)


@native
def test_json_string_writes_what_orjson_writes() -> None:
    for point in range(0x110000):
        char = chr(point)
        expected = None if 0xD800 <= point <= 0xDFFF else orjson.dumps(char)
        assert rawjson.json_string(char) == expected
    text = 'a "log" line\twith é, \x01 and 😀\n' * 20_000  # over 64 KiB: without the lock
    assert rawjson.json_string(text) == orjson.dumps(text)


@native
def test_messages_with_long_strings_are_dumped_as_orjson_dumps_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(segments, "LONG_STRING", 3)
    values: list[Any] = [
        {"role": "user", "content": "short"},
        {"role": "user", "content": 'long é\n"😀', "name": None, "x": [1, {"a": 2.5}]},
        {"content": "abcd"},
        {"role": "tool", "content": "a" * 10, "n": 2**70},  # orjson refuses: json's bytes
        {},
        "not a message",
    ]
    pieces = dump_each(values)
    assert [json.loads(piece) for piece in pieces] == values
    kept = [p for i, p in enumerate(pieces) if i != 3]
    assert kept == [orjson.dumps(v) for i, v in enumerate(values) if i != 3]
