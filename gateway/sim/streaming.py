"""A server-sent-events response that notices disconnects and can cut itself off.

Not Starlette's StreamingResponse: we must know for certain when the client
went away (to flag the request as cancelled), and fault injection needs to
abort a stream after N chunks without a clean end.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.sim.records import RequestRecord
from gateway.sim.timing import unless_disconnected

SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"


class SimulatedDropError(Exception):
    """Raised to abort a response mid-way; the server then closes the connection."""


class EventStream(Response):
    """Send SSE chunks from an async generator, recording cancellation and completion."""

    media_type = SSE_MEDIA_TYPE

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        record: RequestRecord,
        *,
        headers: Mapping[str, str],
        drop_after_chunks: int | None = None,
    ) -> None:
        # Like StreamingResponse, skip Response.__init__ so no content-length is set.
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache"})
        self.events = events
        self.record = record
        self.drop_after_chunks = drop_after_chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        finished = await unless_disconnected(self._pump(send), receive)
        if not finished:
            self.record.cancelled = True

    async def _pump(self, send: Send) -> None:
        sent = 0
        async with aclosing(self.events) as events:
            async for chunk in events:
                if self.drop_after_chunks is not None and sent >= self.drop_after_chunks:
                    self.record.dropped = True
                    raise SimulatedDropError(
                        f"simulated fault: connection dropped after {sent} chunks"
                    )
                try:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except OSError:
                    # ASGI 2.4 servers raise here once the client has gone.
                    self.record.cancelled = True
                    return
                sent += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self.record.completed = True
