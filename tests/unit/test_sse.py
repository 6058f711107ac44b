from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from gateway.errors import UpstreamProtocolError
from gateway.upstream.sse import EventSplitter, event_data, event_json, iter_events


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


def _reference_events(stream: bytes) -> list[bytes]:
    """The split the spec asks for, computed the slow, obvious way."""
    events, rest = [], stream
    while True:
        lf, crlf = rest.find(b"\n\n"), rest.find(b"\r\n\r\n")
        if crlf >= 0 and (lf < 0 or crlf < lf):
            end = crlf + 4
        elif lf >= 0:
            end = lf + 2
        else:
            break
        events.append(rest[:end])
        rest = rest[end:]
    return events + ([rest] if rest.strip() else [])


async def test_splitting_matches_the_reference_for_any_chunking() -> None:
    rnd = random.Random(9)
    pieces = [b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"data: x", b" ", b":"]
    for _ in range(3000):
        stream = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 24)))
        cuts = sorted(rnd.sample(range(len(stream) + 1), min(len(stream) + 1, rnd.randint(0, 5))))
        parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert [e async for e in iter_events(_chunks(*parts))] == _reference_events(stream)


async def test_an_event_without_end_fails_at_the_cap() -> None:
    endless = [b"data: "] + [b"x" * 65536] * 64  # 4 MiB, never a blank line
    with pytest.raises(UpstreamProtocolError, match="over 1048576 bytes"):
        async for _ in iter_events(_chunks(*endless), max_event_bytes=1024 * 1024):
            pass


async def test_a_complete_event_over_the_cap_fails_too() -> None:
    big = b"data: " + b"x" * 2048 + b"\n\n"
    with pytest.raises(UpstreamProtocolError):
        async for _ in iter_events(_chunks(big), max_event_bytes=1024):
            pass


async def test_many_small_events_in_one_chunk_are_all_found() -> None:
    stream = b'data: {"a":1}\r\n\r\n' * 5000 + b"data: [DONE]\n\n"
    events = [e async for e in iter_events(_chunks(stream))]
    assert len(events) == 5001 and b"".join(events) == stream


def test_splitter_searches_each_byte_once() -> None:
    """Fed one byte at a time, a long event costs one search per byte, not per byte so far."""
    splitter = EventSplitter()
    for byte in b"data: " + b"x" * 5000:
        assert splitter.feed(bytes([byte])) == []
        assert splitter._cursor == len(splitter._buffer)  # nothing left to search again
    assert splitter.feed(b"\n\n") == [b"data: " + b"x" * 5000 + b"\n\n"]


async def test_reads_without_a_cr_split_as_the_walk_does() -> None:
    """Reads with no CR after a complete event take `split`; the events are the walk's."""
    rnd = random.Random(12)
    pieces = [b"\n", b"\n\n", b"data: x", b"data: {}", b" ", b":", b"\r\n\r\n"]
    weights = [6, 6, 6, 6, 2, 2, 1]  # mostly LF-only streams, the odd CRLF separator
    for _ in range(3000):
        stream = b"".join(rnd.choices(pieces, weights, k=rnd.randint(0, 30)))
        cuts = sorted(rnd.sample(range(len(stream) + 1), min(len(stream) + 1, rnd.randint(0, 6))))
        parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        splitter, events = EventSplitter(), []
        for part in parts:
            events += splitter.feed(part)
            assert 0 <= splitter._cursor <= len(splitter._buffer)
        rest = splitter.rest
        assert events + ([rest] if rest.strip() else []) == _reference_events(stream)


def test_a_read_over_the_cap_of_events_under_it_is_fine() -> None:
    splitter = EventSplitter(max_event_bytes=64)
    events = [b"data: " + bytes([65 + i]) * 40 + b"\n\n" for i in range(10)]
    assert splitter.feed(b"".join(events) + b"data: ") == events
    with pytest.raises(UpstreamProtocolError, match="over 64 bytes"):
        EventSplitter(max_event_bytes=64).feed(events[0] + b"data: " + b"x" * 80 + b"\n\n")
    with pytest.raises(UpstreamProtocolError, match="over 64 bytes"):
        EventSplitter(max_event_bytes=64).feed(events[0] + b"data: " + b"x" * 80)
