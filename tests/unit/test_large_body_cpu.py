"""The 1 MB agent step's cheaper parse and prefix history are the same answers, exactly.

The depth check counts brackets on the bytes natively and walks the parsed value only when
the count says it may be too deep; a stored history record is rebuilt once per dict, large
ones too, and the record a request just made is the one its stored dict rebuilds into.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
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
from gateway.pipeline.offload import INLINE_VALUES, OFF_LOOP_BYTES, RELEASE_BYTES, parses_inline
from gateway.pipeline.parse import PLAIN_MESSAGES, _validated_plain, parse, parse_request
from gateway.prefix import rule_for
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.record import PrefixRecord, chain_fingerprints
from gateway.schemas.body import MAX_DEPTH, depth_over, load_object
from gateway.schemas.chat import ChatRequest
from gateway.state.memory import MemoryState

pytestmark = pytest.mark.skipif(not rawjson.NATIVE, reason="the native walker is not built")

_TEXT = st.text(alphabet='[]{}"\\ab,:é\n', max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_the_bracket_depth_of_any_json_is_its_nesting(value: Any, spaced: bool) -> None:
    raw = json.dumps(value, indent=1 if spaced else None).encode()
    assert rawjson.bracket_depth(raw) == _depth(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_TEXT, _JSON, max_size=4), st.integers(1, 6))
def test_load_object_refuses_exactly_what_the_walk_refuses(
    body: dict[str, Any], limit: int
) -> None:
    raw = orjson.dumps(body)
    if depth_over(orjson.loads(raw), limit):
        with pytest.raises(InvalidRequestError, match="nested more than"):
            load_object(raw, limit)
    else:
        assert load_object(raw, limit) == body


def test_a_deep_value_a_repeated_key_drops_is_not_refused() -> None:
    deep = b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5)
    raw = b'{"model":"m","messages":' + deep + b',"messages":[]}'
    assert rawjson.bracket_depth(raw) == MAX_DEPTH + 6  # the bytes nest that deep
    assert load_object(raw) == {"model": "m", "messages": []}  # the value does not
    with pytest.raises(InvalidRequestError, match="nested more than 128 levels"):
        load_object(b'{"model":"m","messages":' + deep + b"}")


def test_bracket_depth_is_unknown_for_what_is_not_json_bytes() -> None:
    assert rawjson.bracket_depth(b'{"a":"no end') is None
    assert rawjson.bracket_depth(bytearray(b"[]")) is None  # type: ignore[arg-type]
    assert rawjson.bracket_depth(b"") == 0


def _body(turns: int, step: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"turn {turn}"},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "x = 1\n" * 20},
        ]
    messages.append({"role": "user", "content": f"step {step}"})
    return {"model": "m", "messages": messages}


def test_a_large_history_record_is_rebuilt_once_per_stored_dict() -> None:
    record = PrefixChecker().check(_body(700, 0), rule_for("openai")).record
    assert len(record.segment_digests) > 1_000
    stored = record.to_dict()
    first = stage._record_of(stored)
    assert first == PrefixRecord.from_dict(stored)
    assert stage._record_of(stored) is first  # not rebuilt
    assert stage._record_of(dict(stored)) is not first  # another dict: rebuilt


def test_the_record_cache_holds_at_most_its_segments_of_large_records() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    big = [checker.check(_body(600, i), rule).record.to_dict() for i in range(20)]
    held = [(item, stage._record_of(item)) for item in big]  # keep the dicts alive
    assert 0 < stage._PARSED_HELD[0] <= stage.PARSED_LARGE_SEGMENTS
    kept = stage._PARSED_LARGE.values()
    assert stage._PARSED_HELD[0] == sum(len(r.segment_digests) for _, r in kept)
    assert stage._record_of(held[-1][0]) is held[-1][1]  # the latest is kept
    assert stage._record_of(held[0][0]) is not held[0][1]  # the first was dropped: rebuilt
    small = checker.check(_body(3, 0), rule).record.to_dict()
    assert stage._record_of(small) is stage._record_of(small)
    assert id(small) in stage._PARSED and id(small) not in stage._PARSED_LARGE


def test_remember_keeps_the_record_its_stored_dict_rebuilds_into() -> None:
    checker, rule, state = PrefixChecker(), rule_for("openai"), MemoryState()
    check = checker.check(_body(500, 1), rule)
    outcome = stage.PrefixOutcome(check, "openai", ["task:t", "caller:c:m"])

    async def run() -> list[dict[str, Any]]:
        await stage.remember(outcome, state)
        return await state.prefix_history(["task:t"])

    (stored,) = asyncio.run(run())
    kept = stage._record_of(stored)
    assert kept is check.record  # the very record, not a rebuilt copy
    assert kept == PrefixRecord.from_dict(stored)
    assert kept.fingerprints == PrefixRecord.from_dict(stored).fingerprints


def _step(
    checker: PrefixChecker, raw: bytes, task: str = "t", keep_parsed: bool = True
) -> RequestContext:
    """One chat request through the parse and the prefix check, as the pipeline runs them
    (`keep_parsed=False`: as on a route through litellm, which may change the messages)."""
    ctx = RequestContext(raw_body=raw, headers={"x-task-id": task})
    parse(ctx, checker.reuse)
    assert ctx.request is not None
    assert ctx.body == orjson.loads(raw)  # whatever was reused, the body parsed whole
    checker.check(
        ctx.body,
        rule_for("openai"),
        raw=raw,
        reuse_key=f"task:{task}",
        validated=ctx.request.messages,
        keep_parsed=keep_parsed,
    )
    return ctx


def _whole(raw: bytes) -> ChatRequest:
    ctx = RequestContext(raw_body=raw, headers={})
    parse(ctx)
    assert ctx.request is not None
    return ctx.request


def _history(turns: int) -> list[dict[str, Any]]:
    messages = _body(turns, 0)["messages"][:-1]
    messages[2] = {"role": "assistant", "content": None, "tool_calls": [{"id": "c0"}]}
    return messages


def test_an_agent_step_validates_only_its_new_messages() -> None:
    checker, history = PrefixChecker(), _history(400)
    first = _step(checker, orjson.dumps({"model": "m", "messages": history}))
    history.append({"role": "user", "content": "next"})
    raw = orjson.dumps({"model": "m", "messages": history, "max_tokens": 9})
    second = _step(checker, raw)
    assert second.request == _whole(raw)
    assert second.request is not None and first.request is not None
    assert second.request.messages[5] is first.request.messages[5]  # taken, not validated
    assert second.request.messages[-1] is not history[-1]  # the new one validated
    other = _step(checker, raw, task="u")  # another task's history is not this one's
    assert other.request is not None and other.request.messages[5] is not first.request.messages[5]


def test_an_agent_step_parses_only_its_new_messages() -> None:
    checker, history = PrefixChecker(), _history(400)
    first = _step(checker, orjson.dumps({"model": "m", "messages": history}))
    history.append({"role": "user", "content": "next"})
    raw = orjson.dumps({"model": "m", "messages": history, "max_tokens": 9})
    second = _step(checker, raw)
    assert second.body == orjson.loads(raw)
    assert second.body["messages"][5] is first.body["messages"][5]  # taken, not parsed
    assert second.body["messages"] is not first.body["messages"]  # a list of its own
    assert second.body["messages"][-1] == {"role": "user", "content": "next"}
    spaced = json.dumps({"model": "m", "messages": history}, indent=1).encode()
    third = _step(checker, spaced)  # other bytes: parsed whole
    assert third.body["messages"][5] is not first.body["messages"][5]


def test_messages_a_request_may_change_are_not_kept_for_the_next_parse() -> None:
    """On a route through litellm (`keep_parsed=False`) the messages go to code that may
    change them: the next step parses its own, and what it parsed is not kept either."""
    checker, history = PrefixChecker(), _history(400)
    first = _step(checker, orjson.dumps({"model": "m", "messages": history}))
    raw = orjson.dumps({"model": "m", "messages": [*history, {"role": "user", "content": "a"}]})
    second = _step(checker, raw, keep_parsed=False)
    assert second.body["messages"][5] is first.body["messages"][5]  # taken before the route
    seen = checker.reuse._seen["task:t"]
    assert seen.parsed is None and seen.validated is not None
    raw = orjson.dumps({"model": "m", "messages": [*history, {"role": "user", "content": "b"}]})
    third = _step(checker, raw)
    assert third.body["messages"][5] is not first.body["messages"][5]
    assert third.body == orjson.loads(raw)


@pytest.mark.parametrize(
    "tail",
    [b",]", b", ]", b",{]", b',{"role":"user"} ,]', b",1e999]", b',{"role":"user"}', b"]"],
)
def test_a_step_whose_new_part_is_not_json_is_refused_as_the_whole_parse_refuses_it(
    tail: bytes,
) -> None:
    checker, history = PrefixChecker(), _history(400)
    known = orjson.dumps({"model": "m", "messages": history})
    _step(checker, known)
    raw = known[: known.rindex(b"]")] + tail + b"}"
    if tail == b"]":  # the same body again, valid: taken whole from the previous parse
        assert _step(checker, raw).body == orjson.loads(raw)
        return
    with pytest.raises(InvalidRequestError) as reused:
        _step(checker, raw)
    with pytest.raises(InvalidRequestError) as whole:
        _whole(raw)
    assert str(reused.value) == str(whole.value)


def test_a_step_nested_too_deep_in_its_new_part_is_refused() -> None:
    checker, history = PrefixChecker(), _history(400)
    _step(checker, orjson.dumps({"model": "m", "messages": history}))
    deep: Any = "x"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    body = {"model": "m", "messages": [*history, {"role": "user", "content": "a", "x": deep}]}
    with pytest.raises(InvalidRequestError, match="nested more than"):
        _step(checker, orjson.dumps(body))


def test_an_invalid_new_message_is_refused_as_the_whole_validation_refuses_it() -> None:
    checker, history = PrefixChecker(), _history(400)
    _step(checker, orjson.dumps({"model": "m", "messages": history}))
    for bad in ({"role": "robot"}, {"role": "user", "content": 5}, "text"):
        raw = orjson.dumps({"model": "m", "messages": [*history, bad]})
        with pytest.raises(InvalidRequestError) as reused:
            _step(checker, raw)
        with pytest.raises(InvalidRequestError) as whole:
            _whole(raw)
        assert str(reused.value) == str(whole.value)
        assert reused.value.param == whole.value.param
    raw = orjson.dumps({"model": "", "messages": [*history, {"role": "user"}]})
    with pytest.raises(InvalidRequestError, match="'model'"):
        _step(checker, raw)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.sampled_from(["append", "edit", "drop", "space", "invalid", "model", "comma"]),
        min_size=1,
        max_size=6,
    )
)
def test_any_series_of_steps_parses_as_each_body_whole(moves: list[str]) -> None:
    checker, history, spaced = PrefixChecker(), _history(300), False
    for move in moves:
        if move == "append":
            history = [*history, {"role": "user", "content": f"more {len(history)}"}]
        elif move == "edit":
            history = [*history[:40], {"role": "user", "content": "edited"}, *history[41:]]
        elif move == "drop":
            history = history[:-2]
        elif move == "space":
            spaced = not spaced
        tail = [{"role": "nobody"}] if move == "invalid" else []
        body = {"model": "" if move == "model" else "m", "messages": [*history, *tail]}
        raw = json.dumps(body, indent=1 if spaced else None).encode()
        if move == "comma":  # a trailing comma after the history: not JSON
            raw = raw[: raw.rindex(b"]")] + b",]}"
        try:
            whole: ChatRequest | str = _whole(raw)
        except InvalidRequestError as exc:
            whole = str(exc)
        try:
            got: ChatRequest | str | None = _step(checker, raw).request
        except InvalidRequestError as exc:
            got = str(exc)
        assert got == whole


def test_a_body_over_the_release_size_shares_nothing() -> None:
    """`release` takes such a body's messages apart when it ends: none may be shared."""
    checker = PrefixChecker()
    history = _history(300)
    history[1] = {"role": "user", "content": "x" * (RELEASE_BYTES + 1)}
    first = _step(checker, orjson.dumps({"model": "m", "messages": history}))
    raw = orjson.dumps({"model": "m", "messages": [*history, {"role": "user", "content": "n"}]})
    assert checker.reuse.validated_prefix("task:t", raw)  # the store would give them
    second = _step(checker, raw)
    assert first.request is not None and second.request is not None
    assert second.request == _whole(raw)
    assert not set(map(id, second.request.messages)) & set(map(id, first.request.messages))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12),
    st.booleans(),
)
def test_a_shared_chain_is_the_chain_hashed_whole(
    first: list[str], second: list[str], other_model: bool
) -> None:
    checker, rule = PrefixChecker(), rule_for("openai")

    def record(contents: list[str], model: str) -> PrefixRecord:
        messages = [{"role": "user", "content": c} for c in contents]
        return checker.check({"model": model, "messages": messages}, rule).record

    earlier = PrefixRecord.from_dict(record(first, "m").to_dict())  # as stored: chain made
    current = record(second, "n" if other_model else "m")
    shared = sum(
        1
        for _ in itertools.takewhile(
            lambda p: p[0] == p[1],
            zip(current.segment_digests, earlier.segment_digests, strict=False),
        )
    )
    for claimed in {shared, shared + 1, max(shared - 1, 0)}:  # a wrong count is refused
        fresh = dataclasses.replace(current, _chain=[])
        fresh.share_chain(earlier, claimed)
        assert fresh.fingerprints == chain_fingerprints(
            "openai", fresh.model, fresh.segment_digests
        )


def test_an_agent_step_shares_its_history_s_chain() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    stored = PrefixRecord.from_dict(checker.check(_body(300, 0), rule).record.to_dict())
    check = checker.check(_body(300, 1), rule, [stored])
    assert check.record._chain  # made from the stored one's, not left to to_dict
    assert check.record.fingerprints[:600] == stored.fingerprints[:600]
    assert check.record.fingerprints == chain_fingerprints(
        "openai", "m", check.record.segment_digests
    )


def _separators(value: Any) -> int:
    if isinstance(value, dict):
        return max(len(value) - 1, 0) + sum(map(_separators, value.values()))
    if isinstance(value, list):
        return max(len(value) - 1, 0) + sum(map(_separators, value))
    return 0


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_the_value_commas_of_any_json_are_its_separators(value: Any, spaced: bool) -> None:
    raw = json.dumps(value, indent=1 if spaced else None).encode()
    assert rawjson.value_commas(raw) == _separators(value)


def test_commas_in_strings_do_not_keep_a_body_from_parsing_inline() -> None:
    text = "a, b, c, " * 1_000  # 3,000 commas a message, none a value
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}] * 40})
    assert len(raw) > OFF_LOOP_BYTES and raw.count(b",") > INLINE_VALUES
    assert rawjson.value_commas(raw) == 40 - 1 + 40 + 1  # messages, and role/content each
    assert parses_inline(raw)
    assert rawjson.value_commas(b'{"a":"no end,') == 1  # not JSON: every comma counts


_ROLE = st.sampled_from(["system", "user", "assistant", "tool", "developer", "function"])
_MESSAGE = st.fixed_dictionaries(
    {"role": _ROLE | st.sampled_from(["robot", "User", "", 5]) | st.none()},
    optional={
        "content": st.text(max_size=5)
        | st.none()
        | st.integers(-(2**63), 2**63 - 1)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}))
        | st.lists(st.text(max_size=3), max_size=2),
        "tool_calls": st.lists(st.dictionaries(st.text(max_size=3), st.text(max_size=3))),
        "name": st.text(max_size=3),
    },
) | st.sampled_from(["text", 5, None, [], {"content": "no role"}, {"role": ["user"]}])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_MESSAGE, max_size=4),
    st.integers(0, 8),
    st.fixed_dictionaries(
        {},
        optional={
            "model": st.sampled_from(["m", "", 5]),
            "max_tokens": st.sampled_from([1, 0, "5", 2.0]),
            "stream": st.sampled_from([True, "yes"]),
        },
    ),
)
def test_plain_messages_taken_as_they_are_validate_as_pydantic_validates_them(
    odd: list[Any], at: int, fields: dict[str, Any]
) -> None:
    plain = [{"role": "user", "content": f"m{i}"} for i in range(PLAIN_MESSAGES)]
    messages = [*plain[:at], *odd, *plain[at:]]
    body = orjson.loads(orjson.dumps({"model": "m", **fields, "messages": messages}))
    try:
        whole: ChatRequest | None = ChatRequest.model_validate(body)
    except ValueError:
        whole = None
    taken = _validated_plain(body)
    if taken is not None:  # only what pydantic accepts, as pydantic gives it
        assert taken == whole
        assert taken.messages == body["messages"]
    if (
        all(
            type(m) is dict and m.get("role") in _ROLE_NAMES and type(m.get("content")) in _PLAIN
            for m in messages
        )
        and whole is not None
    ):
        assert taken is not None  # every plain conversation takes the fast path
    short = {**body, "messages": body["messages"][: PLAIN_MESSAGES - 1]}
    if (taken_short := _validated_plain(short)) is not None:  # built: as pydantic gives it
        assert taken_short == ChatRequest.model_validate(short)


_ROLE_NAMES = ("system", "user", "assistant", "tool", "developer", "function")
_PLAIN = (str, type(None))


@settings(max_examples=200, deadline=None)
@given(_JSON | st.binary(max_size=30).map(lambda b: b.decode("latin-1")), st.booleans())
def test_depth_and_commas_are_both_counts_in_one_pass(value: Any, spaced: bool) -> None:
    raw = json.dumps(value, indent=1 if spaced else None).encode()
    for data in (raw, raw[: len(raw) // 2]):  # JSON, and cut short (a string may not end)
        assert rawjson.depth_and_commas(data) == (
            rawjson.bracket_depth(data),
            rawjson.value_commas(data),
        )


def test_a_large_body_s_depth_is_counted_once_and_still_refused() -> None:
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    pad = [{"role": "user", "content": "x" * 1000}] * 300
    raw = orjson.dumps({"model": "m", "messages": pad})[:-1] + b',"x":' + deep + b"}"
    assert len(raw) > OFF_LOOP_BYTES and parses_inline(raw)
    ctx = RequestContext(raw_body=raw, headers={})
    with pytest.raises(InvalidRequestError, match="nested more than"):
        asyncio.run(parse_request(ctx))


@pytest.mark.parametrize(("provider", "kept"), [("anthropic", False), ("openai", True)])
def test_a_fallback_through_litellm_drops_the_task_s_kept_messages(
    provider: str, kept: bool
) -> None:
    """A fallback replans after the prefix check kept the step's parsed messages; a
    fallback route through litellm, which may change them, must not leave them to reuse."""
    checker, history = PrefixChecker(), _history(400)
    ctx = _step(checker, orjson.dumps({"model": "m", "messages": history}))
    assert checker.reuse._seen["task:t"].parsed is not None
    ctx.task = TaskRef(task_id="t", implicit=False)
    ctx.route = ModelRoute(provider=provider, model="m", base_url="http://127.0.0.1:1/v1")
    stage.forget_parsed_for_litellm(ctx, checker)
    assert (checker.reuse._seen["task:t"].parsed is not None) is kept
    assert checker.reuse._seen["task:t"].validated is not None  # validation is not changed
