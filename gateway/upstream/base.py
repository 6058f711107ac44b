"""What every upstream adapter takes and gives back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.config import ModelRoute
from gateway.settings import Timeouts


@dataclass(slots=True)
class UpstreamCall:
    """One call to one upstream: the OpenAI-shaped body to send and how to send it."""

    alias: str
    route: ModelRoute
    body: bytes
    parsed: dict[str, Any]
    stream: bool
    timeouts: Timeouts
    base_url: str
    api_key: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    # Run once the request is written, before the wait for the reply (h1's upstreams only;
    # the pipeline settles it itself wherever it did not run): must not raise.
    while_waiting: Callable[[], None] | None = None


@dataclass(slots=True)
class UpstreamReply:
    """A complete (non-streaming) reply, already in OpenAI's chat-completion shape.

    `payload` is `body` parsed and checked by the adapter (`replies.reply_object`).
    """

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)


class UpstreamStream(Protocol):
    """An opened streaming reply: OpenAI-shaped SSE events, each ending in a blank line."""

    @property
    def headers(self) -> dict[str, str]:
        """The reply's headers (a dict the litellm adapter may add its notice to)."""
        ...

    def events(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Upstream(Protocol):
    """An adapter for one wire format."""

    async def complete(self, call: UpstreamCall) -> UpstreamReply: ...

    async def open_stream(self, call: UpstreamCall) -> UpstreamStream: ...

    async def aclose(self) -> None: ...
