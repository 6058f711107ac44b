"""Errors in Anthropic's shape, for the clients of `/v1/messages` (the anthropic SDK, Claude Code).

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."},
     "request_id": "req-..."}

The type follows the HTTP status as Anthropic's own API does (docs.claude.com/en/api/errors);
the status is the gateway's, so a client's retry logic sees what an OpenAI client would.
A stream that fails after it started ends with one `event: error` carrying the same object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.responses import JSONResponse

from gateway.errors import MAX_MESSAGE_CHARS, FareboxError, send_closing, send_error

MESSAGES_PATH = "/v1/messages"

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def is_messages_path(path: str) -> bool:
    """Whether `path` is one of the Messages API's (answered in Anthropic's error shape)."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def anthropic_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def anthropic_error_body(error: FareboxError, request_id: str | None = None) -> dict[str, Any]:
    """The error object an Anthropic client parses."""
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": anthropic_type(error.status_code), "message": message},
    }
    if request_id is not None:
        body["request_id"] = request_id
    return body


def anthropic_error_bytes(error: FareboxError, request_id: str | None = None) -> bytes:
    return orjson.dumps(anthropic_error_body(error, request_id))


def anthropic_error_response(error: FareboxError, request_id: str | None = None) -> JSONResponse:
    """The whole HTTP answer, with the headers the error carries (retry-after, ...)."""
    headers = getattr(error, "headers", None) or None
    body = anthropic_error_body(error, request_id)
    return JSONResponse(body, status_code=error.status_code, headers=headers)


def anthropic_stream_error_event(error: FareboxError, request_id: str | None = None) -> bytes:
    """The SSE event that ends a Messages stream which failed after it started."""
    return b"event: error\ndata: " + anthropic_error_bytes(error, request_id) + b"\n\n"


async def send_path_error(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    error: FareboxError,
    path: str,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer `error` on a raw ASGI `send` and close the connection, in the shape the
    clients of `path` parse: Anthropic's on the Messages API's paths, OpenAI's elsewhere."""
    if not is_messages_path(path):
        await send_error(send, error, extra_headers)
        return
    await send_closing(send, error.status_code, anthropic_error_bytes(error), extra_headers)
