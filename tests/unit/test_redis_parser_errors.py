"""A reply parser reading a connection that is gone: an outage, whichever parser is in use.

redis-py reads replies with hiredis when it is installed (it is a dependency: shared
state's replies parse in half the CPU), else with its pure-Python RESP parsers. A read on
a connection closed under it fails inside the parser's module, not the connection's.
"""

from __future__ import annotations

import asyncio

import pytest
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser, _AsyncRESP3Parser
from redis.utils import HIREDIS_AVAILABLE

from gateway.state.outage import CAUGHT, is_outage

# Each parser's own first read from the stream.
READS = [
    (_AsyncRESP2Parser, "_readline"),
    (_AsyncRESP3Parser, "_readline"),
    (_AsyncHiredisParser, "read_from_socket"),
]


def test_hiredis_parses_replies() -> None:
    assert HIREDIS_AVAILABLE  # pyproject.toml depends on it


@pytest.mark.parametrize(("parser_class", "read"), READS)
async def test_a_read_without_a_stream_is_an_outage(parser_class: type, read: str) -> None:
    parser = parser_class(socket_read_size=65536)
    parser._stream = None  # as after the connection dropped its reader
    with pytest.raises(CAUGHT) as caught:
        await asyncio.wait_for(getattr(parser, read)(), 5)
    assert isinstance(caught.value, AttributeError)
    assert is_outage(caught.value)
