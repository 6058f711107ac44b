"""Errors the gateway returns, always in OpenAI's shape.

    FareboxError                       any error a client may see
    ├── InvalidRequestError     400    malformed JSON, schema violation (names the field)
    │   ├── UnsupportedParameterError 400  a field the provider cannot honour (names it)
    │   ├── ModelNotFoundError  404    the model is not in the configuration
    │   ├── BodyTooLargeError   413    body over FAREBOX_MAX_BODY_BYTES (or _API_BODY_BYTES)
    │   ├── RequestTimeoutError 408    headers or body not received in time (slow client)
    │   └── BadHttpError        400    malformed HTTP (answered by the protocol, not the app)
    ├── AuthenticationError     401    no key, an unknown, revoked or expired key
    ├── PermissionDeniedError   403    a valid key asking for what it may not (names why)
    ├── InsufficientQuotaError  429    a budget has no room for the request's worst case
    ├── RateLimitExceededError  429    over a per-minute limit (Retry-After)
    ├── BudgetStateUnavailableError 503  a fail_closed budget's Redis is unreachable
    ├── OverloadedError         503    over FAREBOX_MAX_CONNECTIONS open connections
    ├── ShuttingDownError       503    cut at the end of the shutdown grace period
    ├── LedgerUnavailableError  503    the ledger database did not answer a read (Retry-After)
    └── UpstreamError                  the upstream could not serve the request
        ├── UpstreamUnreachableError  502  connection refused, DNS, reset before a reply
        │   └── CircuitOpenError      503  the upstream's breaker is open (not sent)
        ├── UpstreamTimeoutError      504  connect, first-token or idle-stream timeout
        ├── UpstreamProtocolError     502  a reply the gateway cannot read: not JSON, wrong
        │                                  shapes, an oversized SSE event, bad compression
        └── UpstreamStatusError       (relayed) the upstream answered 4xx/5xx

Every error renders through `error_body`, so there is one error shape, never a
FastAPI `{"detail": ...}` beside it. Messages name the upstream, never a secret. Every
response, errors included, carries `x-request-id` (`gateway.request_id`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import orjson


class FareboxError(Exception):
    """Base of every error the gateway turns into an HTTP response."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        """The OpenAI error object for this error."""
        return error_body(self.message, self.error_type, self.param, self.code)


class InvalidRequestError(FareboxError):
    status_code = 400
    error_type = "invalid_request_error"


class UnsupportedParameterError(InvalidRequestError):
    """A request field the route's provider has no place for, where dropping it would show."""

    code = "unsupported_parameter"


class ModelNotFoundError(InvalidRequestError):
    status_code = 404
    code = "model_not_found"


class BodyTooLargeError(InvalidRequestError):
    status_code = 413
    code = "request_too_large"


class RequestTimeoutError(InvalidRequestError):
    status_code = 408
    code = "request_timeout"


class BadHttpError(InvalidRequestError):
    code = "malformed_http"


class AuthenticationError(FareboxError):
    """No credential, or one that is not (or no longer) valid. Never says which key."""

    status_code = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDeniedError(FareboxError):
    """A valid credential asking for what it may not: the message says what and why."""

    status_code = 403
    error_type = "permission_error"
    code = "permission_denied"


class InsufficientQuotaError(FareboxError):
    """A budget of the key, team or project cannot hold the request's worst case.

    OpenAI's own type and code for an exhausted quota; the message names the budget,
    what is spent and held, and when it resets.
    """

    status_code = 429
    error_type = "insufficient_quota"
    code = "insufficient_quota"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.headers = headers or {}


class RateLimitExceededError(FareboxError):
    """Over a per-minute limit: `error_type` is `requests` or `tokens`, as OpenAI's are."""

    status_code = 429
    error_type = "requests"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, error_type: str, headers: dict[str, str]):
        super().__init__(message)
        self.error_type = error_type
        self.headers = headers


class BudgetStateUnavailableError(FareboxError):
    """Redis cannot be reached and a budget that applies is set to fail closed."""

    status_code = 503
    code = "budget_state_unavailable"

    def __init__(self, message: str, *, headers: dict[str, str]):
        super().__init__(message)
        self.headers = headers


class OverloadedError(FareboxError):
    status_code = 503
    code = "overloaded"


class ShuttingDownError(FareboxError):
    """A request cut at the end of the shutdown grace period, before it could answer."""

    status_code = 503
    code = "shutting_down"


class LedgerUnavailableError(FareboxError):
    """A ledger read failed because the database is down; writes wait in the spool."""

    status_code = 503
    code = "ledger_unavailable"
    headers: ClassVar[dict[str, str]] = {"Retry-After": "5"}


class UpstreamError(FareboxError):
    """The chosen upstream failed; `retryable` says whether another attempt may help."""

    status_code = 502
    error_type = "upstream_error"
    retryable = True


class UpstreamUnreachableError(UpstreamError):
    status_code = 502
    code = "upstream_unreachable"


class CircuitOpenError(UpstreamUnreachableError):
    """The upstream's breaker is open: no request is sent until its cool-down ends."""

    status_code = 503
    code = "circuit_open"


class UpstreamTimeoutError(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class UpstreamProtocolError(UpstreamError):
    """The upstream answered, but not in a form the gateway can read or relay."""

    status_code = 502
    code = "upstream_bad_reply"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status, relayed with the same status."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message, param=param, code=code)
        self.status_code = status_code
        self.error_type = error_type or _type_for_status(status_code)
        self.retryable = status_code in (408, 409, 429) or status_code >= 500
        self.headers = headers or {}


def _type_for_status(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status < 500:
        return "invalid_request_error"
    return "upstream_error"


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    """Render OpenAI's error object; integer codes (vLLM's) become strings."""
    return {
        "error": {
            "message": _cap(message, MAX_MESSAGE_CHARS),
            "type": error_type,
            "param": None if param is None else _cap(param, MAX_PARAM_CHARS),
            "code": None if code is None else str(code),
        }
    }


# A message may quote what the client sent (a tier, a model, a key): never echo megabytes.
MAX_MESSAGE_CHARS = 2000
MAX_PARAM_CHARS = 200


def _cap(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def error_bytes(error: FareboxError) -> bytes:
    """The JSON body of an error response."""
    return orjson.dumps(error.body())


async def send_error(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    error: FareboxError,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer `error` on a raw ASGI `send` and close the connection (outside any route).

    Inside the app, `RequestIdMiddleware` adds `x-request-id`; a caller outside it (the
    connection cap) passes the header in `extra_headers`.
    """
    await send_closing(send, error.status_code, error_bytes(error), extra_headers)


async def send_closing(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    status: int,
    body: bytes,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer `status` with the JSON `body` on a raw ASGI `send`, and close the connection."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def stream_error_event(error: FareboxError) -> bytes:
    """The SSE event that ends a stream which failed after it started."""
    return b"data: " + error_bytes(error) + b"\n\ndata: [DONE]\n\n"
