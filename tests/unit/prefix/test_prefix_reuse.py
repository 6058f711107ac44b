"""A task's repeated messages are not cut again, and the cut is the same as a whole one."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import rule_for, split_request
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.reuse import SegmentReuse
from gateway.prefix.segments import RequestSegments

RULE = rule_for("openai")


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"turn {turn}: fix module {turn}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{turn}", "type": "function", "function": {"name": "read"}}
                ],
            },
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "x = 1\n" * 40},
        ]
    return messages


def _raw(messages: list[Any], **fields: Any) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, **fields})


def _cut(reuse: SegmentReuse, raw: bytes) -> tuple[RequestSegments, RequestSegments]:
    """The reusing cut and the whole cut of `raw`."""
    body = orjson.loads(raw)
    return reuse.split("task:t", raw, body, RULE), split_request(body, RULE)


def _reused(reuse: SegmentReuse, raw: bytes) -> bool:
    """Whether cutting `raw` took segments from the previous request (same objects)."""
    seen = reuse._seen.get("task:t")
    before = seen.known.segments if seen is not None else ()
    got, whole = _cut(reuse, raw)
    assert got == whole
    return bool(before) and got.segments[got.header_count] is before[0]


def test_an_agent_step_reuses_the_repeated_messages() -> None:
    reuse = SegmentReuse(min_bytes=0)
    history = _history(30)
    assert not _reused(reuse, _raw(history))  # the first step: nothing known
    history += [{"role": "user", "content": "next"}]
    assert _reused(reuse, _raw(history))
    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "more"}]
    assert _reused(reuse, _raw(history))
    assert _reused(reuse, _raw(history))  # the very same body again
    # The same history with another last turn (a retried or rewritten step), or fewer turns.
    assert _reused(reuse, _raw([*history[:-1], {"role": "user", "content": "other"}]))
    assert _reused(reuse, _raw(history[:-3]))


@pytest.mark.parametrize(
    "change",
    [
        "edited history",
        "other whitespace",
        "a field before the messages",
        "a repeated messages key",
        "an escaped repeated key",
        "a new system message",
    ],
)
def test_what_differs_is_cut_again_and_the_cut_stays_exact(change: str) -> None:
    reuse = SegmentReuse(min_bytes=0)
    history = _history(20)
    assert not _reused(reuse, _raw(history))
    if change == "edited history":
        history[5] = {"role": "user", "content": "compacted"}
        raw = _raw(history)
    elif change == "other whitespace":
        raw = json.dumps({"model": "m", "messages": history}).encode()
    elif change == "a field before the messages":
        raw = orjson.dumps({"stream": False, "model": "m", "messages": history})
    elif change == "a repeated messages key":  # orjson keeps the last one
        raw = _raw(history)[:-1] + b',"messages":[{"role":"user","content":"other"}]}'
    elif change == "an escaped repeated key":
        raw = _raw(history)[:-1] + b',"\\u006dessages":[{"role":"user","content":"o"}]}'
    else:
        raw = _raw([history[0], {"role": "system", "content": "more rules"}, *history[1:]])
    assert not _reused(reuse, raw)


def test_a_body_under_the_minimum_is_cut_whole_and_not_kept() -> None:
    reuse = SegmentReuse()  # 64 KiB
    raw = _raw(_history(3))
    got, whole = _cut(reuse, raw)
    assert got == whole
    assert not reuse._seen


def test_the_keep_is_bounded_by_bytes() -> None:
    reuse = SegmentReuse(keep_bytes=3 * len(_raw(_history(10))), min_bytes=0)
    for task in range(10):
        raw = _raw(_history(10))
        reuse.split(f"task:{task}", raw, orjson.loads(raw), RULE)
    assert len(reuse._seen) == 3
    assert list(reuse._seen) == ["task:7", "task:8", "task:9"]


def test_the_checker_reuses_only_with_a_key_and_the_raw_body() -> None:
    checker = PrefixChecker()
    history = _history(10)
    raw = _raw(history)
    first = checker.check(orjson.loads(raw), RULE, raw=raw, reuse_key="task:a")
    history.append({"role": "user", "content": "next"})
    raw = _raw(history)
    second = checker.check(orjson.loads(raw), RULE, [first.record], raw=raw, reuse_key="task:a")
    plain = PrefixChecker().check(orjson.loads(raw), RULE, [first.record])
    assert second.request == plain.request
    assert second.record == plain.record
    assert second.expectation == plain.expectation
    assert second.divergence == plain.divergence
    assert second.findings == plain.findings


MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": st.none()
        | st.text(max_size=20)
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False),
        "name": st.text(max_size=5),
        "cache_control": st.just({"type": "ephemeral"}),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(MESSAGE, max_size=8),
    steps=st.lists(st.tuples(st.integers(0, 8), st.lists(MESSAGE, max_size=3)), max_size=4),
    spaced=st.booleans(),
)
def test_a_series_of_steps_cuts_as_each_body_whole(
    first: list[dict[str, Any]], steps: list[tuple[int, list[dict[str, Any]]]], spaced: bool
) -> None:
    """Whatever a task sends next (more, fewer or other messages), the cut is the whole one."""
    reuse = SegmentReuse(min_bytes=0)
    messages = list(first)
    bodies = [messages]
    for keep, added in steps:
        messages = messages[:keep] + added
        bodies.append(messages)
    for messages in bodies:
        body = {"model": "m", "messages": messages}
        raw = json.dumps(body).encode() if spaced else orjson.dumps(body)
        got, whole = _cut(reuse, raw)
        assert got == whole


def test_unseen_weighs_only_what_follows_the_known_messages() -> None:
    reuse = SegmentReuse(min_bytes=0)
    history = _history(10)
    first = _raw(history)
    assert reuse.unseen("task:t", first) == len(first)  # nothing known yet
    reuse.split("task:t", first, orjson.loads(first), RULE)
    step = _raw([*history, {"role": "user", "content": "next"}])
    tail = step[step.rindex(b',{"role":"user","content":"next"}') :]
    assert reuse.unseen("task:t", step) == len(tail)
    other = _raw([{"role": "user", "content": "other"}, *history])
    assert reuse.unseen("task:t", other) == len(other)
    assert reuse.unseen("task:u", step) == len(step)


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(MESSAGE, max_size=8),
    steps=st.lists(st.tuples(st.integers(0, 8), st.lists(MESSAGE, max_size=3)), max_size=4),
    system=st.integers(0, 2),
)
def test_a_series_of_steps_records_as_each_body_whole(
    first: list[dict[str, Any]], steps: list[tuple[int, list[dict[str, Any]]]], system: int
) -> None:
    """The record of a step that took its previous request's columns is the whole one's."""
    checker = PrefixChecker()
    checker.reuse.min_bytes = 0
    lead = [{"role": "system", "content": f"s{i}"} for i in range(system)]
    messages = lead + list(first)
    bodies = [messages]
    for keep, added in steps:
        messages = messages[:keep] + added
        bodies.append(messages)
    for messages in bodies:
        body = {"model": "m", "messages": messages}
        raw = orjson.dumps(body)
        got = checker.check(orjson.loads(raw), RULE, raw=raw, reuse_key="task:t").record
        whole = PrefixChecker().check(body, RULE).record
        assert got == whole
        assert got.fingerprints == whole.fingerprints


def test_an_agent_step_takes_its_repeated_columns_from_the_previous_record() -> None:
    checker, history = PrefixChecker(), _history(30)
    checker.reuse.min_bytes = 0
    first = checker.check(orjson.loads(_raw(history)), RULE, raw=_raw(history), reuse_key="k")
    raw = _raw([*history, {"role": "user", "content": "next"}])
    second = checker.check(orjson.loads(raw), RULE, raw=raw, reuse_key="k")
    head = second.record.header_count
    assert second.record.segment_digests[head + 5] is first.record.segment_digests[head + 5]
    assert second.record == PrefixChecker().check(orjson.loads(raw), RULE).record
