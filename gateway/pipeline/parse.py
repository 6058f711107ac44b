"""Stage 1: turn the raw body into a validated request, or a 400 that names the field."""

from __future__ import annotations

from pydantic import ValidationError

from gateway.errors import BodyTooLargeError
from gateway.pipeline.context import RequestContext
from gateway.schemas.body import invalid_field, load_object
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
    body = load_object(ctx.raw_body)
    try:
        ctx.request = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
    ctx.body = body
