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


class UpstreamReply:
    """A complete (non-streaming) reply, already in OpenAI's chat-completion shape.

    `payload` is `body` parsed and checked by the adapter (`replies.reply_object`).
    `headers` is the reply's headers; an adapter may hand `read_headers` instead, which
    gives them on first use: a native chat reply's headers are never read (only a litellm
    route's notice is believed), and decoding each one into a dict cost every request.
    """

    __slots__ = ("_headers", "_read_headers", "body", "payload", "rendered", "status")

    def __init__(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        payload: dict[str, Any] | None = None,
        *,
        read_headers: Callable[[], dict[str, str]] | None = None,
        rendered: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.payload = {} if payload is None else payload
        self.rendered = rendered  # `body` is `orjson.dumps(payload)` (the adapter made it)
        if headers is None and read_headers is None:
            headers = {}
        self._headers = headers  # None: `read_headers` gives them when first asked
        self._read_headers = read_headers

    @property
    def headers(self) -> dict[str, str]:
        headers = self._headers
        if headers is None:
            read, self._read_headers = self._read_headers, None
            headers = self._headers = read() if read is not None else {}
        return headers

    @headers.setter
    def headers(self, value: dict[str, str]) -> None:
        self._headers, self._read_headers = value, None

    def __repr__(self) -> str:
        return f"UpstreamReply(status={self.status!r}, body={self.body!r})"


class UpstreamStream(Protocol):
    """An opened streaming reply: OpenAI-shaped SSE events, each ending in a blank line."""

    @property
    def headers(self) -> dict[str, str]:
        """The reply's headers (a dict the litellm adapter may add its notice to)."""
        ...

    def events(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


HANDS_OVER = "hands_over_while_waiting"
"""An adapter with this class attribute set passes `UpstreamCall.while_waiting` to the
transport, which runs it between the request's write and the wait for the reply."""


class Upstream(Protocol):
    """An adapter for one wire format."""

    async def complete(self, call: UpstreamCall) -> UpstreamReply: ...

    async def open_stream(self, call: UpstreamCall) -> UpstreamStream: ...

    async def aclose(self) -> None: ...
