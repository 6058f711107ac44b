"""`SseEvents.next_ready`: a stream's next event without a wait, when its bytes are here.

`chat.first_event` can take the first event this way and skip its deadline; wherever
`next_ready` answers None, `anext` must give exactly what it gave before (the event, the
end, or the error), so each case below reads the rest of the stream the usual way too.
"""

from __future__ import annotations

import asyncio
import gzip

import pytest

from gateway.errors import UpstreamProtocolError
from gateway.upstream import http_stream as hs
from gateway.upstream.sse import EventSplitter
from tests.upstream.test_h1 import WHERE, Server, chunked, request

EVENTS = [b'data: {"n":%d}\n\n' % n for n in range(5)] + [b"data: [DONE]\n\n"]


async def _open(client: hs.HttpClient, server: Server) -> hs.SseStream:
    return hs.SseStream(await hs.open_reply(client, request(server.url), WHERE, 1024), WHERE)


async def test_a_stream_sent_with_its_head_gives_its_first_event_at_once() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked(EVENTS)) as server:
        for _ in range(3):
            stream = await _open(client, server)
            events = stream.events()
            await asyncio.sleep(0.01)  # the whole reply is read by now
            first = hs.ready_event(events)
            assert first == EVENTS[0]
            assert [first, *events.ready()] == EVENTS
            assert events.delivered_final()
            await stream.aclose()
        assert server.connections == 1  # read to its end: reused
    await client.aclose()


async def test_next_ready_gives_every_event_then_leaves_the_end_to_anext() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked(EVENTS)) as server:
        stream = await _open(client, server)
        events = stream.events()
        await asyncio.sleep(0.01)
        got = []
        while (event := events.next_ready()) is not None:
            got.append(event)
        assert got == EVENTS
        with pytest.raises(StopAsyncIteration):
            await events.__anext__()
        await stream.aclose()
    await client.aclose()


async def test_a_partial_event_is_none_and_anext_gives_it_at_the_end() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked([b'data: {"cut":1}'])) as server:
        stream = await _open(client, server)
        events = stream.events()
        await asyncio.sleep(0.01)
        assert events.next_ready() is None  # its blank line never came
        assert [e async for e in events] == [b'data: {"cut":1}']
        await stream.aclose()
    await client.aclose()


async def test_an_event_over_the_limit_is_raised_by_the_next_read() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked([b"data: " + b"x" * 64 + b"\n\n"])) as server:
        stream = await _open(client, server)
        events = stream.events()
        events._splitter = EventSplitter(32, WHERE)
        await asyncio.sleep(0.01)
        assert events.next_ready() is None
        with pytest.raises(UpstreamProtocolError, match="over 32 bytes"):
            await events.__anext__()
        await stream.aclose()
    await client.aclose()


async def test_a_compressed_stream_and_other_sources_are_left_to_anext() -> None:
    body = gzip.compress(b"".join(EVENTS))
    reply = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    ) + body
    client = hs.HttpClient()
    async with Server(lambda n: reply) as server:
        stream = await _open(client, server)
        events = stream.events()
        await asyncio.sleep(0.01)
        assert events.next_ready() is None  # decoded by `readany` only
        assert [e async for e in events] == EVENTS
        await stream.aclose()
    await client.aclose()

    async def plain():  # type: ignore[no-untyped-def]
        yield EVENTS[0]

    assert hs.ready_event(plain()) is None


async def test_nothing_read_yet_is_none_and_anext_gives_it() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked(EVENTS)) as server:
        stream = await _open(client, server)
        events = stream.events()
        await asyncio.sleep(0.01)
        conn = stream._response._conn  # type: ignore[union-attr]
        assert conn is not None
        held = conn.take()  # as if the body had not arrived yet
        assert held and events.next_ready() is None
        conn.body.append(held)
        assert await events.__anext__() == EVENTS[0]
        assert events.ready() == EVENTS[1:]
        await stream.aclose()
    await client.aclose()
