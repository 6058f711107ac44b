"""Which exceptions from a Redis call mean "Redis is away" (fall back) and which are bugs."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from redis.exceptions import BusyLoadingError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.state.outage import CAUGHT, is_misshapen_key, is_outage


async def _closed_transport_error() -> RuntimeError:
    """What uvloop (the gateway's loop) raises for a write on a connection it closed."""
    server = await asyncio.start_server(lambda _, peer: peer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.transport.close()
    await asyncio.sleep(0)
    try:
        writer.transport.write(b"PING\r\n")
    except RuntimeError as exc:
        return exc
    finally:
        server.close()
        await server.wait_closed()
    raise AssertionError("uvloop wrote on a closed transport")


@pytest.mark.parametrize(
    "error",
    [RedisConnectionError("refused"), RedisTimeoutError("slow"), TimeoutError(), OSError(104)],
)
def test_redis_and_socket_errors_are_an_outage(error: BaseException) -> None:
    assert isinstance(error, CAUGHT) and is_outage(error)


def test_a_closed_transport_is_an_outage() -> None:
    error = uvloop.run(_closed_transport_error())
    assert str(error).startswith("unable to perform operation on")
    assert isinstance(error, CAUGHT) and is_outage(error)


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ValueError("bad"), KeyError("x")])
def test_other_errors_are_not_hidden(error: BaseException) -> None:
    assert not is_outage(error)


@pytest.mark.parametrize(
    ("error", "misshapen"),
    [
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), True),
        (
            ResponseError("WRONGTYPE Operation against a key ... script: 08a8, on @user_script:1."),
            True,
        ),
        (ResponseError("ERR unknown command 'LRANGEX'"), False),
        (BusyLoadingError("LOADING Redis is loading the dataset in memory"), False),
        (ReadOnlyError("READONLY You can't write against a read only replica."), False),
        (RedisConnectionError("WRONGTYPE in a connection error's text"), False),
    ],
)
def test_only_a_wrongtype_reply_says_a_key_is_misshapen(
    error: BaseException, misshapen: bool
) -> None:
    # A key of another type is Redis answering (not counted as away); a Redis loading its
    # data, a replica that refuses writes, a dead socket are not.
    assert is_misshapen_key(error) is misshapen
    assert is_outage(error)  # what the caller does with it if not misshapen
