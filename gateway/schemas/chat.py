"""The chat-completions request as the gateway reads it.

Lenient by design: unknown fields are kept (`extra="allow"`) because the body is forwarded
as the client sent it; this model only validates what the gateway itself relies on.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from typing_extensions import TypedDict


class Message(TypedDict):
    """One chat message; content may be a string, a list of parts or null.

    A TypedDict, not a model: a body may hold hundreds of thousands of messages, and
    validating one into a model costs ~6 µs (3 s for 466,000) against ~0.6 µs.
    """

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: NotRequired[str | list[dict[str, Any]] | None]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool | None = None


class ChatRequest(BaseModel):
    """The fields of a chat-completions request that the gateway reads."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    # Strict: an upstream that coerces "100000" or 1e5 would honour a cap the budget's
    # worst case (which reads integers only) never held.
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    n: StrictInt | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None

    @property
    def wants_usage_chunk(self) -> bool:
        """Whether the client asked to see the usage chunk of a stream."""
        return bool(self.stream_options and self.stream_options.include_usage)
