"""`split_lf` (gateway/upstream/_plain_event.c): the SSE splitter's usual read, cut natively.

It must cut exactly where `chunk.split(b"\\n\\n")` cuts, each complete event keeping its
blank line, the rest last; the splitter must give the same events with it as without it.
"""

from __future__ import annotations

import random

import pytest

from gateway.upstream import sse
from gateway.upstream.sse import EventSplitter

native = pytest.importorskip("gateway.upstream._plain_event")
split_lf = native.split_lf


def _reference(chunk: bytes) -> list[bytes]:
    parts = chunk.split(b"\n\n")
    rest = parts.pop()
    return [part + b"\n\n" for part in parts] + [rest]


def test_hand_picked_chunks_are_cut_as_split_cuts_them() -> None:
    for chunk in (
        b"",
        b"\n",
        b"\n\n",
        b"\n\n\n",
        b"\n\n\n\n",
        b"a\n\n\nb",
        b"data: 1\n\ndata: 2\n\n",
        b"data: 1\n\ndata: 2\n",
        b"data: 1\ndata: 2\n\n: comment\n\nrest",
        b"x\r\n\r\ny\n\n",
    ):
        assert split_lf(chunk) == _reference(chunk), chunk


def test_random_chunks_are_cut_as_split_cuts_them() -> None:
    rnd = random.Random(21)
    pieces = [b"\n", b"\n\n", b"\r", b"data: {}", b"x", b"\x00", b"\xff"]
    for _ in range(20000):
        chunk = b"".join(rnd.choices(pieces, k=rnd.randint(0, 40)))
        assert split_lf(chunk) == _reference(chunk), chunk


def test_a_chunk_that_is_one_event_or_none_is_not_copied() -> None:
    event = b"data: " + b"x" * 100 + b"\n\n"
    assert split_lf(event)[0] is event
    partial = b"data: " + b"x" * 100
    assert split_lf(partial)[0] is partial


def test_only_bytes_are_taken_and_the_splitter_walks_the_rest() -> None:
    with pytest.raises(TypeError):
        split_lf(bytearray(b"data: 1\n\n"))
    splitter = EventSplitter()
    assert splitter.feed(bytearray(b"data: 1\n\ndata: 2")) == [b"data: 1\n\n"]  # type: ignore[arg-type]
    assert splitter.rest == b"data: 2"


def test_the_splitter_gives_the_same_events_with_and_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert sse.SPLIT_LF is split_lf  # built here: the splitter's reads go through it
    rnd = random.Random(5)
    pieces = [b"\n", b"\n\n", b"data: x", b"data: {}", b" ", b"\r\n\r\n"]
    streams = []
    for _ in range(2000):
        stream = b"".join(rnd.choices(pieces, [6, 6, 6, 6, 2, 1], k=rnd.randint(0, 30)))
        cuts = sorted(rnd.sample(range(len(stream) + 1), min(len(stream) + 1, rnd.randint(0, 6))))
        streams.append([stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)])

    def split_all() -> list[tuple[list[bytes], bytes]]:
        results = []
        for parts in streams:
            splitter, events = EventSplitter(), []
            for part in parts:
                events += splitter.feed(part)
            results.append((events, splitter.rest))
        return results

    native_results = split_all()
    monkeypatch.setattr(sse, "SPLIT_LF", sse._split_lf_python)
    assert split_all() == native_results
