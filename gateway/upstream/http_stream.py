"""What every HTTP upstream shares: a bounded body read and an open SSE stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from gateway.upstream import failures
from gateway.upstream.sse import iter_events


async def read_at_most(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The decoded body, and whether it was whole: reading stops past `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        parts.append(part)
        size += len(part)
        if size > limit:
            return b"".join(parts)[:limit], False
    return b"".join(parts), True


class SseStream:
    """An open streaming reply; `aclose` also cancels the upstream generation."""

    def __init__(self, response: httpx.Response, where: str):
        self._response = response
        self._where = where
        self.headers = dict(response.headers)

    async def events(self) -> AsyncIterator[bytes]:
        try:
            async for event in iter_events(self._response.aiter_bytes(), where=self._where):
                yield event
        except httpx.HTTPError as exc:
            raise failures.from_transport_error(exc, self._where) from exc

    async def aclose(self) -> None:
        await self._response.aclose()
