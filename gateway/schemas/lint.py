"""The body of `POST /v1/prefix/lint`: one chat request, or `{"requests": [...]}`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.schemas.body import invalid_field
from gateway.schemas.chat import ChatRequest


class LintConversation(BaseModel):
    """A recorded conversation: chat requests of one caller, oldest first."""

    model_config = ConfigDict(extra="allow")

    requests: list[ChatRequest] = Field(min_length=1)


def lint_bodies(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat requests to lint, each validated like a chat request, else a 400."""
    try:
        if "requests" in body:
            LintConversation.model_validate(body)
            return list(body["requests"])
        ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
    return [body]
