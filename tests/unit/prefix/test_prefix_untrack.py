"""Many-message segments leave cyclic GC tracking, and nothing else about them changes."""

from __future__ import annotations

import gc

import pytest

from gateway.prefix import locate
from gateway.prefix.segments import UNTRACK_EVERY, Segment, SegmentKind, _message_segments

pytestmark = pytest.mark.skipif(not locate.NATIVE, reason="needs the native _locate module")


def _messages(count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {index}"} for index in range(count)]


def test_segments_of_a_long_conversation_are_not_walked_by_the_collector() -> None:
    segments = _message_segments(_messages(UNTRACK_EVERY), 0)
    assert not any(gc.is_tracked(segment) for segment in segments)
    assert segments[5] == _message_segments(_messages(8), 0)[5]  # the same values
    assert segments[5].kind is SegmentKind.MESSAGE and segments[5].role == "user"


def test_short_conversations_are_left_alone() -> None:
    assert all(gc.is_tracked(segment) for segment in _message_segments(_messages(8), 0))


def test_a_tuple_holding_a_tracked_object_stays_tracked() -> None:
    holder = Segment("m0", SegmentKind.MESSAGE, b"{}", b"d" * 16)
    cyclic = (["a list, which can hold a reference back"], "x")
    items = [holder, cyclic, "not a tuple"]
    assert locate.untrack_tuples(items, SegmentKind.MESSAGE) == 1
    assert not gc.is_tracked(holder) and gc.is_tracked(cyclic)
