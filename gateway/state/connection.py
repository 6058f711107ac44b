"""A command batch's exchange on its pooled connection, below redis-py's pipeline:
commands packed by hiredis in C, written without a timer each, a connection Redis closed
while idle connected again (gateway/state/batch.py says why each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

Command = tuple[Any, ...]
"""One command's words: `("GET", key)`; str, bytes and int (as redis-py encodes them)."""


def _hiredis_packer() -> Callable[[Command], bytes] | None:
    """hiredis's `pack_command` (a dependency); None without it: redis-py's packer then."""
    try:
        from hiredis import pack_command
    except ImportError:
        return None
    return pack_command


_hiredis_pack = _hiredis_packer()


async def usable(connection: AbstractConnection) -> None:
    """Connect `connection` again if Redis closed it while it was idle (its `timeout`,
    CLIENT KILL, a restart, a proxy that cuts idle connections) or a reply is left unread.

    redis-py's pool makes this check only where its maintenance notifications are off, and
    they are on by default ("auto", even against a Redis that refuses them): a pooled
    connection Redis had closed failed its next call ("Connection closed by server").
    """
    if connection.is_connected:  # (`connect` goes through redis-py's retry even then)
        try:
            if not await connection.can_read():  # EOF, or bytes nobody asked for
                return
        except (RedisConnectionError, OSError):  # redis-py closed it already
            pass
        await connection.disconnect()
    await connection.connect()


async def send_unbounded(connection: AbstractConnection, packed: list[bytes]) -> None:
    """`send_packed_command` without its socket timeout, under the batch's deadline: with
    one, redis-py wraps the write in `asyncio.wait_for`, a task and a timer per write."""
    socket_timeout, connection.socket_timeout = connection.socket_timeout, None
    try:
        await connection.send_packed_command(packed)
    finally:
        connection.socket_timeout = socket_timeout


def pack(connection: AbstractConnection, commands: Sequence[Command]) -> list[bytes]:
    """The commands in Redis's protocol: hiredis's packer, or redis-py's for what hiredis
    refuses (a bool, say, which redis-py refuses with its own `DataError`)."""
    if _hiredis_pack is not None:
        try:
            return [b"".join([_hiredis_pack(command) for command in commands])]
        except TypeError:
            pass
    return connection.pack_commands(commands)
