"""The native reader's string scan (plain ASCII four bytes at a time) at every offset.

`read_string` in gateway/upstream/_plain_event.c skips plain ASCII (printable, not `"` or
`\\`) through a table, four bytes at a time, then one at a time, before it looks at a byte
that needs more (a quote, an escape, a control character, UTF-8). Each such byte is put at
every offset of strings of every length around the four-byte steps, in the content, in a
key and in a skipped value: the answer must be the Python path's (or None) every time.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import FareboxError
from gateway.upstream.replies import PLAIN_EVENT, read_chunk

pytestmark = pytest.mark.skipif(PLAIN_EVENT is None, reason="built without the native module")

# Raw bytes put into a JSON string as they are: a few are valid there, most are not.
SPECIAL = [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\ud83d\\ude00", b"\xc3\xa9", b"\xf0\x9f\x98\x80"]
SPECIAL += [b"\x7f", b"\x1f", b"\x00", b"\xff", b"\\", b"\\x", b"\\u12", b"\xc3", b"\x80"]


def _reference(data: bytes) -> tuple[str, str | None] | None:
    try:
        chunk, content = read_chunk(data, "x")
    except FareboxError:
        return None
    if chunk is None or content is None:
        return None
    tier = chunk.get("service_tier")
    return content, tier if isinstance(tier, str) else None


def _strings() -> list[bytes]:
    strings = [b"a" * length for length in range(13)]
    for special in SPECIAL:
        for length in range(10):
            for at in range(length + 1):
                strings.append(b"b" * at + special + b"c" * (length - at))
    return strings


def _datas(inner: bytes) -> list[bytes]:
    """`inner` (a string's bytes, unquoted) as content, as a key, as a skipped value."""
    return [
        b'{"id":"x","choices":[{"delta":{"content":"' + inner + b'"}}]}',
        b'{"id":"x","choices":[{"delta":{"content":"ok","' + inner + b'":1}}]}',
        b'{"id":"' + inner + b'","choices":[{"delta":{"content":"ok"}}],"service_tier":"t"}',
        b'{"choices":[{"delta":{"content":"ok"},"logprobs":["' + inner + b'"]}]}',
    ]


def test_every_special_byte_at_every_offset_reads_as_the_python_path() -> None:
    assert PLAIN_EVENT is not None
    answered = 0
    for inner in _strings():
        for data in _datas(inner):
            found = PLAIN_EVENT(b"data: " + data + b"\n\n")
            if found is None:
                continue  # declined: the relay reads it the Python way
            answered += 1
            assert found == _reference(data), data
    assert answered > 1000  # the valid ones were read natively


def test_plain_strings_of_every_length_are_read_natively() -> None:
    assert PLAIN_EVENT is not None
    for length in range(40):
        text = "".join(chr(0x20 + (i * 7) % 0x60) for i in range(length))
        text = text.replace('"', "q").replace("\\", "s")
        chunk = {"id": text, "choices": [{"delta": {"content": text}}], "service_tier": text}
        data = orjson.dumps(chunk)
        assert PLAIN_EVENT(b"data: " + data + b"\n\n") == (text, text)
