"""The relay's short path for plain content chunks meters exactly what the full walk does.

The full walk (`chunk_object`, `error_in_chunk`, `Meter.observe_chunk`) is the reference:
every event, hand-picked or random, framed in every way an upstream frames it, must leave
the same meter (clock calls included), raise the same error, or be the same non-chunk.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from typing import Any

import orjson
import pytest

from gateway.errors import FareboxError
from gateway.pipeline.measure import Meter
from gateway.upstream.replies import (
    PLAIN_EVENT,
    chunk_object,
    error_in_chunk,
    line_data,
    plain_content,
    read_chunk,
)
from gateway.upstream.sse import event_data


class Ticks:
    """A clock that moves one tick per reading: a skipped or extra reading shows."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _full(meter: Meter, event: bytes) -> object:
    """The reference: every chunk parsed, checked and walked."""
    try:
        chunk = chunk_object(event, "x")
        if chunk is None:
            return "no chunk"
        if (failure := error_in_chunk(chunk, "x")) is not None:
            return ("error", type(failure), failure.message)
        meter.observe_chunk(chunk)
    except FareboxError as exc:
        return ("error", type(exc), exc.message)
    return "metered"


def _short(meter: Meter, event: bytes) -> object:
    """What `Relay._run` and `Relay._outgoing` do (without a thinking cap)."""
    if PLAIN_EVENT is not None and (found := PLAIN_EVENT(event)) is not None:
        meter.observe_content(*found)
        return "metered"
    try:
        data = line_data(event)
        if data is None:
            data = event_data(event)
        chunk, content = read_chunk(data, "x")
        if chunk is None:
            return "no chunk"
        if content is not None:
            meter.observe_content(content, chunk.get("service_tier"))
            return "metered"
        if (failure := error_in_chunk(chunk, "x")) is not None:
            return ("error", type(failure), failure.message)
        meter.observe_chunk(chunk)
    except FareboxError as exc:
        return ("error", type(exc), exc.message)
    return "metered"


def _state(meter: Meter) -> dict[str, Any]:
    state = asdict(meter)
    del state["clock"]
    return state


def _same(events: list[bytes]) -> int:
    """Feed both paths the same events; return how many took the short path."""
    full, short = Meter(clock=Ticks()), Meter(clock=Ticks())
    plain = 0
    for event in events:
        assert _short(short, event) == _full(full, event), event
        assert _state(short) == _state(full), event
        data = line_data(event) or event_data(event)
        if data is not None and data[:1] == b"{":
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            plain += isinstance(chunk, dict) and plain_content(chunk) is not None
    return plain


def _chunk(delta: Any, finish: Any = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice], **extra}


HAND_PICKED = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Hello"}),
    _chunk({"content": 'é \u2028 "q" \\ data: [DONE]'}),
    _chunk({"content": ""}),
    _chunk({}),
    _chunk({"content": 7}),
    _chunk({"content": None}),
    _chunk({"content": "x"}, service_tier="default"),
    _chunk({"content": "x"}, service_tier=None),
    _chunk({"content": "x"}, service_tier=3),
    _chunk({"reasoning": "think"}),
    _chunk({"reasoning_content": "think"}),
    _chunk({"reasoning": ""}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}),
    _chunk({"tool_calls": []}),
    _chunk(None),
    _chunk("oops"),
    _chunk({"content": "x"}, "stop"),
    _chunk({"content": ""}, ""),
    _chunk({"content": "x"}, 5),
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    {"choices": [], "usage": {"prompt_tokens": 1, "service_tier": "priority", "speed": "x"}},
    {"choices": [], "usage": "lots"},
    {"choices": [], "error": {"message": "overloaded", "code": 503}},
    {"choices": [], "error": None},
    {"error": "plain"},
    {"choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]},
    {"choices": [3]},
    {"choices": {"0": {}}},
    {"choices": None},
    {},
]


def _framings(data: bytes) -> list[bytes]:
    return [
        b"data: " + data + b"\n\n",
        b"data:" + data + b"\n\n",
        b"data:  " + data + b"\n\n",
        b"data: " + data + b"\r\n\r\n",
        b"data: " + data,
        b"data: " + data + b"\n",
        b": note\ndata: " + data + b"\n\n",
        b"event: x\ndata: " + data + b"\n\n",
    ]


def test_hand_picked_chunks_in_every_framing_meter_the_same() -> None:
    events = []
    for chunk in HAND_PICKED:
        for data in (orjson.dumps(chunk), json.dumps(chunk, indent=1).encode()):
            events.extend(_framings(data))
    events += [b"data: [DONE]\n\n", b"data:  [DONE] \n\n", b": ping\n\n", b"data: \n\n"]
    events += [b"data: not json\n\n", b"data: [1]\n\n", b"data: {\n\n"]
    assert _same(events) > 0


def _junk(rnd: random.Random, depth: int = 0) -> Any:
    """Any JSON value, made of the keys and values a chunk has."""
    keys = ["choices", "delta", "content", "reasoning", "reasoning_content", "tool_calls"]
    keys += ["usage", "service_tier", "error", "finish_reason", "role", "prompt_tokens"]
    kind = rnd.choice(["str", "int", "none", "list", "dict"] if depth < 4 else ["str", "none"])
    if kind == "list":
        return [_junk(rnd, depth + 1) for _ in range(rnd.randint(0, 2))]
    if kind == "dict":
        return {rnd.choice(keys): _junk(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}
    return {"str": rnd.choice(["", "x", "stop", "default"]), "int": rnd.randint(-1, 9)}.get(kind)


@pytest.mark.parametrize("seed", range(5))
def test_random_chunks_meter_the_same(seed: int) -> None:
    rnd = random.Random(seed)
    events = []
    for _ in range(400):
        delta = _junk(rnd) if rnd.random() < 0.5 else {"content": rnd.choice(["", "w", 0])}
        finish = rnd.choice([None, None, None, "stop", ""])
        chunk = _chunk(delta, finish)
        for key in rnd.sample(["usage", "service_tier", "error"], rnd.randint(0, 1)):
            chunk[key] = _junk(rnd, 2)
        if rnd.random() < 0.2:
            chunk = _junk(rnd)
        framing = _framings(orjson.dumps(chunk))
        events.append(framing[0] if rnd.random() < 0.8 else rnd.choice(framing))
    assert _same(events) > 50


@pytest.mark.parametrize(
    "run",
    [
        [("", None), ("Hel", None), ("lo", "default"), ("", None), ("!", None)],
        [("", "flex"), ("", None)],
        [("a", None)],
        [("x", 1), ("y", "priority"), ("z", None)],
    ],
)
def test_a_run_metered_at_once_as_chunk_by_chunk(run: list[tuple[str, Any]]) -> None:
    """`observe_contents` (the relay's run of plain chunks of one read) leaves the state
    `observe_content` per chunk leaves; the first token's time is the one read at it,
    the last token's is read once, after the run."""
    each, once = Meter(clock=Ticks()), Meter(clock=Ticks())
    once.observe_content("before", None)
    each.observe_content("before", None)
    for content, tier in run:
        each.observe_content(content, tier)
    has_content = any(content for content, _ in run)
    once.observe_contents(run, 42.0 if has_content else None)
    expected = _state(each)
    if has_content:
        expected["last_token"] = 2.0  # the run's one reading, after "before"'s
    assert _state(once) == expected
    fresh = Meter(clock=Ticks())
    fresh.observe_contents(run, 42.0 if has_content else None)
    assert fresh.first_token == fresh.first_answer_token == (42.0 if has_content else None)
    assert fresh.last_token == (1.0 if has_content else None)
