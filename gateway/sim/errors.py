"""Error bodies in the exact shapes vLLM and Anthropic send.

vLLM:       {"error": {"message", "type", "param", "code": <int status>}}
            and, from its --api-key middleware, a bare {"error": "Unauthorized"}.
Anthropic:  {"type": "error", "error": {"type", "message"}, "request_id"}
"""

from __future__ import annotations

import secrets
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse

# vLLM names the errors it raises itself; anything else gets the HTTP phrase,
# as its generic HTTPException handler does.
_VLLM_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class SimRequestError(Exception):
    """A request the simulator refuses, carrying the status and wire-level detail."""

    def __init__(
        self, status: int, message: str, *, kind: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param


def vllm_type(status: int) -> str:
    """Return the error type string vLLM uses for a status."""
    if status in _VLLM_TYPES:
        return _VLLM_TYPES[status]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def anthropic_type(status: int) -> str:
    """Return the Anthropic error type for a status."""
    return _ANTHROPIC_TYPES.get(status, "api_error")


def vllm_error_body(
    status: int, message: str, kind: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """Return vLLM's error body; note that code is the integer status."""
    return {
        "error": {
            "message": message,
            "type": kind or vllm_type(status),
            "param": param,
            "code": status,
        }
    }


def anthropic_error_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    """Return Anthropic's error body."""
    return {
        "type": "error",
        "error": {"type": kind or anthropic_type(status), "message": message},
        "request_id": new_request_id(),
    }


def new_request_id() -> str:
    """Return a fresh Anthropic-style request id."""
    return "req_sim" + secrets.token_hex(12)


def vllm_error(error: SimRequestError, headers: dict[str, str] | None = None) -> JSONResponse:
    """Render a refusal as vLLM would."""
    body = vllm_error_body(error.status, error.message, error.kind, error.param)
    return JSONResponse(body, status_code=error.status, headers=headers)


def anthropic_error(error: SimRequestError, headers: dict[str, str] | None = None) -> JSONResponse:
    """Render a refusal as Anthropic would."""
    body = anthropic_error_body(error.status, error.message, error.kind)
    return JSONResponse(body, status_code=error.status, headers=headers)


def describe_validation(exc: ValidationError) -> tuple[str, str | None]:
    """Return a one-line message and the dotted path of the first invalid field."""
    first = exc.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    message = f"{path}: {first['msg']}" if path else str(first["msg"])
    return message, path or None
