"""A large body is parsed with the collector paused and its messages out of cyclic GC
(`parse._load`): the body and the request are what the plain parse gives, errors are the
same, the collector is left as it was, and a cycle made later through a message is freed."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequestError
from gateway.pipeline import parse as stage
from gateway.pipeline.context import RequestContext
from gateway.schemas.body import MAX_DEPTH, load_object
from gateway.schemas.chat import ChatRequest

pytestmark = pytest.mark.skipif(
    stage._UNTRACK_ITEMS is None, reason="needs the native _locate module"
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=10,
)


def _tool_step(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 100},
        {"role": "user", "content": [{"type": "text", "text": f"step {i}"}]},
    ]


def _large_body() -> bytes:
    messages = [{"role": "system", "content": "s"}]
    for i in range(400):
        messages += _tool_step(i)
    raw = orjson.dumps({"model": "m", "messages": messages, "max_tokens": 5})
    assert len(raw) >= stage.UNTRACK_BYTES
    return raw


def _tracked_inside(value: Any) -> bool:
    """Whether anything under `value` (itself included) is tracked."""
    if gc.is_tracked(value):
        return True
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return any(_tracked_inside(item) for item in items)


def test_a_large_body_parses_as_before_with_its_messages_untracked() -> None:
    raw = _large_body()
    ctx = RequestContext(raw_body=raw, headers={})
    stage.parse(ctx)
    assert ctx.body == orjson.loads(raw)
    assert ctx.request == ChatRequest.model_validate(orjson.loads(raw))
    messages = ctx.body["messages"]
    assert gc.is_tracked(messages) and gc.is_tracked(ctx.body)
    assert not any(_tracked_inside(m) for m in messages)
    assert gc.isenabled()


def test_a_small_body_is_left_to_cpython() -> None:
    ctx = RequestContext(
        raw_body=orjson.dumps({"model": "m", "messages": _tool_step(0)}), headers={}
    )
    stage.parse(ctx)
    assert gc.is_tracked(ctx.body["messages"][0]["tool_calls"])


@pytest.mark.parametrize("enabled", [True, False])
def test_errors_are_the_same_and_the_collector_is_left_as_it_was(enabled: bool) -> None:
    bad = _large_body()[:-1]
    deep = (
        b'{"model":"m","pad":"'
        + b"x" * stage.UNTRACK_BYTES
        + b'","m":'
        + b"[" * 200
        + b"]" * 200
        + b"}"
    )
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        for raw in (bad, deep, b"[" + b"1," * stage.UNTRACK_BYTES + b"1]"):
            with pytest.raises(InvalidRequestError) as ours:
                stage._load(raw, None)
            with pytest.raises(InvalidRequestError) as plain:
                load_object(raw, MAX_DEPTH)
            assert str(ours.value) == str(plain.value)
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


class _Holder:
    pass


def test_a_cycle_made_later_through_a_message_is_freed() -> None:
    ctx = RequestContext(raw_body=_large_body(), headers={})
    stage.parse(ctx)
    holder = _Holder()
    message = ctx.body["messages"][1]
    message["holder"] = holder  # the dict takes itself back into cyclic GC
    holder.message = message  # type: ignore[attr-defined]
    gone = weakref.ref(holder)
    del holder, message, ctx
    gc.collect()
    assert gone() is None


@settings(max_examples=200, deadline=None)
@given(values=st.lists(JSON, max_size=6))
def test_untracked_items_hold_nothing_tracked(values: list[Any]) -> None:
    parsed = orjson.loads(orjson.dumps(values))
    count = stage._UNTRACK_ITEMS(parsed)  # type: ignore[misc]
    assert parsed == orjson.loads(orjson.dumps(values))  # the values are untouched
    assert count == sum(not _tracked_inside(item) for item in parsed) == len(parsed)
    assert gc.is_tracked(parsed)
