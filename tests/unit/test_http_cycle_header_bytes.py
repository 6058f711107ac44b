"""`Cycle` refuses exactly the header bytes uvicorn's cycle refuses, byte by byte.

Its checks read uvicorn's `HEADER_RE` and `HEADER_VALUE_RE` as `bytes.translate` tables
(one lookup per byte, not the regex engine's character-class walk); every one of the 256
bytes, in a name and in a value, must get the same answer from both cycles.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, RequestResponseCycle

from gateway.http_cycle import Cycle, refused_name, refused_value
from tests.unit.test_http_cycle import _body, _run, _start

BYTES = range(256)


def _reply(name: bytes, value: bytes) -> list[dict[str, Any]]:
    return [_start([(b"content-length", b"0"), (name, value)]), _body()]


@pytest.mark.parametrize("byte", BYTES)
def test_a_name_holding_any_byte_is_refused_as_uvicorn_refuses_it(byte: int) -> None:
    name = b"x-" + bytes((byte,)) + b"-y"
    ours = asyncio.run(_run(Cycle, _reply(name, b"v"), "POST", True))
    theirs = asyncio.run(_run(RequestResponseCycle, _reply(name, b"v"), "POST", True))
    assert ours == theirs
    assert refused_name(name) is (HEADER_RE.search(name) is not None)


@pytest.mark.parametrize("byte", BYTES)
def test_a_value_holding_any_byte_is_refused_as_uvicorn_refuses_it(byte: int) -> None:
    value = b"a" + bytes((byte,)) + b"b"
    ours = asyncio.run(_run(Cycle, _reply(b"x-v", value), "POST", True))
    theirs = asyncio.run(_run(RequestResponseCycle, _reply(b"x-v", value), "POST", True))
    assert ours == theirs
    assert refused_value(value) is (HEADER_VALUE_RE.search(value) is not None)


def test_empty_and_joined_headers_read_as_the_patterns_read_them() -> None:
    assert not refused_name(b"") and not refused_value(b"")
    assert refused_value(b"ok\tfine\x7f") and not refused_value(b"ok\tfine\x80\xff")
    assert refused_name(b"content-typex(") and not refused_name(b"content-typex-request-id")
