"""Server-sent events: split a byte stream into events without touching their bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

DONE = b"[DONE]"


async def iter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield each complete event (its lines plus the blank line that ends it), byte-exact."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while True:
            end, sep_len = _event_end(buffer)
            if end < 0:
                break
            yield buffer[: end + sep_len]
            buffer = buffer[end + sep_len :]
    if buffer.strip():
        yield buffer


def _event_end(buffer: bytes) -> tuple[int, int]:
    """Index and length of the first blank-line separator (LF or CRLF), or (-1, 0)."""
    lf = buffer.find(b"\n\n")
    crlf = buffer.find(b"\r\n\r\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    return (lf, 2) if lf >= 0 else (-1, 0)


def event_data(event: bytes) -> bytes | None:
    """The payload of an event's `data:` lines, joined as the SSE spec says; None if absent."""
    parts = [
        line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:")
    ]
    return b"\n".join(parts) if parts else None


def event_json(event: bytes) -> dict[str, Any] | None:
    """The event's data parsed as a JSON object, or None for `[DONE]`, comments and junk."""
    data = event_data(event)
    if data is None or data.strip() == DONE:
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def data_event(payload: dict[str, Any]) -> bytes:
    """Render one `data:` event in the compact form OpenAI uses."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE_EVENT = b"data: [DONE]\n\n"
