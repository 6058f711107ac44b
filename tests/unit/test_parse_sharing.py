"""A large body without a task parses only what its caller's previous body did not repeat.

`_parse_sharing` cuts the run of messages that repeat the previous body's (same indices,
same bytes) out of the body, parses the rest and puts the kept values back: whatever the
series of bodies (a new system prompt, a new last turn, edits, appends, drops, another
serialiser, invalid JSON anywhere, invalid fields, a repeated or escaped `messages` key),
the body, the request and every 400 are those of the whole parse.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.config import ModelRoute
from gateway.errors import InvalidRequestError
from gateway.pipeline import prefix as stage
from gateway.pipeline.context import RequestContext, TaskRef
from gateway.pipeline.parse import keep_messages, parse, parse_request
from gateway.prefix import rule_for
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.message_reuse import MIN_BYTES, MessageReuse
from gateway.prefix.reuse import SegmentReuse
from gateway.schemas.body import MAX_DEPTH

pytestmark = pytest.mark.skipif(not rawjson.NATIVE, reason="the native walker is not built")

_TEXT = st.text(alphabet='ab "\\\n\u00e9\u2028\U0001f600{}[],:', max_size=12)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": _TEXT | st.none()}
)
_MOVES = st.sampled_from(
    [
        "fresh",  # a new system prompt
        "last",  # a new last turn
        "edit",
        "append",
        "drop",
        "style",  # another serialiser
        "junk",  # a byte put in anywhere
        "cut",  # a byte taken out anywhere
        "invalid",  # a message pydantic refuses
        "model",  # an invalid model
        "twice",  # a second `messages` member
        "escaped",  # the key spelled with an escape
        "empty",  # no messages at all
        "deep",  # a new message nested about as deep as the limit
    ]
)
RULE = rule_for("openai")
_SWAP = {"user": "tool", "tool": "user"}
_STYLES = (
    lambda v: orjson.dumps(v),
    lambda v: json.dumps(v).encode(),
    lambda v: json.dumps(v, indent=1, ensure_ascii=False).encode(),
)


def _sharing() -> SegmentReuse:
    reuse = SegmentReuse()
    reuse.messages = MessageReuse(min_bytes=0, min_run=0)
    return reuse


def _outcome(raw: bytes, reuse: SegmentReuse | None) -> tuple[Any, ...]:
    ctx = RequestContext(raw_body=raw, headers={"authorization": "Bearer k"})
    try:
        parse(ctx, reuse)
    except InvalidRequestError as exc:
        return ("error", str(exc), exc.param)
    assert ctx.request is not None
    if reuse is not None:
        keep_messages(ctx, reuse)  # as the prefix stage does on a route that is not litellm's
    request = ctx.request
    return (ctx.body, request, request.model_fields_set, request.model_extra)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, min_size=3, max_size=14), st.lists(_MOVES, max_size=8), st.data())
def test_any_series_of_bodies_parses_as_each_body_whole(
    history: list[dict[str, Any]], moves: list[str], data: st.DataObject
) -> None:
    reuse, style, system = _sharing(), 0, "You are a coding agent. Session 0."
    for step, move in enumerate(moves):
        if move == "fresh":
            system = f"You are a coding agent. Session {step}."
        elif move == "last":
            history = [*history[:-1], {"role": "user", "content": f"Next step {step}."}]
        elif move == "edit":  # the same length: only the bytes tell the bodies apart
            index = data.draw(st.integers(0, len(history) - 1))
            edited = {**history[index], "role": _SWAP.get(history[index]["role"], "assistant")}
            history = [*history[:index], edited, *history[index + 1 :]]
        elif move == "append":
            history = [*history, {"role": "assistant", "content": f"more {step}"}]
        elif move == "drop" and len(history) > 1:
            history = history[:-1]
        elif move == "style":
            style = (style + 1) % len(_STYLES)
        messages: list[Any] = [{"role": "system", "content": system}, *history]
        if move == "invalid":
            messages.append({"role": "nobody"})
        elif move == "deep":
            nested: Any = "x"
            for _ in range(data.draw(st.integers(MAX_DEPTH - 4, MAX_DEPTH + 1))):
                nested = [nested]
            messages.append({"role": "user", "content": "a", "x": nested})
        body: dict[str, Any] = {"model": "" if move == "model" else "m", "messages": messages}
        body["max_tokens"] = 9
        if move == "empty":
            body["messages"] = []
        raw = _STYLES[style](body)
        if move == "twice":
            raw = raw[:-1] + b',"messages":' + _STYLES[style](messages[:1]) + b"}"
        elif move == "escaped":
            raw = raw.replace(b'"messages"', b'"m\\u0065ssages"', 1)
        elif move in ("junk", "cut"):
            at = data.draw(st.integers(0, len(raw) - 1))
            put = data.draw(st.sampled_from([b",", b"]", b"}", b'"', b"\\", b" ", b"{", b"0"]))
            raw = raw[:at] + put + raw[at:] if move == "junk" else raw[:at] + raw[at + 1 :]
        assert _outcome(raw, reuse) == _outcome(raw, None)


def _fresh(step: int, turns: int = 400) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"Session {step}."}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"Turn {turn}: read module {turn}."},
            {"role": "tool", "content": 'def f(x):\n    return x  # "keep"\n' * 4},
        ]
    last = json.dumps({"role": "user", "content": f"Next step {step}: continue."}).encode()
    dumped = orjson.dumps({"model": "m", "messages": messages, "max_tokens": 64})
    return _with_last(dumped, last)


def _with_last(dumped: bytes, last: bytes) -> bytes:
    """The body with a last turn written by another serialiser (as loadgen writes it)."""
    close = dumped.rindex(b'],"max_tokens"')
    return dumped[:close] + b"," + last + dumped[close:]


def test_a_fresh_prompt_takes_its_repeated_messages_from_the_previous_parse() -> None:
    reuse = SegmentReuse()
    bodies = [_fresh(step) for step in range(3)]
    assert len(bodies[0]) >= reuse.messages.min_bytes
    kept: list[Any] = []
    for step, raw in enumerate(bodies):
        ctx = RequestContext(raw_body=raw, headers={})
        asyncio_run(parse_request(ctx, reuse))
        assert ctx.body == orjson.loads(raw)
        assert reuse.messages.is_shared(raw) is (step > 0)
        messages = ctx.body["messages"]
        if step:  # the very values of the previous parse, but the system and last turns
            assert all(a is b for a, b in zip(messages[1:-1], kept[1:-1], strict=True))
            assert messages[0] is not kept[0] and messages[-1] is not kept[-1]
        keep_messages(ctx, reuse)
        kept = messages


def test_another_credential_or_a_task_shares_nothing() -> None:
    reuse = SegmentReuse()
    first = RequestContext(raw_body=_fresh(0), headers={"authorization": "Bearer a"})
    parse(first, reuse)
    keep_messages(first, reuse)
    for headers in ({"authorization": "Bearer b"}, {"authorization": "Bearer a", "x-task-id": "t"}):
        ctx = RequestContext(raw_body=_fresh(1), headers=headers)
        parse(ctx, reuse)
        assert not reuse.messages.is_shared(ctx.raw_body)
        assert ctx.body == orjson.loads(ctx.raw_body)


def test_a_body_over_two_mib_is_not_kept() -> None:
    reuse = SegmentReuse()
    ctx = RequestContext(raw_body=_fresh(0, turns=10000), headers={})
    assert len(ctx.raw_body) > 2 * 1024 * 1024
    parse(ctx, reuse)
    keep_messages(ctx, reuse)
    assert not reuse.messages._kept


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_litellm_gets_its_own_copies_of_shared_messages(provider: str) -> None:
    checker = PrefixChecker()
    first = RequestContext(raw_body=_fresh(0), headers={})
    parse(first, checker.reuse)
    keep_messages(first, checker.reuse)
    ctx = RequestContext(raw_body=_fresh(1), headers={})
    parse(ctx, checker.reuse)
    ctx.task = TaskRef(task_id="implicit", implicit=True)
    ctx.route = ModelRoute(provider=provider, model="m", base_url="http://127.0.0.1:1/v1")
    ctx.edits.set_fields["messages"] = list(ctx.body["messages"])
    stage._keep_or_unshare(ctx, checker, keep=True)
    stage.forget_parsed_for_litellm(ctx, checker)
    own = provider != "openai"
    assert ctx.body == orjson.loads(ctx.raw_body)
    for messages in (ctx.body["messages"], ctx.edits.set_fields["messages"]):
        assert (messages[1] is not first.body["messages"][1]) is own
    kept = checker.reuse.messages._kept
    assert (ctx.raw_body in [k.raw for k in kept.values()]) is not own


def asyncio_run(awaitable: Any) -> Any:
    import asyncio

    return asyncio.run(awaitable)


_CONTENTS = [
    "read the module and fix the failing test " * 20,
    "def step(x):\n    return x * 2  # keep\n" * 20,
    "deployed at 2026-03-12T14:03:07Z by the release job; request "
    "3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b failed",
]
_EDITS = st.tuples(
    st.sampled_from(["system", "second", "edit", "append", "drop", "last", "style", "same"]),
    st.integers(0, 400),
    st.sampled_from(range(len(_CONTENTS))),
)


@settings(max_examples=40, deadline=None)
@given(st.integers(90, 140), st.lists(_EDITS, min_size=2, max_size=6))
def test_checks_of_shared_parses_equal_checks_of_whole_ones(
    count: int, edits: list[tuple[str, int, int]]
) -> None:
    """The prefix check takes a shared run's segments from the previous body's cut
    (`MessageReuse.known`): every check equals the check of the body parsed whole."""
    contents = [_CONTENTS[i % 2] for i in range(count)]
    systems, style, last = ["You are a coding agent."], 0, "go"
    sharing, whole = PrefixChecker(), PrefixChecker()
    records: dict[str, list[Any]] = {"sharing": [], "whole": []}
    for step, (kind, at, which) in enumerate(edits):
        if kind == "system":  # a fresh prompt: the rest repeats
            systems = [f"You are a coding agent. Session {step}.", *systems[1:]]
        elif kind == "second":  # one more or one fewer leading system message
            systems = systems[:1] if len(systems) > 1 else [*systems, "Be brief."]
        elif kind == "edit":
            contents[at % len(contents)] = _CONTENTS[which]
        elif kind == "append":
            contents += [_CONTENTS[which], _CONTENTS[0]]
        elif kind == "drop":
            del contents[at % len(contents)]
        elif kind == "last":
            last = f"step {step}"
        elif kind == "style":
            style = (style + 1) % len(_STYLES)
        messages = [{"role": "system", "content": text} for text in systems]
        messages += [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"}
            for i, text in enumerate(contents)
        ]
        messages.append({"role": "user", "content": last})
        raw = _STYLES[style]({"model": "bench-gpt", "messages": messages})
        assert len(raw) >= MIN_BYTES
        checks = {}
        for name, checker in (("sharing", sharing), ("whole", whole)):
            ctx = RequestContext(raw_body=raw, headers={})
            parse(ctx, checker.reuse if name == "sharing" else None)
            check = checker.check(ctx.body, RULE, records[name], raw=raw)
            if name == "sharing":
                keep_messages(ctx, checker.reuse)
            records[name] = [check.record, *records[name][:3]]
            checks[name] = check
        assert checks["sharing"] == checks["whole"]


def test_a_fresh_prompt_checks_with_the_previous_cut() -> None:
    checker = PrefixChecker()
    cuts = []
    for step in range(3):
        raw = _fresh(step)
        ctx = RequestContext(raw_body=raw, headers={})
        parse(ctx, checker.reuse)
        known = checker.reuse.messages._runs.get(id(raw))
        check = checker.check(ctx.body, RULE, [], raw=raw)
        keep_messages(ctx, checker.reuse)
        cuts.append(check.request.segments[check.request.header_count :])
        assert (known is not None) is (step > 0)
        if step:  # the repeated messages' segments are the very ones cut before
            assert all(a is b for a, b in zip(cuts[-1][:-1], cuts[-2][:-1], strict=True))
            assert cuts[-1][-1] is not cuts[-2][-1]


def test_litellm_gets_its_own_copies_of_a_task_steps_shared_messages() -> None:
    """A task's step shares its repeated messages with the step before (`_parse_reusing`):
    on a route through litellm it gets its own copies too."""
    checker, headers = PrefixChecker(), {"x-task-id": "t"}
    steps = []
    for step in range(2):
        raw = _fresh(0).replace(b"Next step 0", f"Next step {step}".encode())
        ctx = RequestContext(raw_body=raw, headers=headers)
        parse(ctx, checker.reuse)
        assert ctx.request is not None
        checker.check(
            ctx.body,
            RULE,
            [],
            raw=raw,
            reuse_key="task:t",
            validated=ctx.request.messages,
            keep_parsed=True,
        )
        steps.append(ctx)
    first, second = steps
    assert second.body["messages"][1] is first.body["messages"][1]  # shared by the parse
    second.task = TaskRef(task_id="t", implicit=False)
    second.route = ModelRoute(provider="anthropic", model="m", base_url="http://127.0.0.1:1/v1")
    stage._keep_or_unshare(second, checker, keep=False)
    assert second.body == orjson.loads(second.raw_body)
    assert second.body["messages"][1] is not first.body["messages"][1]


def test_a_fresh_series_leaves_no_body_noted_and_a_litellm_fallback_forgets_its_own() -> None:
    """What is noted of a body from its parse to its check holds the body: it is dropped
    at the check (kept or not), and a fallback to litellm after the keep forgets it."""
    checker = PrefixChecker()
    openai = ModelRoute(provider="openai", model="m", base_url="http://127.0.0.1:1/v1")
    for step in range(4):
        ctx = RequestContext(raw_body=_fresh(step), headers={})
        parse(ctx, checker.reuse)
        checker.check(ctx.body, RULE, [], raw=ctx.raw_body)
        ctx.task, ctx.route = TaskRef(task_id="implicit", implicit=True), openai
        stage._keep_or_unshare(ctx, checker, keep=True)
        notes = checker.reuse.messages
        assert not (notes._walks or notes._runs or notes._cuts or notes._shared)
        assert [kept.raw for kept in notes._kept.values()] == [ctx.raw_body]
    ctx.route = ModelRoute(provider="anthropic", model="m", base_url="http://127.0.0.1:1/v1")
    shared = ctx.body["messages"]
    stage.forget_parsed_for_litellm(ctx, checker)  # the fallback's attempt
    assert not checker.reuse.messages._kept
    assert ctx.body["messages"] == shared and ctx.body["messages"][1] is not shared[1]
