"""What every HTTP upstream shares: a bounded whole reply and an open SSE stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from gateway.errors import UpstreamProtocolError
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


async def whole_reply(
    client: httpx.AsyncClient,
    request: httpx.Request,
    where: str,
    api_key: str | None,
    limits: tuple[int, int],
) -> tuple[httpx.Response, bytes]:
    """Send `request` and read its whole body, at most `limits` (reply, error) bytes.

    A transport failure, an error status or a reply over its limit raises the upstream
    error the pipeline books; the response comes back closed, with its body.
    """
    reply_limit, error_limit = limits
    try:
        response = await client.send(request, stream=True)
        try:
            limit = error_limit if response.status_code >= 400 else reply_limit
            body, whole = await read_at_most(response, limit)
        finally:
            await response.aclose()
    except httpx.HTTPError as exc:
        raise failures.from_transport_error(exc, where) from exc
    if response.status_code >= 400:
        raise failures.from_status(
            response.status_code, body, where, [api_key], dict(response.headers)
        )
    if not whole:
        message = f"upstream {where} sent a reply over {reply_limit} bytes (decoded)"
        raise UpstreamProtocolError(message)
    return response, body


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
