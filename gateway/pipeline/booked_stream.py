"""A streamed reply whose attempt is booked exactly once, however the stream ends.

Shared by the chat relay (`relay.Relay`) and the typed-event relays
(`event_relay.EventRelay`): the body's generator books in its `finally`; `close` books a
body that was stopped early or never started, and `BookedStreamResponse` calls it even
when the response could not start (the client left, a header the server refused), when
a plain generator would never run its clean-up and the paid call would leave no row.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import FareboxError


class BookedStream:
    """An SSE body that books its attempt once: `_run` yields it, `_settle` books it."""

    _body: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._body = self._run()
        return self._body

    async def close(self) -> None:
        """Book the attempt if the body did not run to its end (or never started)."""
        if self._body is not None:
            await self._body.aclose()  # a started body books itself in its `finally`
        await self._settle(None, cancelled=True)  # a no-op once booked

    def _run(self) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        raise NotImplementedError


class BookedStreamResponse(StreamingResponse):
    """A streamed reply that books its attempt even if not one byte of it was sent."""

    def __init__(self, body: BookedStream, headers: dict[str, str]) -> None:
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self._booked = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._booked.close()
