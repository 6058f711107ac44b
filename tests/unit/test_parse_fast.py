"""A chat request built without pydantic is the one pydantic validates, exactly.

`parse` takes plain messages as they are (`plain_messages`, natively) and builds
`ChatRequest` directly where every typed field is of the one type pydantic takes as it is
(`_built`); anything else, and every error, is pydantic's, so a 400 names the same field.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.errors import InvalidRequestError
from gateway.pipeline import parse as stage
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import BUILDS, _validated_plain, parse
from gateway.prefix.checker import PrefixChecker
from gateway.schemas.body import invalid_field, load_object
from gateway.schemas.chat import ChatRequest, StreamOptions

_ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
_SCALAR = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3) | st.just(1.5)
_ANY = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
_MESSAGE = (
    st.fixed_dictionaries(
        {"role": st.sampled_from(_ROLES) | st.sampled_from(["robot", "User", ""]) | _SCALAR},
        optional={
            "content": st.text(max_size=4)
            | st.none()
            | st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})
            )
            | _ANY,
            "name": st.text(max_size=3),
            "tool_calls": st.lists(
                st.dictionaries(st.text(max_size=3), _ANY, max_size=2), max_size=2
            ),
        },
    )
    | _ANY
)
_FIELDS = st.fixed_dictionaries(
    {"model": st.sampled_from(["m", "gpt-4o"])},
    optional={
        "stream": _SCALAR,
        "stream_options": st.none()
        | st.fixed_dictionaries({}, optional={"include_usage": _SCALAR, "other": _ANY})
        | _SCALAR,
        "max_tokens": st.integers(-1, 2**63 - 1) | _SCALAR,
        "max_completion_tokens": st.integers(-1, 5) | _SCALAR,
        "n": st.integers(-2, 2**63 - 1) | _SCALAR,
        "metadata": st.dictionaries(st.text(max_size=3), _ANY, max_size=3) | _ANY,
        "service_tier": st.sampled_from(["flex", "priority"]) | _SCALAR,
        "reasoning_effort": st.sampled_from(["low", "high"]) | _SCALAR,
        "temperature": _ANY,
        "tools": _ANY,
    },
)


def _pydantic(body: dict[str, Any]) -> ChatRequest | None:
    try:
        return ChatRequest.model_validate(body)
    except ValueError:
        return None


def _same(built: ChatRequest, body: dict[str, Any]) -> None:
    """`built` is what `ChatRequest.model_validate(body)` gives, in every part."""
    whole = ChatRequest.model_validate(body)
    assert built == whole
    assert list(built.__dict__) == list(whole.__dict__)  # field order
    assert built.model_fields_set == whole.model_fields_set
    assert built.model_extra == whole.model_extra
    assert list(built.model_extra or {}) == list(whole.model_extra or {})
    assert built.model_dump() == whole.model_dump()
    assert type(built.stream_options) is type(whole.stream_options)
    assert built.wants_usage_chunk == whole.wants_usage_chunk
    assert built.__pydantic_private__ == whole.__pydantic_private__


def test_the_builder_knows_the_request_model() -> None:
    assert BUILDS  # else every request goes through pydantic (a changed ChatRequest)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(_MESSAGE, max_size=4),
    _FIELDS,
    st.sampled_from(["messages", "model"]) | st.none(),
    st.sampled_from(["", 5, None, ["m"]]) | st.none(),
)
def test_a_built_request_is_pydantics(
    messages: list[Any], fields: dict[str, Any], missing: str | None, model: Any
) -> None:
    body = {**fields, "messages": messages}
    if model is not None:
        body["model"] = model  # a bad one
    raw = orjson.dumps({k: v for k, v in body.items() if k != missing})
    body = orjson.loads(raw)
    whole = _pydantic(body)
    taken = _validated_plain(body)
    if taken is not None:
        assert whole is not None  # nothing pydantic refuses is built
        _same(taken, body)
    ctx = RequestContext(raw_body=raw, headers={})
    if whole is None:
        with pytest.raises(InvalidRequestError) as caught:
            parse(ctx)
        try:
            ChatRequest.model_validate(body)
        except ValueError as exc:  # the same 400, naming the same field
            expected = invalid_field(exc.errors(), body=body)  # type: ignore[attr-defined]
        assert str(caught.value) == str(expected)
        assert caught.value.param == expected.param
    else:
        parse(ctx)
        assert ctx.request is not None and ctx.body == body
        _same(ctx.request, body)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"max_tokens": 16},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"stream": None, "n": 2, "metadata": {"a": [1]}, "service_tier": None, "user": "u"},
        {"max_completion_tokens": 5, "reasoning_effort": "low", "tools": [{"type": "function"}]},
    ],
)
@pytest.mark.parametrize("count", [1, 3, 200])
def test_usual_requests_are_built_without_pydantic(
    fields: dict[str, Any], count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages: list[Any] = [{"role": "system", "content": "s"}]
    messages += [
        {"role": "user", "content": [{"type": "text", "text": f"q{i}"}]}
        if i % 2
        else {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}"}]}
        for i in range(count - 1)
    ]
    raw = orjson.dumps({"model": "m", "messages": messages, **fields})

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pydantic validated a request the builder takes")

    expected = ChatRequest.model_validate(orjson.loads(raw))
    monkeypatch.setattr(stage.ChatRequest, "model_validate", refuse)
    monkeypatch.setattr(stage._MESSAGES, "validate_python", refuse)
    ctx = RequestContext(raw_body=raw, headers={})
    parse(ctx)
    monkeypatch.undo()
    assert ctx.request is not None
    _same(ctx.request, ctx.body)
    assert ctx.request == expected
    assert isinstance(ctx.request.stream_options, StreamOptions | None)
    assert ctx.request.messages is not ctx.body["messages"]  # a list of its own, as pydantic's


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": ""}, "model"),
        ({"model": 5}, "model"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"metadata": [1]}, "metadata"),
        ({"n": 1.0}, "n"),
        ({"service_tier": 3}, "service_tier"),
    ],
)
@pytest.mark.parametrize("count", [1, 200])
def test_a_bad_field_is_still_named(fields: dict[str, Any], param: str, count: int) -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(count)]
    raw = orjson.dumps({"model": "m", "messages": messages, **fields})
    with pytest.raises(InvalidRequestError) as caught:
        parse(RequestContext(raw_body=raw, headers={}))
    assert caught.value.param == param
    assert f"invalid field '{param}'" in str(caught.value)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": ["x"]}], "messages[0].content"),
        (["x"], "messages[0]"),
    ],
)
def test_a_bad_message_is_still_named(messages: list[Any], param: str) -> None:
    raw = orjson.dumps({"model": "m", "messages": messages})
    with pytest.raises(InvalidRequestError) as caught:
        parse(RequestContext(raw_body=raw, headers={}))
    assert caught.value.param == param


@settings(max_examples=400, deadline=None)
@given(st.lists(_MESSAGE, max_size=5) | _ANY)
def test_the_native_check_is_the_python_one(messages: Any) -> None:
    roles = frozenset(_ROLES)
    messages = orjson.loads(orjson.dumps(messages))
    native = rawjson.plain_messages(messages, roles)
    saved, rawjson._native_plain = rawjson._native_plain, None
    try:
        assert rawjson.plain_messages(messages, roles) == native
    finally:
        rawjson._native_plain = saved
    if native:  # plain messages validate as themselves
        assert stage._MESSAGES.validate_python(messages) == messages


@pytest.mark.skipif(not rawjson.NATIVE, reason="the native walker is not built")
def test_an_agent_steps_new_messages_are_taken_or_validated() -> None:
    """A step whose new messages are plain takes them; one with a message pydantic must
    validate still gets pydantic's value or its error."""
    checker = PrefixChecker()
    history: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(80)]
    for new, ok in (
        ({"role": "assistant", "content": "a", "tool_calls": [{"id": "c"}]}, True),
        ({"role": "user", "content": ["text"]}, False),
        ({"role": "tool", "content": None}, True),
    ):
        steps = [*history, new]
        raw = orjson.dumps({"model": "m", "messages": steps, "max_tokens": 4})
        ctx = RequestContext(raw_body=raw, headers={"x-task-id": "t"})
        if not ok:
            with pytest.raises(InvalidRequestError) as caught:
                parse(ctx, checker.reuse)
            assert caught.value.param == f"messages[{len(history)}].content"
            continue
        parse(ctx, checker.reuse)
        assert ctx.request is not None
        _same(ctx.request, orjson.loads(raw))
        checker.check(
            ctx.body, _rule(), raw=raw, reuse_key="task:t", validated=ctx.request.messages
        )
        history = steps


def _rule() -> Any:
    from gateway.prefix import rule_for

    return rule_for("openai")


@pytest.mark.parametrize("limit", [1, 2, 3, 128])
def test_a_short_body_is_held_to_the_depth_limit_too(limit: int) -> None:
    """A body shorter than 2 * (limit + 1) bytes cannot nest deeper than `limit` (each
    level takes two bracket bytes), so it is not counted; the shortest that can, is."""
    for depth in (limit, limit + 1):
        inner = b"[" * (depth - 1) + b"]" * (depth - 1)
        raw = b"{}" if depth == 1 else b'{"a":' + inner + b"}"
        if depth <= limit:
            assert load_object(raw, limit) == orjson.loads(raw)
        else:
            with pytest.raises(InvalidRequestError, match="nested more than"):
                load_object(raw, limit)
