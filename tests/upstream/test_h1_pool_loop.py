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
SHORT = aiohttp.ClientTimeout(sock_connect=2.0, sock_read=0.4)


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


async def test_one_read_timer_serves_a_connection_across_requests() -> None:
    pool = h1.Pool(limit=4, keepalive_s=30.0)
    async with Server(lambda n: whole(b'{"n":%d}' % n)) as server:
        await _post_and_release(pool, server.url)
        conn = pool._idle[h1.origin(server.url).key][0]
        timer = conn._timer
        assert timer is not None and not timer.cancelled()
        for n in range(2, 6):
            assert await _post_and_release(pool, server.url) == b'{"n":%d}' % n
        assert conn._timer is timer and not timer.cancelled()  # not one per request
        assert server.connections == 1
    await pool.aclose()
    assert conn._timer is None and timer.cancelled()  # closed: the timer goes with it


async def test_a_shorter_read_timeout_after_a_longer_one_still_fires_on_time() -> None:
    pool = h1.Pool(limit=4, keepalive_s=30.0)
    long = aiohttp.ClientTimeout(sock_connect=2.0, sock_read=30.0)
    short = aiohttp.ClientTimeout(sock_connect=2.0, sock_read=0.2)
    async with Server(lambda n: whole(b"{}") if n == 1 else None) as server:
        reply = await pool.request(server.url, b"{}", HEADERS, long)
        while await reply.readany():
            pass
        reply.release()
        started = asyncio.get_running_loop().time()
        with pytest.raises(aiohttp.SocketTimeoutError):
            await pool.request(server.url, b"{}", HEADERS, short)
        assert asyncio.get_running_loop().time() - started < 2.0
    await pool.aclose()


async def test_a_wait_begun_after_the_timer_was_armed_gets_its_whole_timeout() -> None:
    # The first request's wait armed the timer for its own deadline; the next wait runs
    # past that deadline (a slow reply within its own timeout): the timer, firing early
    # for it, re-arms instead of failing it.
    pool = h1.Pool(limit=4, keepalive_s=30.0)
    async with Server(lambda n: whole(b'{"n":%d}' % n)) as server:
        reply = await pool.request(server.url, b"{}", HEADERS, SHORT)  # timer due in 0.4 s
        while await reply.readany():
            pass
        reply.release()
        await asyncio.sleep(0.2)
        conn = await pool.acquire(h1.origin(server.url), 2.0)
        arrives = asyncio.get_running_loop().call_later(  # ~0.55 s: past the first
            0.35,
            conn.data_received,
            whole(b'{"n":2}'),  # deadline, within this one (0.6 s)
        )
        await conn.wait(SHORT.sock_read)
        arrives.cancel()
        assert conn.headers_done and conn.status == 200
        conn.close()
    await pool.aclose()
