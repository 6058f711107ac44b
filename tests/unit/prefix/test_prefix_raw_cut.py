"""The messages' bytes taken from the client's body (`rawcut`) are exactly what dumping the
parsed messages gives, in whatever form the client wrote them, and so the cut, the record,
the chain and the whole check are the same as without them."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.prefix import PrefixChecker, locate, rawcut, record, rule_for, segments
from gateway.prefix.record import build_record
from gateway.prefix.segments import canonical_bytes, split_request

pytestmark = pytest.mark.skipif(
    locate.native_step("canonical_items") is None, reason="needs the native _locate module"
)
_NATIVE = locate.native_step("canonical_items")


def canonical_items(raw: bytes, start: int, limit: int | None = None) -> Any:
    """`_locate.canonical_items`, typed for these tests."""
    assert _NATIVE is not None
    return _NATIVE(raw, start) if limit is None else _NATIVE(raw, start, limit)


TEXT = st.text(
    alphabet=st.sampled_from('ab"\\/,[]{}: \n\t\r\x08\x0c\x00\x1f\x7fé€😀\u2028'), max_size=12
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(TEXT | st.sampled_from(["content", "cache_control"]), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"])},
    optional={
        "content": st.none()
        | TEXT
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=2),
        "name": TEXT,
        "cache_control": st.just({"type": "ephemeral"}),
        "tool_calls": st.lists(JSON, max_size=2),
        "extra": JSON,
    },
)
# Ways clients write JSON: orjson's compact UTF-8 form, the standard library's defaults
# (", " and ": ", \u escapes), compact ASCII, indented.
STYLES = [
    orjson.dumps,
    lambda value: json.dumps(value).encode(),
    lambda value: json.dumps(value, separators=(",", ":")).encode(),
    lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
    lambda value: json.dumps(value, indent=1, ensure_ascii=False).encode(),
]
STYLE = st.sampled_from(range(len(STYLES)))


def _written(value: Any, style: int) -> bytes | None:
    try:
        return STYLES[style](value)
    except (orjson.JSONEncodeError, TypeError, ValueError):
        return None  # orjson refuses integers past 64 bits


def _escaped(raw: bytes, data: st.DataObject) -> bytes:
    """`raw` with some of its plain ASCII letters spelled as \\u escapes (same JSON)."""
    letters = [m.start() for m in re.finditer(rb"[a-z]", raw)]
    chosen = data.draw(st.lists(st.sampled_from(letters), max_size=3)) if letters else []
    for at in sorted(set(chosen), reverse=True):
        if raw[:at].count(b'"') % 2 == 1 and not raw[:at].endswith(b"\\"):
            raw = raw[:at] + b"\\u%04x" % raw[at] + raw[at + 1 :]
    return raw


@settings(max_examples=400, deadline=None)
@given(values=st.lists(JSON, max_size=8), style=STYLE, data=st.data())
def test_an_item_taken_is_orjsons_dump_of_its_value(
    values: list[Any], style: int, data: st.DataObject
) -> None:
    raw = _written(values, style)
    if raw is None:
        return
    raw = _escaped(raw, data)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return  # not what a parsed body can be
    found = canonical_items(raw, 0)
    assert found is not None
    items, flags = found
    assert len(items) == len(parsed) == len(flags)
    for item, value, flag in zip(items, parsed, flags, strict=True):
        if item is not None:
            assert item == orjson.dumps(value)
            assert flag == rawjson.list_or_marker(item)
        else:
            assert flag == 0


@settings(max_examples=300, deadline=None)
@given(values=st.lists(JSON, max_size=8))
def test_orjsons_own_dump_is_taken_whole(values: list[Any]) -> None:
    """Nothing orjson writes is refused but floats and integers past 18 digits."""
    try:
        raw = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return
    items, _ = canonical_items(raw, 0)
    for item, value in zip(items, values, strict=True):
        refusable = re.search(rb"[.eE]|\d{19}|-0(?![\d])", orjson.dumps(value)) is not None
        assert item == orjson.dumps(value) or refusable


@pytest.mark.parametrize(
    ("raw", "taken"),
    [
        (b'[{"a":1},[1,2],"x\\n",-5,true,null]', [True] * 6),
        (b'[{"a":1,"a":2}, {"a":1}]', [False, True]),  # a repeated key: orjson keeps one
        (b"[1.0,1e5,-0,0,12345678901234567890]", [False, False, False, True, False]),
        (
            b'["\\/","\\u0041","\\u000a","\\u001f","\\u001F","\\t"]',
            [False] * 3 + [True, False, True],
        ),
        (b'[ {"a": 1} , {"a":1} ]', [False, True]),
        (b"[]", []),
        (b"[ ]", []),
    ],
)
def test_what_is_taken_and_what_is_dumped(raw: bytes, taken: list[bool]) -> None:
    items, _ = canonical_items(raw, 0)
    assert [item is not None for item in items] == taken


def test_only_an_array_is_walked_and_the_limit_holds() -> None:
    assert canonical_items(b'{"a":[1]}', 0) is None
    assert canonical_items(b'{"a":[1]}', 5) == ([b"1"], b"\x00")
    assert canonical_items(b"[1.5, 2.5]", 0, 1) is None
    assert canonical_items(b"[1.5, 2]", 0, 1) == ([None, b"2"], b"\x00\x00")
    assert canonical_items(b'["a]', 0) is None


@settings(max_examples=120, deadline=None)  # each body carries a 64 KiB pad
@given(messages=st.lists(MESSAGE, max_size=10), style=STYLE, data=st.data())
def test_raw_messages_are_the_dumped_messages(
    messages: list[dict[str, Any]], style: int, data: st.DataObject
) -> None:
    raw = _written({"model": "m", "messages": messages, "pad": "x" * rawcut.MIN_BYTES}, style)
    if raw is None:
        return
    raw = _escaped(raw, data)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return
    found = rawcut.raw_messages(raw, body["messages"])
    if found is None:  # too many dumped: the cut dumps them all
        return
    assert found.pieces == [canonical_bytes(m) for m in body["messages"]]
    assert list(found.flags) == [rawjson.list_or_marker(p) for p in found.pieces]


def test_raw_messages_refuse_small_bodies_and_other_arrays() -> None:
    messages = [{"role": "user", "content": "hi"}]
    small = orjson.dumps({"messages": messages})
    assert rawcut.raw_messages(small, messages) is None
    raw = orjson.dumps({"messages": messages, "pad": "x" * rawcut.MIN_BYTES})
    assert rawcut.raw_messages(raw, messages) is not None
    assert rawcut.raw_messages(raw, [*messages, *messages]) is None  # not its messages
    twice = raw[:-1] + b',"messages":[]}'  # orjson keeps the last: not cut from the bytes
    assert rawcut.messages_start(twice) is None
    many = orjson.dumps({"messages": [1.5] * (rawcut.MAX_DUMPED + 1), "pad": "x" * 70_000})
    assert rawcut.raw_messages(many, [1.5] * (rawcut.MAX_DUMPED + 1)) is None


@settings(max_examples=100, deadline=None)
@given(
    messages=st.lists(MESSAGE, max_size=12),
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
    style=STYLE,
)
def test_the_cut_from_the_bytes_is_the_cut(
    messages: list[dict[str, Any]], family: str, style: int
) -> None:
    raw = _written({"model": "m", "messages": messages, "pad": "x" * rawcut.MIN_BYTES}, style)
    if raw is None:
        return
    body = orjson.loads(raw)
    rule = rule_for(family)
    pieces = rawcut.raw_messages(raw, body["messages"])
    taken, dumped = split_request(body, rule, raw=pieces), split_request(body, rule)
    assert taken == dumped
    assert [type(s) for s in taken.segments] == [type(s) for s in dumped.segments]
    assert build_record(taken, rule) == build_record(dumped, rule)


def test_the_native_segments_are_the_zips(monkeypatch: pytest.MonkeyPatch) -> None:
    messages: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(300)]
    messages[7] = {"role": 3, "content": "odd role"}
    messages[9] = "not a message"
    pieces = [canonical_bytes(m) for m in messages]
    head = [segments._header({}, "tools", [])]
    native = segments._plain_segments(messages, 2, pieces[2:], head)
    monkeypatch.setattr(segments, "_PLAIN_SEGMENTS", None)
    zipped = segments._plain_segments(messages, 2, pieces[2:], head)
    assert native == zipped
    assert [type(s) for s in native] == [type(s) for s in zipped]


def _conversation(system: str, turns: int, last: bytes) -> bytes:
    """A 1 MB-style fresh prompt as loadgen sends it: compact, a last turn in another style."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in range(turns):
        code = "".join(f"def f_{turn}_{i}(x):\n    return x * {i}\n" for i in range(20))
        call = {
            "id": f"c{turn}",
            "type": "function",
            "function": {"name": "read", "arguments": "{}"},
        }
        messages += [
            {"role": "user", "content": f"Turn {turn}: read the module."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": code},
        ]
    history = json.dumps(messages, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]
    return b'{"model":"m","messages":[' + history + b"," + last + b'],"max_tokens":64}'


def test_a_check_with_the_bytes_is_the_check_without() -> None:
    """Fresh prompts of one caller, checked with and without their bytes: the same checks."""
    rule = rule_for("openai")
    with_raw, without = PrefixChecker(), PrefixChecker()
    kept: list[Any] = []
    kept_without: list[Any] = []
    for step in range(4):
        last = json.dumps({"role": "user", "content": f"Next step {step}: go."}).encode()
        raw = _conversation(f"Session {step}.", 100, last)
        body = orjson.loads(raw)
        assert rawcut.raw_messages(raw, body["messages"]) is not None
        one = with_raw.check(body, rule, kept, raw=raw)
        other = without.check(orjson.loads(raw), rule, kept_without)
        assert one == other
        assert one.record.fingerprints == other.record.fingerprints
        kept, kept_without = [one.record, *kept][:4], [other.record, *kept_without][:4]


@settings(max_examples=30, deadline=None)  # ~0.3 s an example: a long conversation each
@given(
    messages=st.lists(MESSAGE, min_size=70, max_size=90),
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_the_native_record_columns_are_the_maps(
    messages: list[dict[str, Any]], family: str
) -> None:
    rule = rule_for(family)
    raw = _written({"model": "m", "messages": messages}, 0)
    if raw is None:
        return
    request = split_request(orjson.loads(raw), rule)
    native = build_record(request, rule)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record, "_RECORD_COLUMNS", None)
        mapped = build_record(request, rule)
    assert native == mapped
    assert [type(n) for n in native.cumulative_tokens] == [int] * len(request.segments)


def test_record_columns_refuse_what_is_not_a_segment() -> None:
    columns = locate.native_step("record_columns")
    assert columns is not None
    assert columns([("n", 0, b"abcde", b"\x01", 0, b"")]) == (("n",), ("01",), ("",), (2,))
    assert columns([("n", 0, "text", b"\x01", 0, b"")]) is None
    assert columns([("n", 0, b"")]) is None
    assert columns(()) == ((), (), (), ())
