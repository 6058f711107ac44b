"""OpenAI-wire routes other than chat: `POST {base_url}/completions`, `/embeddings`, `/responses`.

The client's bytes go out with only the stages' edits; replies are checked to be JSON
objects and passed on as sent; streams are relayed event by event. The route's key goes
in `Authorization: Bearer`, never the client's.
"""

from __future__ import annotations

from gateway.upstream import failures
from gateway.upstream.anthropic_messages import json_object
from gateway.upstream.base import UpstreamCall, UpstreamReply
from gateway.upstream.http_stream import (
    HttpClient,
    HttpRequest,
    SseStream,
    open_reply,
    response_headers,
    whole_reply,
)
from gateway.upstream.openai_compat import (
    MAX_ERROR_BYTES,
    MAX_REPLY_BYTES,
    call_timeout,
    sized_body,
)

COMPLETIONS = "/completions"
EMBEDDINGS = "/embeddings"


class OpenAIPathUpstream:
    """Sends calls to one path under an OpenAI-compatible route's base URL."""

    hands_over_while_waiting = True  # base.HANDS_OVER: `while_waiting` reaches h1

    def __init__(self, client: HttpClient, path: str):
        self._client = client
        self._path = path

    def _request(self, call: UpstreamCall) -> HttpRequest:
        headers = {"content-type": "application/json", **call.extra_headers}
        if call.stream:
            headers["accept"] = "text/event-stream"
            headers["accept-encoding"] = "identity"
        if call.api_key:
            headers["authorization"] = f"Bearer {call.api_key}"
        body = sized_body(call.body, headers)
        url = call.base_url.rstrip("/") + self._path
        timeout = call_timeout(call)
        return HttpRequest(url, body, headers, timeout, (call.api_key,), call.while_waiting)

    async def complete(self, call: UpstreamCall) -> UpstreamReply:
        """A whole reply, checked to be a JSON object."""
        where = failures.describe_upstream(call.alias, call.base_url)
        limits = (MAX_REPLY_BYTES, MAX_ERROR_BYTES)
        response, body = await whole_reply(self._client, self._request(call), where, limits)
        payload = json_object(body, where)
        return UpstreamReply(response.status, body, response_headers(response), payload)

    async def open_stream(self, call: UpstreamCall) -> SseStream:
        where = failures.describe_upstream(call.alias, call.base_url)
        response = await open_reply(self._client, self._request(call), where, MAX_ERROR_BYTES)
        return SseStream(response, where)
