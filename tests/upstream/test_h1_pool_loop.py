"""h1's pool hands out a kept-alive connection without asking asyncio for the running loop.

`asyncio.get_running_loop()` is a getpid syscall per call on CPython 3.11 (its fork check):
the pool reads the clock of the loop the connection was made on instead. The expiry the
clock decides still holds.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gateway.upstream import h1
from tests.upstream.test_h1 import Server, whole

HEADERS = {"content-type": "application/json"}
TIMEOUT = aiohttp.ClientTimeout(sock_connect=2.0, sock_read=5.0)


async def _post_and_release(pool: h1.Pool, url: str) -> bytes:
    reply = await pool.request(url, b"{}", HEADERS, TIMEOUT)
    body = b""
    while piece := await reply.readany():
        body += piece
    reply.release()
    return body


def _refuse_running_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> asyncio.AbstractEventLoop:
        raise AssertionError("the pool asked for the running loop")

    monkeypatch.setattr(asyncio, "get_running_loop", refused)


async def test_a_pooled_connection_is_taken_on_its_own_loop_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = h1.Pool(limit=4, keepalive_s=30.0)
    async with Server(lambda n: whole(b'{"n":%d}' % n)) as server:
        assert await _post_and_release(pool, server.url) == b'{"n":1}'
        with monkeypatch.context() as patched:
            _refuse_running_loop(patched)
            conn = await pool.acquire(h1.origin(server.url), 2.0)  # no await suspends here
        assert not conn.lost and pool.in_use() == 1
        conn.close()
        assert server.connections == 1
    await pool.aclose()


async def test_an_expired_pooled_connection_is_closed_and_a_new_one_opened() -> None:
    pool = h1.Pool(limit=4, keepalive_s=0.05)
    async with Server(lambda n: whole(b'{"n":%d}' % n)) as server:
        await _post_and_release(pool, server.url)
        stale = pool._idle[h1.origin(server.url).key][0]
        stale.idle_since -= 1.0  # idle past its keep-alive, by its loop's clock
        assert await _post_and_release(pool, server.url) == b'{"n":2}'
        assert stale.transport is not None and stale.transport.is_closing()
        assert server.connections == 2
    await pool.aclose()
