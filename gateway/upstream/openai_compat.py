"""OpenAI-compatible upstreams (vLLM, SGLang, OpenAI) over one pooled HTTP client.

The body goes out as the bytes the pipeline hands over (the client's own bytes when
nothing had to change); streamed replies come back event by event, untouched.

Streams ask for `accept-encoding: identity`: a compressing upstream buffers its output
to fill compression blocks, which holds tokens back, and SSE chunks are too small to
gain much. An upstream that compresses anyway is decoded (`aiter_bytes`, never the raw
bytes), so the client always gets plain SSE; whole replies keep httpx's default
`accept-encoding` (big JSON compresses well) and are decoded by `.content`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from gateway.upstream import conform, failures, replies
from gateway.upstream.base import UpstreamCall, UpstreamReply
from gateway.upstream.http_stream import SseStream, read_at_most, whole_reply

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""A whole reply larger than this, once decoded, is refused (a gzip bomb, a runaway)."""
MAX_ERROR_BYTES = 1024 * 1024
"""Of an error reply only the message is used: the rest is not read."""
WRITE_CHUNK = 256 * 1024
"""A body larger than this is written upstream in pieces of this size."""


def _timeout(call: UpstreamCall) -> httpx.Timeout:
    # A streamed read waits at most the idle limit between events; a whole reply
    # arrives in one read, so it gets the first-token limit.
    read = call.timeouts.idle_stream if call.stream else call.timeouts.first_token
    return httpx.Timeout(connect=call.timeouts.connect, read=read, write=30.0, pool=30.0)


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    """The body in `WRITE_CHUNK` pieces, each copied only when it is its turn."""
    view = memoryview(body)
    for start in range(0, len(view), WRITE_CHUNK):
        yield bytes(view[start : start + WRITE_CHUNK])


def _headers(call: UpstreamCall) -> dict[str, str]:
    headers = {"content-type": "application/json", **call.extra_headers}
    if call.stream:
        headers["accept"] = "text/event-stream"
        headers["accept-encoding"] = "identity"
    if call.api_key:
        headers["authorization"] = f"Bearer {call.api_key}"
    return headers


class OpenAICompatUpstream:
    """Sends chat completions to `{base_url}/chat/completions`."""

    def __init__(self, client: httpx.AsyncClient):
        self._client = client

    def _request(self, call: UpstreamCall) -> httpx.Request:
        url = call.base_url.rstrip("/") + "/chat/completions"
        headers = _headers(call)
        content: bytes | AsyncIterator[bytes] = call.body
        if len(call.body) > WRITE_CHUNK:
            # One write of megabytes copies them into the socket's buffer in one go on
            # the loop; chunks (with the length declared, so no chunked framing) don't.
            headers["content-length"] = str(len(call.body))
            content = _chunks(call.body)
        return self._client.build_request(
            "POST", url, content=content, headers=headers, timeout=_timeout(call)
        )

    async def complete(self, call: UpstreamCall) -> UpstreamReply:
        where = failures.describe_upstream(call.alias, call.base_url)
        limits = (MAX_REPLY_BYTES, MAX_ERROR_BYTES)
        request = self._request(call)
        response, body = await whole_reply(self._client, request, where, call.api_key, limits)
        payload = replies.reply_object(body, where)
        body, payload = conform.conformed_reply_bytes(body, payload)  # vLLM's nulls
        return UpstreamReply(response.status_code, body, dict(response.headers), payload)

    async def open_stream(self, call: UpstreamCall) -> SseStream:
        where = failures.describe_upstream(call.alias, call.base_url)
        try:
            response = await self._client.send(self._request(call), stream=True)
        except httpx.HTTPError as exc:
            raise failures.from_transport_error(exc, where) from exc
        if response.status_code >= 400:
            try:
                body, _ = await read_at_most(response, MAX_ERROR_BYTES)
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
            raise failures.from_status(
                response.status_code, body, where, [call.api_key], dict(response.headers)
            )
        return SseStream(response, where)

    async def aclose(self) -> None:
        await self._client.aclose()
