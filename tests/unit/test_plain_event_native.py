"""The native reader of plain content chunks (`replies.PLAIN_EVENT`) against the Python path.

The Python path (`line_data`, `read_chunk` with orjson's parse and `plain_content`, the
chunk's `service_tier`) is the reference. Wherever the native reader answers, its answer
must be the reference's, byte for byte and type for type; where it declines (None), the
relay reads the event the Python way, so declining is always safe. It must also answer for
the chunks upstreams really send, or the short path would never be taken.
"""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from gateway.errors import FareboxError
from gateway.upstream.replies import PLAIN_EVENT, line_data, read_chunk
from gateway.upstream.sse import event_data

pytestmark = pytest.mark.skipif(PLAIN_EVENT is None, reason="built without the native module")


def _reference(event: bytes) -> tuple[str, str | None] | None:
    """What the relay's Python path meters for `event`: None for anything but plain content."""
    data = line_data(event)
    if data is None:
        data = event_data(event)
    try:
        chunk, content = read_chunk(data, "x")
    except FareboxError:
        return None
    if chunk is None or content is None:
        return None
    tier = chunk.get("service_tier")
    return content, tier if isinstance(tier, str) else None


def _native(event: bytes) -> tuple[str, str | None] | None:
    assert PLAIN_EVENT is not None
    return PLAIN_EVENT(event)


def _agrees(event: bytes) -> bool:
    """The native answer is the reference's (or None); says whether it answered."""
    found = _native(event)
    if found is None:
        return False
    expected = _reference(event)
    assert found == expected, event
    assert type(found[0]) is str and (found[1] is None or type(found[1]) is str), event
    return True


def _chunk(delta: Any, finish: Any = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice], **extra}


def _event(data: bytes | str) -> bytes:
    return b"data: " + (data.encode() if isinstance(data, str) else data) + b"\n\n"


TEXTS = ["", " tok1", "é", "😀", 'a "quoted" \\ back/slash', "tab\tnew\nline", "\x00\x1f", "\u2028"]
TEXTS += ["\ud7ff\ue000\uffff", "data: [DONE]\n\n", "}]}", "\u00e9\u4e2d\U0010ffff"]


@pytest.mark.parametrize("text", TEXTS)
def test_content_of_every_kind_is_read_as_orjson_reads_it(text: str) -> None:
    for data in (
        orjson.dumps(_chunk({"content": text})),
        json.dumps(_chunk({"content": text})).encode(),  # \u escapes, surrogate pairs
        json.dumps(_chunk({"content": text}), ensure_ascii=False).encode(),
        json.dumps(
            _chunk({"content": text}, service_tier=text), separators=(" , ", " :\t")
        ).encode(),
    ):
        assert _native(_event(data)) == _reference(_event(data)) is not None
        assert _native(_event(data))[0] == text  # type: ignore[index]


def test_the_mock_upstreams_stream_takes_the_native_path_but_for_its_last_events() -> None:
    role = _chunk({"role": "assistant", "content": ""})
    tokens = [_chunk({"content": f" tok{i}"}, service_tier="default") for i in range(16)]
    finish = _chunk({}, "stop")
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 16}}
    answers = [_native(_event(orjson.dumps(chunk))) for chunk in [role, *tokens, finish, usage]]
    assert answers == [("", None)] + [(f" tok{i}", "default") for i in range(16)] + [None, None]
    assert _native(b"data: [DONE]\n\n") is None


DECLINED = [
    b'{"choices":[{"delta":{"content":"a"}}],"us\\u0061ge":{}}',  # an escaped key
    b'{"choices":[{"delta":{"content":"a","content":"b"}}]}',  # orjson keeps the last
    b'{"choices":[{"delta":{"content":"a"},"delta":{}}]}',
    b'{"choices":[{"delta":{"content":"a"}}],"choices":[]}',
    b'{"choices":[{"delta":{"content":"a"}}],"service_tier":"a","service_tier":1}',
    b'{"choices":[{"delta":{"content":"a"},"finish_reason":null,"finish_reason":"stop"}]}',
    b'{"choices":[{"delta":{"content":"a"}}],"created":1e3}',  # exponents are orjson's
    b'{"choices":[{"delta":{"content":"a"}}],"created":1' + b"0" * 300 + b"}",
    b'{"choices":[{"delta":{"content":"a"}}],"x":' + b"[" * 70 + b"]" * 70 + b"}",
    b'{"choices":[{"delta":{"content":"\\ud800"}}]}',  # lone surrogates
    b'{"choices":[{"delta":{"content":"\\udc00\\ud800"}}]}',
    b'{"choices":[{"delta":{"content":"\xed\xa0\x80"}}]}',  # a surrogate in UTF-8
    b'{"choices":[{"delta":{"content":"\xc0\xaf"}}]}',  # overlong
    b'{"choices":[{"delta":{"content":"\xf4\x90\x80\x80"}}]}',  # past U+10FFFF
    b'{"choices":[{"delta":{"content":"\xe2\x82"}}]}',  # cut short
    b'{"choices":[{"delta":{"content":"\x01"}}]}',  # a control character
    b'{"choices":[{"delta":{"content":"\\x"}}]}',
    b'{"choices":[{"delta":{"content":"a"}}],}',
    b'{"choices":[{"delta":{"content":"a"}}]} x',
    b'{"choices":[{"delta":{"content":"a"}},]}',
    b'{"choices":[{"delta":{"content":"a"}}],"n":01}',
    b'{"choices":[{"delta":{"content":"a"}}],"n":1.}',
    b'{"choices":[{"delta":{"content":"a"}}],"n":-}',
    b'{"choices":[{"delta":{"content":"a"}}],"n":tru}',
    b'{"choices":[{"delta":{"content":"a"}}],"n":NaN}',
    b'{"choices":[{"delta":{"content":"a"}}],"error":null}',
    b'{"choices":[{"delta":{"content":"a"}}],"usage":null}',
    b'{"choices":[{"delta":{"content":"a"}},{"delta":{}}]}',
    b'{"choices":[{"delta":{"content":"a"}}]',
    b'{"choices":[{"delta":{"content":"a","tool_calls":[]}}]}',
    b'{"choices":[{"delta":{"content":"a","reasoning":""}}]}',
    b'{"choices":[{"delta":{"reasoning_content":null}}]}',
    b'{"choices":[{"delta":null}]}',
    b'{"choices":[{"finish_reason":null}]}',
    b'{"choices":[{"delta":{},"finish_reason":""}]}',
    b'{"choices":[3]}',
    b'{"choices":{}}',
    b"{}",
]


@pytest.mark.parametrize("data", DECLINED)
def test_what_it_does_not_read_exactly_as_orjson_would_is_left_to_the_python_path(
    data: bytes,
) -> None:
    assert _native(_event(data)) is None


@pytest.mark.parametrize(
    "event",
    [
        b'data:{"choices":[{"delta":{"content":"a"}}]}\n\n',
        b'data:  {"choices":[{"delta":{"content":"a"}}]}\n\n',
        b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n',
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n',
        b'data: {"choices":[{"delta":{"content":"a"}}]}',
        b': note\ndata: {"choices":[{"delta":{"content":"a"}}]}\n\n',
        b'data: {"choices":[{"delta":{"content":"a\\n"}}],\n"x":1}\n\n',
    ],
)
def test_other_framings_are_left_to_the_python_path(event: bytes) -> None:
    assert _native(event) is None
    assert _native(bytearray(_event(b'{"choices":[{"delta":{}}]}'))) is None  # type: ignore[arg-type]


def test_white_space_and_any_other_members_are_read_through() -> None:
    data = b'{ "choices" :\t[ { "delta" : { "content" : "a" , "x" : [ 1 , -2.5 , true ] } ,'
    data += b' "finish_reason" : null } ] , "service_tier" : null , "o" : { "k" : false } }  \t'
    assert _native(_event(data)) == ("a", None) == _reference(_event(data))
    content_7 = b'{"choices":[{"delta":{"content":7}}],"service_tier":["x"]}'
    assert _native(_event(content_7)) == ("", None) == _reference(_event(content_7))


def _junk(rnd: random.Random, depth: int = 0) -> Any:
    keys = ["choices", "delta", "content", "reasoning", "tool_calls", "usage", "error"]
    keys += ["service_tier", "finish_reason", "role", "index", "x"]
    kinds = ["str", "int", "float", "none", "bool", "list", "dict"] if depth < 4 else ["str"]
    kind = rnd.choice(kinds)
    if kind == "list":
        return [_junk(rnd, depth + 1) for _ in range(rnd.randint(0, 2))]
    if kind == "dict":
        return {rnd.choice(keys): _junk(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}
    values = {
        "str": rnd.choice(TEXTS),
        "int": rnd.choice([0, -1, 7, 2**63, -(2**63) - 1, 2**64]),
        "float": rnd.choice([0.5, -2.25, 1e-7, 3.0]),
        "bool": rnd.random() < 0.5,
    }
    return values.get(kind)


def _random_event(rnd: random.Random) -> bytes:
    delta = _junk(rnd) if rnd.random() < 0.4 else {"content": rnd.choice([*TEXTS, None, 1])}
    chunk = _chunk(delta, rnd.choice([None, None, None, "stop", ""]))
    for key in rnd.sample(["usage", "service_tier", "error", "x"], rnd.randint(0, 2)):
        chunk[key] = _junk(rnd, 2) if key != "service_tier" else rnd.choice([*TEXTS, None, 1])
    if rnd.random() < 0.1:
        chunk = _junk(rnd)
    if rnd.random() < 0.5:
        return _event(json.dumps(chunk).encode())
    try:
        return _event(orjson.dumps(chunk))
    except TypeError:  # an integer past 64 bits: only json writes it
        return _event(json.dumps(chunk).encode())


@pytest.mark.parametrize("seed", range(4))
def test_random_chunks_read_the_same(seed: int) -> None:
    """Rendered by orjson or json: the native reader answers wherever the reference is plain
    (but for a float json writes with an exponent), and answers the same."""
    rnd = random.Random(seed)
    answered = 0
    for _ in range(2000):
        event = _random_event(rnd)
        expected = _reference(event)
        found = _native(event)
        if found is None and expected is not None:
            assert b"e-" in event, event  # a float json writes with an exponent
            continue
        assert found == expected, event
        answered += found is not None
    assert answered > 300


ALPHABET = b'{}[]",:\\ \t\n\r0123456789-.eEtrufalsn' + bytes([0x80, 0xBF, 0xC3, 0xED, 0xF0, 0xFF])


@pytest.mark.parametrize("seed", range(4))
def test_mutated_bytes_never_get_an_answer_the_reference_would_not_give(seed: int) -> None:
    """Random byte edits of real chunks (hostile upstreams): an answer is always the
    reference's; most edits break the JSON, and the Python path then raises as before."""
    rnd = random.Random(100 + seed)
    answered = 0
    for _ in range(5000):
        event = bytearray(_random_event(rnd))
        for _ in range(rnd.randint(1, 3)):
            if len(event) < 10:
                break
            at = rnd.randrange(6, len(event) - 2)
            edit = rnd.random()
            if edit < 0.4:
                event[at] = rnd.choice(ALPHABET)
            elif edit < 0.7:
                del event[at]
            else:
                event[at:at] = bytes([rnd.choice(ALPHABET)])
        answered += _agrees(bytes(event))
    assert answered > 50
