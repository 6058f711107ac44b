"""The shared state's batch packs its commands as redis-py would have sent them.

gateway/state/batch.py writes a batch with hiredis (gateway/state/connection.py)'s packer instead of redis-py's
pipeline; the bytes on the wire must be the ones redis-py's own packer makes for the
same words, and a word hiredis refuses must meet redis-py's refusal (a `DataError`, which
the state's fallback treats as Redis being away), not a `TypeError` from hiredis.
"""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from gateway.state import connection as wire

COMMANDS = [
    ("EVALSHA", "a" * 40, 2, "ns:prefix:task:t1", "ns:prefix:caller:x", b'{"n":1}', 4, 600),
    ("GET", "ns:task:t1:effort"),
    ("SET", "ns:task:t1:effort", "high", "EX", 600, "NX"),
    ("SET", "ns:task:t1:owner", "team-é", "EX", 1, "NX", "GET"),
    ("EVALSHA", "b" * 40, 1, "ns:task-cost:t", 2**70, 0, -5),
    ("GET", b"\xff\x00raw"),
]


def test_hiredis_packs_the_bytes_redis_py_packs() -> None:
    assert wire._hiredis_pack is not None  # a dependency: its packer is the one in use
    connection = Connection()  # never connected: packing needs no socket
    ours = b"".join(wire.pack(connection, COMMANDS))
    assert ours == b"".join(connection.pack_commands(COMMANDS))


def test_a_word_hiredis_refuses_meets_redis_py_s_refusal() -> None:
    with pytest.raises(DataError):
        wire.pack(Connection(), [("GET", "k"), ("SET", "k", True)])
