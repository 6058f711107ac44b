from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.upstream.sse import event_data, event_json, iter_events


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_events_are_split_byte_exact_across_chunk_boundaries() -> None:
    stream = b'data: {"a":1}\n\ndata: {"b":2}\r\n\r\n: comment\n\ndata: [DONE]\n\n'
    pieces = [stream[i : i + 5] for i in range(0, len(stream), 5)]
    events = [e async for e in iter_events(_chunks(*pieces))]
    assert b"".join(events) == stream
    assert events[0] == b'data: {"a":1}\n\n'
    assert events[1] == b'data: {"b":2}\r\n\r\n'
    assert len(events) == 4


async def test_trailing_partial_event_is_kept() -> None:
    events = [e async for e in iter_events(_chunks(b'data: {"a":1}\n\ndata: {"b"'))]
    assert events == [b'data: {"a":1}\n\n', b'data: {"b"']


def test_event_json_handles_done_comments_and_anthropic_event_lines() -> None:
    assert event_json(b"data: [DONE]\n\n") is None
    assert event_json(b": keep-alive\n\n") is None
    assert event_json(b'event: ping\ndata: {"type":"ping"}\n\n') == {"type": "ping"}
    assert event_data(b"data:x\ndata: y\n\n") == b"x\ny"
