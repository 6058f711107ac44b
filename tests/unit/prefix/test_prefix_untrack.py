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


def test_a_moved_tuple_holds_the_lists_items_and_leaves_it_empty() -> None:
    names = [f"messages[{index}]" for index in range(100_000)]
    expected = tuple(names)
    moved = locate.moved_tuple(names, acyclic=True)
    assert moved == expected and names == [] and not gc.is_tracked(moved)
    assert all(a is b for a, b in zip(moved, expected, strict=True))  # the same objects
    names.append("the emptied list works as a list")
    assert names == ["the emptied list works as a list"]
    # Without `acyclic`, a tracked item keeps the tuple tracked; atoms alone do not.
    assert gc.is_tracked(locate.moved_tuple([["a list"], "x"]))
    assert not gc.is_tracked(locate.moved_tuple(["a", b"b", 3]))
    assert locate.moved_tuple([]) == ()


def test_an_untracked_tuple_copies_a_range_past_the_points_where_it_lets_the_lock_go() -> None:
    values = [f"v{index}" for index in range(100_000)]  # over three 32,768-item steps
    for source in (values, tuple(values)):
        copied = locate.untracked_tuple(source, 7, 99_000)
        assert copied == tuple(values[7:99_000]) and not gc.is_tracked(copied)
    assert gc.is_tracked(locate.untracked_tuple([["tracked"]] * 70_000))
    assert locate.untracked_tuple(values, 500, 100) == ()


def test_a_large_check_gives_the_same_record_with_moved_and_copied_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.prefix import PrefixChecker, rule_for

    body = {"model": "m", "messages": _messages(40_000)}
    native = PrefixChecker().check(body, rule_for("openai"))
    monkeypatch.setattr(locate, "_moved_tuple", None)  # the pure-Python fallback
    copied = PrefixChecker().check(body, rule_for("openai"))
    assert native.record == copied.record and native.request == copied.request
    assert native.unscanned == copied.unscanned and native.findings == copied.findings
    assert native.expected_cached_now == copied.expected_cached_now
    count = native.request.header_count + 40_000  # the header segments, one per message
    assert len(native.record.segment_names) == len(native.request.segments) == count
    assert native.record.segment_names[-1] == "messages[39999]"
