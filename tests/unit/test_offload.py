"""Large bodies are worked on beside the loop; what the prefix history keeps is bounded."""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass

import pytest

from gateway.config import ModelRoute
from gateway.pipeline.context import RequestContext, TaskRef
from gateway.pipeline.offload import (
    INLINE_BYTES,
    OFF_LOOP_BYTES,
    RELEASE_BYTES,
    SWITCH_INTERVAL_S,
    _take_apart,
    inline_bound,
    parses_inline,
    release,
    share_the_lock,
    sized,
)
from gateway.pipeline.prefix import MAX_REMEMBERED_SEGMENTS, check_prefix, remember
from gateway.prefix import PrefixChecker, locate, rule_for
from gateway.rawjson import bracket_depth
from gateway.state.memory import MemoryState


async def test_small_steps_stay_on_the_loop_and_large_ones_leave_it() -> None:
    loop_thread = threading.get_ident()
    assert await sized(OFF_LOOP_BYTES, threading.get_ident) == loop_thread
    assert await sized(OFF_LOOP_BYTES + 1, threading.get_ident) != loop_thread


def _ctx(messages: int, task: str) -> RequestContext:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"{i}"} for i in range(messages)],
    }
    ctx = RequestContext(raw_body=b"{}", headers={}, body=body, alias="m")
    ctx.route = ModelRoute(model="m", base_url="http://127.0.0.1:1/v1")
    ctx.task = TaskRef(task_id=task, implicit=False)
    return ctx


async def test_a_prompt_too_long_to_be_a_conversation_leaves_no_history() -> None:
    state, checker = MemoryState(), PrefixChecker()
    for count, kept in ((10, 1), (MAX_REMEMBERED_SEGMENTS + 1, 0)):
        outcome = await check_prefix(
            _ctx(count, f"task-{count}"), checker, state, rule_for("openai")
        )
        await remember(outcome, state)
        assert len(await state.prefix_history(outcome.keys[:1])) == kept
    await state.aclose()


async def test_a_large_body_is_freed_beside_the_loop_and_a_small_one_left_alone() -> None:
    messages = [{"role": "user", "content": f"line {n}"} for n in range(5000)]
    validated = list(messages)
    await release(RELEASE_BYTES + 1, messages, validated, None, "not a list")
    assert messages == [] and validated == []
    small = [{"role": "user", "content": "hi"}]
    await release(RELEASE_BYTES, small)  # a 1 MB body is freed faster than a thread hop
    assert small == [{"role": "user", "content": "hi"}]


class _Part:
    """One of many small objects a result holds (weakly referenceable, unlike a tuple)."""


@dataclass(frozen=True, slots=True)
class _Holder:
    parts: tuple[_Part, ...]


async def test_an_object_holding_a_big_sequence_is_freed_a_slice_at_a_time() -> None:
    # A real prefix check of 5,000 messages, as the pipeline keeps it until the request ends.
    ctx = _ctx(5000, "task-free")
    outcome = await check_prefix(ctx, PrefixChecker(), MemoryState(), rule_for("openai"))
    parts = [_Part() for _ in range(5000)]
    holder = _Holder(tuple(parts))
    watched = [weakref.ref(part) for part in parts]
    assert len(outcome.check.request.segments) > 5000  # one per message, and the header
    del parts
    held = [outcome, holder]
    del outcome, holder
    await release(RELEASE_BYTES + 1, held)
    assert held == [] and all(ref() is None for ref in watched)


def test_taking_apart_moves_a_held_sequence_out_and_frees_its_items() -> None:
    parts = [_Part() for _ in range(3000)]
    watched = [weakref.ref(part) for part in parts]
    holder = _Holder(tuple(parts))
    held: list[object] = [holder, "kept as is"]
    del parts
    _take_apart(held)
    # The holder's tuple was detached and emptied into a list freed a slice at a time.
    assert held == ["kept as is"] and holder.parts == ()
    assert all(ref() is None for ref in watched)


def test_taking_apart_leaves_a_sequence_someone_else_holds_intact() -> None:
    shared = tuple(_Part() for _ in range(3000))
    in_dict = {"parts": list(shared)}
    held: list[object] = [_Holder(shared), in_dict, [shared]]
    _take_apart(held)
    # Detached from the holder, but another holder still reads every item.
    assert len(shared) == 3000 and all(isinstance(part, _Part) for part in shared)
    assert held == [in_dict] and len(in_dict["parts"]) == 3000  # plain: freed as it is


def test_worker_threads_are_told_to_hand_the_lock_over_within_a_millisecond() -> None:
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # Python's default
        share_the_lock()
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S == 0.001
    finally:
        sys.setswitchinterval(before)


def test_without_the_native_module_a_held_sequence_is_copied_and_still_freed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(locate, "_take_items", None)  # a build without a C compiler
    parts = [_Part() for _ in range(3000)]
    watched = [weakref.ref(part) for part in parts]
    holder = _Holder(tuple(parts))
    held: list[object] = [holder, "kept as is"]
    del parts
    _take_apart(held)
    assert held == ["kept as is"] and len(holder.parts) == 3000  # not detached: a copy
    del holder
    assert all(ref() is None for ref in watched)


def test_a_body_of_few_values_parses_inline_and_one_of_many_does_not() -> None:
    few = (
        b'{"messages":['
        + b",".join([b'{"role":"user","content":"' + b"x" * 400 + b'"}'] * 2000)
        + b"]}"
    )
    many = b'{"messages":[{"role":"user","content":"x"}],"n":[' + b",".join([b"12"] * 9000) + b"]}"
    assert len(few) > OFF_LOOP_BYTES and parses_inline(few)
    assert not parses_inline(many)
    assert not parses_inline(b" " * (INLINE_BYTES + 1))
    for raw in (few, many, b" " * (INLINE_BYTES + 1), b'{"a":"no end'):  # one pass, same answer
        inline, bound = inline_bound(raw)
        assert inline == parses_inline(raw)
        assert bound is None or bound == bracket_depth(raw)
    assert inline_bound(few) == (True, 3)
