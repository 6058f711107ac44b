"""Anthropic's Messages API, spoken natively: the client's bytes out, Anthropic's bytes back.

Used by `/v1/messages` for routes whose provider is `anthropic` (litellm is not involved:
nothing is translated). The request carries the route's provider key in `x-api-key`, never
the client's; `anthropic-version` and `anthropic-beta` are the client's (the policy may add
a beta, as fast mode does). Replies are checked to be JSON objects and passed on as sent.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import UpstreamProtocolError
from gateway.upstream import failures
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

ANTHROPIC_API = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"
MESSAGES, COUNT_TOKENS = "/v1/messages", "/v1/messages/count_tokens"
PASSED_HEADERS = ("anthropic-version", "anthropic-beta")


def messages_url(base_url: str, path: str) -> str:
    """`path` on the route's base URL (with or without its `/v1`), else on Anthropic's."""
    base = (base_url or ANTHROPIC_API).rstrip("/").removesuffix("/v1")
    return base + path


def merged_betas(*values: str | None) -> str:
    """Comma-separated `anthropic-beta` values, each once, in order of appearance."""
    seen: list[str] = []
    for value in values:
        for beta in (value or "").split(","):
            if beta.strip() and beta.strip() not in seen:
                seen.append(beta.strip())
    return ",".join(seen)


def upstream_headers(
    client: dict[str, str], policy: dict[str, str], key: str | None
) -> dict[str, str]:
    """The headers sent upstream: the client's Anthropic headers, the policy's, the route's key."""
    headers = {"content-type": "application/json"}
    headers["anthropic-version"] = client.get("anthropic-version") or DEFAULT_VERSION
    beta = merged_betas(client.get("anthropic-beta"), policy.get("anthropic-beta"))
    if beta:
        headers["anthropic-beta"] = beta
    headers |= {k: v for k, v in policy.items() if k.lower() not in PASSED_HEADERS}
    if key:
        headers["x-api-key"] = key
    return headers


def json_object(body: bytes, where: str) -> dict[str, Any]:
    """A reply's JSON object; anything else is a reply the client cannot use (a 502)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError(f"upstream {where} sent a reply that is not a JSON object")
    return payload


class AnthropicMessagesUpstream:
    """Sends Messages API calls to `{base_url}/v1/messages[/count_tokens]`."""

    hands_over_while_waiting = True  # base.HANDS_OVER: `while_waiting` reaches h1

    def __init__(self, client: HttpClient):
        self._client = client

    def _request(self, call: UpstreamCall, path: str) -> HttpRequest:
        headers = {**call.extra_headers}
        if call.stream:
            headers["accept"] = "text/event-stream"
            headers["accept-encoding"] = "identity"
        body = sized_body(call.body, headers)
        url = messages_url(call.base_url, path)
        timeout = call_timeout(call)
        return HttpRequest(url, body, headers, timeout, (call.api_key,), call.while_waiting)

    async def complete(self, call: UpstreamCall, path: str = MESSAGES) -> UpstreamReply:
        """A whole reply (a message, or a token count), checked to be a JSON object."""
        where = failures.describe_upstream(call.alias, call.base_url or ANTHROPIC_API)
        limits = (MAX_REPLY_BYTES, MAX_ERROR_BYTES)
        request = self._request(call, path)
        response, body = await whole_reply(self._client, request, where, limits)
        payload = json_object(body, where)
        return UpstreamReply(response.status, body, response_headers(response), payload)

    async def open_stream(self, call: UpstreamCall) -> SseStream:
        where = failures.describe_upstream(call.alias, call.base_url or ANTHROPIC_API)
        request = self._request(call, MESSAGES)
        response = await open_reply(self._client, request, where, MAX_ERROR_BYTES)
        return SseStream(response, where)
