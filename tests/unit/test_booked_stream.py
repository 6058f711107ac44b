"""`BookedStreamResponse`: who watches for the client leaving, and when.

A body that never waits on its upstream (a stream read at once) is sent and booked with no
watcher at all; a body that waits has one from its first wait, and a client who leaves
then stops it and has it booked as cancelled, once. Driven through the ASGI interface
with plain `receive` and `send` callables, as the server calls them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import Response

from gateway.errors import FareboxError
from gateway.pipeline.booked_stream import BookedStream, BookedStreamResponse


class Body(BookedStream):
    """Yields `parts`; before each part after the first it waits as a relay waits, if told."""

    def __init__(self, parts: list[bytes], upstream: asyncio.Event | None = None) -> None:
        self.parts, self.upstream = parts, upstream
        self.booked: list[bool] = []  # `cancelled` of each booking

    async def _run(self) -> AsyncGenerator[bytes, None]:
        cancelled = False
        try:
            for index, part in enumerate(self.parts):
                if index and self.upstream is not None:
                    self._will_wait()
                    await self.upstream.wait()
                yield part
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        finally:
            self.settling = True
            await self._settle(None, cancelled)

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        if not self.booked:
            self.booked.append(cancelled)


class Client:
    """The server's side: counts `receive` calls; `leave()` makes the pending one return."""

    def __init__(self) -> None:
        self.receives = 0
        self.sent: list[dict[str, Any]] = []
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


SCOPE: dict[str, Any] = {"type": "http"}


async def test_a_stream_read_at_once_is_sent_and_booked_without_a_watcher() -> None:
    body, client = Body([b"data: 1\n\n", b"data: [DONE]\n\n"]), Client()
    tasks = len(asyncio.all_tasks())
    await BookedStreamResponse(body, {})(SCOPE, client.receive, client.send)
    assert client.receives == 0 and len(asyncio.all_tasks()) == tasks
    assert client.body() == b"data: 1\n\ndata: [DONE]\n\n"
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert body.booked == [False]


async def test_a_waiting_stream_is_watched_and_ends_cleanly() -> None:
    upstream = asyncio.Event()
    body, client = Body([b"data: 1\n\n", b"data: 2\n\n"], upstream), Client()
    response = asyncio.create_task(
        BookedStreamResponse(body, {})(SCOPE, client.receive, client.send)
    )
    while client.receives == 0:  # the watcher starts with the body's first wait
        await asyncio.sleep(0)
    upstream.set()
    await response
    assert client.body() == b"data: 1\n\ndata: 2\n\n" and body.booked == [False]
    await asyncio.sleep(0)  # the watcher, cancelled at the end, is gone
    assert len(asyncio.all_tasks()) == 1


async def test_a_client_who_leaves_while_the_stream_waits_stops_it_booked_once() -> None:
    upstream = asyncio.Event()
    body, client = Body([b"data: 1\n\n", b"data: 2\n\n"], upstream), Client()
    response = asyncio.create_task(
        BookedStreamResponse(body, {})(SCOPE, client.receive, client.send)
    )
    while client.receives == 0:
        await asyncio.sleep(0)
    client.gone.set()
    await asyncio.wait_for(response, 5)  # not cancelled itself: the client leaving is no error
    assert not response.cancelled()
    assert client.body() == b"data: 1\n\n" and body.booked == [True]
    assert client.sent[-1]["more_body"] is True  # no end was sent to nobody


def test_the_response_head_is_starlettes() -> None:
    """Its headers are built without Starlette's `init_headers`, to the same bytes."""

    class Starlette(Response):
        media_type = "text/event-stream"

    for headers in ({}, {"x-request-id": "r1", "X-Task-Id": "t é"}, {"Content-Type": "x/y"}):
        reference = Starlette(headers=headers)
        reference.raw_headers = [h for h in reference.raw_headers if h[0] != b"content-length"]
        assert BookedStreamResponse(Body([]), headers).raw_headers == reference.raw_headers
