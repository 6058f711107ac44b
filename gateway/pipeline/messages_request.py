"""The Messages API request as the pipeline sees it, and the context that carries it.

Only what the gateway acts on is typed (model, max_tokens, messages, stream); every other
field is the upstream's to judge and travels in the client's own bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from gateway.pipeline.context import RequestContext
from gateway.schemas.body import invalid_field, load_object


class MessagesRequest(BaseModel):
    """The fields of `POST /v1/messages` that the pipeline reads."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    # Strict, as in the chat schema: a coerced "100000" would pass a cap no budget held.
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    stream: bool = False


class CountTokensRequest(BaseModel):
    """The fields of `POST /v1/messages/count_tokens` that the gateway reads."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)


@dataclass(slots=True)
class MessagesContext(RequestContext):
    """A `RequestContext` whose request is a Messages request, not a chat completion."""

    messages: MessagesRequest | None = None
    translated: bool = False  # the body is the chat body a chat-completions route receives

    @property
    def stream(self) -> bool:
        return bool(self.messages and self.messages.stream)

    @property
    def client_wants_usage_chunk(self) -> bool:
        return False  # usage travels in message_start and message_delta, always


def parse_messages(ctx: MessagesContext) -> None:
    """Parse the body into `ctx.body` and `ctx.messages`, or raise a 400 naming the field."""
    body = load_object(ctx.raw_body)
    try:
        ctx.messages = MessagesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
    ctx.body = body


def parse_count(raw: bytes) -> tuple[dict[str, Any], CountTokensRequest]:
    """A count_tokens body and its typed fields, or a 400 naming the field."""
    body = load_object(raw)
    try:
        return body, CountTokensRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
