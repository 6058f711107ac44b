"""OpenAI-compatible upstreams (vLLM, SGLang, OpenAI) over one pooled HTTP client.

The body goes out as the bytes the pipeline hands over (the client's own bytes when
nothing had to change); streamed replies come back event by event, untouched.

Streams ask for `accept-encoding: identity`: a compressing upstream buffers its output
to fill compression blocks, which holds tokens back, and SSE chunks are too small to
gain much. An upstream that compresses anyway is decoded (aiohttp decodes as it reads),
so the client always gets plain SSE; whole replies keep the client library's default
`accept-encoding` (big JSON compresses well) and are decoded as they are read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import lru_cache, partial

from gateway.upstream import conform, failures, replies
from gateway.upstream.aio import Timeouts
from gateway.upstream.base import UpstreamCall, UpstreamReply
from gateway.upstream.http_stream import (
    HttpClient,
    HttpRequest,
    SseStream,
    client_timeout,
    open_reply,
    response_headers,
    whole_reply,
)

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""A whole reply larger than this, once decoded, is refused (a gzip bomb, a runaway)."""
MAX_ERROR_BYTES = 1024 * 1024
"""Of an error reply only the message is used: the rest is not read."""
WRITE_CHUNK = 256 * 1024
"""A body larger than this is written upstream in pieces of this size."""


@lru_cache(maxsize=64)
def _timeout(connect: float, read: float) -> Timeouts:
    return client_timeout(connect, read)  # a handful of distinct limits: built once each


def call_timeout(call: UpstreamCall) -> Timeouts:
    """A streamed read waits at most the idle limit between events; a whole reply
    arrives in one read, so it gets the first-token limit."""
    read = call.timeouts.idle_stream if call.stream else call.timeouts.first_token
    return _timeout(call.timeouts.connect, read)


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    """The body in `WRITE_CHUNK` pieces, each copied only when it is its turn."""
    view = memoryview(body)
    for start in range(0, len(view), WRITE_CHUNK):
        yield bytes(view[start : start + WRITE_CHUNK])


def sized_body(body: bytes, headers: dict[str, str]) -> bytes | AsyncIterator[bytes]:
    """The body as sent: in pieces (its length declared, so no chunked framing) when large.

    One write of megabytes copies them into the socket's buffer in one go on the loop.
    """
    if len(body) <= WRITE_CHUNK:
        return body
    headers["content-length"] = str(len(body))
    return _chunks(body)


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

    hands_over_while_waiting = True  # base.HANDS_OVER: `while_waiting` reaches h1

    def __init__(self, client: HttpClient):
        self._client = client

    def _request(self, call: UpstreamCall) -> HttpRequest:
        url = call.base_url.rstrip("/") + "/chat/completions"
        headers = _headers(call)
        body = sized_body(call.body, headers)
        timeout = call_timeout(call)
        return HttpRequest(url, body, headers, timeout, (call.api_key,), call.while_waiting)

    async def complete(self, call: UpstreamCall) -> UpstreamReply:
        where = failures.describe_upstream(call.alias, call.base_url)
        limits = (MAX_REPLY_BYTES, MAX_ERROR_BYTES)
        response, body = await whole_reply(self._client, self._request(call), where, limits)
        payload = replies.reply_object(body, where)
        body, payload, rendered = conform.conformed_reply(body, payload)  # vLLM's nulls
        read_headers = partial(response_headers, response)  # read on a litellm route only
        return UpstreamReply(
            response.status, body, payload=payload, read_headers=read_headers, rendered=rendered
        )

    async def open_stream(self, call: UpstreamCall) -> SseStream:
        where = failures.describe_upstream(call.alias, call.base_url)
        response = await open_reply(self._client, self._request(call), where, MAX_ERROR_BYTES)
        return SseStream(response, where)

    async def aclose(self) -> None:
        await self._client.aclose()
