"""h1's request head built once per origin and headers, and the reply's headers as a dict.

The cached head must be byte for byte the head built from scratch, for any headers and
framing, and still refuse a header with a newline; `header_dict` must be what
`response_headers` joined before, or None where names repeat.
"""

from __future__ import annotations

import random

import pytest

from gateway.upstream import h1
from gateway.upstream import http_stream as hs
from gateway.upstream.h1_connect import Origin, origin

NAMES = [
    "content-type",
    "Accept",
    "authorization",
    "X-Extra",
    "host",
    "user-agent",
    "accept-encoding",
    "Content-Length",
    "transfer-encoding",
    "traceparent",
]


def _uncached(where: Origin, headers: dict[str, str], length: int | None) -> bytes:
    framing = (
        b"Transfer-Encoding: chunked\r\n\r\n"
        if length is None
        else b"Content-Length: %d\r\n\r\n" % length
    )
    return h1._head_lines(where, headers) + framing


def test_the_cached_head_is_the_head_built_afresh() -> None:
    rng = random.Random(12)
    urls = ["http://127.0.0.1:8000/v1/chat/completions", "https://api.example.com/v1/x?y=1"]
    for _ in range(3000):
        where = origin(rng.choice(urls))
        headers = {
            rng.choice(NAMES): rng.choice(["a", "application/json", "Bearer sk-1", "ü", ""])
            for _ in range(rng.randrange(6))
        }
        length = rng.choice([None, 0, 7, 123456])
        first = h1._head(where, headers, length)
        assert first == _uncached(where, headers, length)
        assert h1._head(where, dict(headers), length) == first  # from the cache
    assert len(h1._HEADS) <= h1.HEAD_CACHE_SIZE


def test_a_newline_in_a_header_is_refused_every_time() -> None:
    where = origin("http://127.0.0.1:8000/v1/chat/completions")
    for _ in range(2):
        with pytest.raises(ValueError, match="header injection"):
            h1._head(where, {"x-a": "b\r\nx-evil: 1"}, 3)


def _reply(raw: list[tuple[bytes, bytes]]) -> h1.Reply:
    reply = h1.Reply.__new__(h1.Reply)
    reply._raw = raw
    return reply


def _joined(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in _reply(raw).header_items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def test_the_reply_headers_are_those_joined_before() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        raw = [
            (
                rng.choice([b"Date", b"server", b"X-Rep", b"x-rep", b"Content-Type", b"\xc0x"]),
                rng.choice([b"a", b"b", b"text/event-stream", b"\xe9"]),
            )
            for _ in range(rng.randrange(5))
        ]
        got = _reply(raw).header_dict()
        if got is None:
            assert len({n.decode("latin-1").lower() for n, _ in raw}) < len(raw)
        else:
            assert got == _joined(raw)
        assert hs.response_headers(_reply(raw)) == _joined(raw)
