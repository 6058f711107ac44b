"""What an Anthropic stream says about the tier it serves, which litellm's stream drops.

A Messages stream reports `usage.service_tier` (and, with fast mode, `usage.speed`) in its
`message_start` event. litellm's OpenAI-shaped chunks lose `service_tier` on the way, so
a streamed request would be billed "unconfirmed" although the upstream said. The
gateway's HTTP handler passes the response bytes through `watch_response`, which reads
the events up to `message_start` as they go by (nothing is held back or changed), and the
relay writes the two fields into the usage chunk litellm produces, where the meter reads
them as it does for a whole reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

_GIVE_UP_BYTES = 1 << 20  # a first event this large is not the one we look for
_FIELDS = ("service_tier", "speed")


@dataclass(slots=True)
class StreamTierReport:
    """The `service_tier` and `speed` a stream's `message_start` reported, once seen."""

    said: dict[str, str] = field(default_factory=dict)
    done: bool = False
    _buffer: bytes = b""

    def feed(self, data: bytes) -> None:
        """Read `data` (the next bytes of the SSE stream) until `message_start` is seen."""
        if self.done:
            return
        self._buffer = (self._buffer + data).replace(b"\r\n", b"\n")
        # `find`, not `b"\n\n" in`: CPython 3.11 tries a bytes needle as an int first
        # and raises and clears a TypeError each time.
        while self._buffer.find(b"\n\n") >= 0 and not self.done:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            self._read_event(event)
        if len(self._buffer) > _GIVE_UP_BYTES:
            self.done, self._buffer = True, b""

    def _read_event(self, event: bytes) -> None:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            try:
                payload = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            kind = payload.get("type") if isinstance(payload, dict) else None
            if kind == "message_start":
                self._keep(payload.get("message"))
            if kind != "ping":
                self.done = True  # the first real event is the only one that says

    def _keep(self, message: Any) -> None:
        usage = message.get("usage") if isinstance(message, dict) else None
        if isinstance(usage, dict):
            self.said = {k: v for k in _FIELDS if isinstance(v := usage.get(k), str)}

    def annotate(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """`chunk` with the reported fields in its usage, where litellm left them out."""
        usage = chunk.get("usage")
        if not self.said or not isinstance(usage, dict):
            return chunk
        missing = {k: v for k, v in self.said.items() if usage.get(k) is None}
        return {**chunk, "usage": {**usage, **missing}} if missing else chunk


class _WatchedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, report: StreamTierReport) -> None:
        self._inner = inner
        self._report = report

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._inner:
            self._report.feed(part)
            yield part

    async def aclose(self) -> None:
        await self._inner.aclose()


def watch_response(response: httpx.Response, report: StreamTierReport) -> None:
    """Have `report` read `response`'s body as its reader consumes it."""
    if isinstance(response.stream, httpx.AsyncByteStream):
        response.stream = _WatchedStream(response.stream, report)
