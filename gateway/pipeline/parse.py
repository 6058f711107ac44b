"""Stage 1: turn the raw body into a validated request, or a 400 that names the field."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from gateway.errors import BodyTooLargeError, InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.schemas.chat import ChatRequest


def check_size(length: int, limit: int) -> None:
    """Refuse a body over the configured limit before reading more of it."""
    if length > limit:
        raise BodyTooLargeError(
            f"request body is {length} bytes, over the limit of {limit} bytes "
            "(FAREBOX_MAX_BODY_BYTES)"
        )


def parse(ctx: RequestContext) -> None:
    """Parse and validate `ctx.raw_body` into `ctx.body` and `ctx.request`."""
    try:
        body = orjson.loads(ctx.raw_body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    try:
        ctx.request = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise _schema_error(exc) from exc
    ctx.body = body


def _schema_error(exc: ValidationError) -> InvalidRequestError:
    first = exc.errors()[0]
    param = _param_path(first["loc"])
    message = first["msg"]
    if first["type"] == "missing":
        message = "is required"
    return InvalidRequestError(f"invalid field '{param}': {message}", param=param)


def _param_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"
