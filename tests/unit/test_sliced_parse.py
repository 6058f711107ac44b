"""A large body parsed a slice at a time gives what `parse` gives: the same body, the same
validated request, the same 400 (message and field), whatever the bytes.

`parse_request` slices bodies over 256 KiB. Here the thresholds are set to a few bytes,
so the small bodies hypothesis makes are cut into many slices, split at every level the
slicer splits, and the result is compared with `parse` on the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.errors import InvalidRequestError
from gateway.pipeline import parse as parse_module
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import parse, parse_request, parse_steps
from gateway.schemas import sliced
from gateway.schemas.body import MAX_DEPTH

pytestmark = pytest.mark.skipif(
    not rawjson.NATIVE and not os.environ.get("CI"),
    reason="the native JSON walker was not built (no C compiler); CI requires it",
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = st.sampled_from(["model", "messages", "a", "é", 'q"uote', "role", "content", ""])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
ROLES = st.sampled_from(["user", "system", "assistant", "tool", "bot"]) | VALUES
MESSAGES = (
    st.fixed_dictionaries(
        {"role": ROLES},
        optional={"content": st.text(max_size=8) | st.none() | VALUES, "name": VALUES},
    )
    | VALUES
)
BODIES = st.fixed_dictionaries(
    {"messages": st.lists(MESSAGES, max_size=8) | VALUES},
    optional={
        "model": st.just("chat") | VALUES,
        "stream": st.booleans() | VALUES,
        "max_tokens": st.integers(-2, 5) | VALUES,
        "metadata": st.dictionaries(KEYS, VALUES, max_size=3) | VALUES,
        "tools": st.lists(VALUES, max_size=4),
    },
)


@pytest.fixture(autouse=True)
def tiny_slices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Slice bodies of a few bytes as the gateway slices bodies of megabytes."""
    monkeypatch.setattr(parse_module, "OFF_LOOP_BYTES", 0)
    monkeypatch.setattr(parse_module, "parses_inline", lambda raw: False)
    monkeypatch.setattr(parse_module, "inline_bound", lambda raw: (False, None))
    monkeypatch.setattr(sliced, "SPLIT_BYTES", 4)
    monkeypatch.setattr(sliced, "SLICE_ITEMS", 2)
    monkeypatch.setattr(sliced, "SLICE_BYTES", 24)
    monkeypatch.setattr(sliced, "WINDOW_CHILDREN", 3)
    yield


def _outcome(raw: bytes, *, sliced_parse: bool) -> tuple[str, Any]:
    """What a parse gives: the error's text and field, or the body and request."""
    ctx = RequestContext(raw_body=raw, headers={})
    try:
        if sliced_parse:
            asyncio.run(parse_request(ctx))
        else:
            parse(ctx)
    except InvalidRequestError as exc:
        return "error", (type(exc), exc.message, exc.param)
    assert ctx.request is not None
    request = ctx.request
    dumped = (request.model_dump(), request.model_fields_set, request.__pydantic_extra__)
    return "ok", (ctx.body, list(ctx.body), request, dumped, list(request.messages))


def _same(raw: bytes) -> tuple[str, Any]:
    plain = _outcome(raw, sliced_parse=False)
    assert _outcome(raw, sliced_parse=True) == plain
    if plain[0] == "ok":  # built by the slicer itself, not by its fallback to `parse`
        body, request = sliced.drive(parse_steps(raw))
        assert body == plain[1][0] and request == plain[1][2]
    return plain


def _spaced(value: Any, gap: str) -> bytes:
    """JSON with `gap` around every separator: the slicer must skip any whitespace."""
    text = json.dumps(value, ensure_ascii=False, separators=(gap + "," + gap, gap + ":" + gap))
    return (gap + text + gap).encode()


@FAST
@given(BODIES, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_sliced_parse_matches_parse_on_any_body(body: dict[str, Any], gap: str) -> None:
    _same(_spaced(body, gap))


@FAST
@given(BODIES, st.integers(0, 400), st.binary(min_size=1, max_size=3))
def test_sliced_parse_matches_parse_on_broken_bytes(
    body: dict[str, Any], at: int, junk: bytes
) -> None:
    raw = _spaced(body, "")
    at %= len(raw) + 1
    _same(raw[:at] + junk + raw[at:])  # inserted bytes
    _same(raw[:at])  # truncated


@FAST
@given(st.lists(st.sampled_from(["model", "messages", "a", "stream"]), min_size=1, max_size=6))
def test_repeated_keys_keep_the_first_place_and_the_last_value(keys: list[str]) -> None:
    values = {"model": '"chat"', "messages": '[{"role":"user"}]', "a": "[1,2,3]", "stream": "true"}
    members = [f'"{key}":{values[key]}' for key in keys]
    members += [f'"{key}":{values[key]}' for key in ("model", "messages")]
    members.append('"messages":[{"role":"system","content":"x"},{"role":"user"}]')
    _same(("{" + ",".join(members) + "}").encode())


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[{"role":"user","content":NaN}]}',  # the walker reads NaN
        b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}',  # orjson does not
        b'{"model":"m","messages":[{"role":"user"}]} x',
        b'{"model":"m","messages":[{"role":"user"}]}\xff',
        b'\xef\xbb\xbf{"model":"m","messages":[{"role":"user"}]}',
        b'[{"model":"m"}]',
        b"",
        b'{"model":5,"messages":[{"role":"user"},{"role":"bot"}],"stream":"x"}',
        b'{"messages":[{"role":"user"},{"role":"bot"}],"stream":"x"}',
        b'{"model":"m","messages":[],"stream":"x"}',
        b'{"model":"m","messages":[{"role":"user"}, {"content":1}],"max_tokens":0}',
        b'{"model":"m","messages":{"0":{"role":"user"}}}',
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"text"}, 5]}]}',
        b'{"model":"m","messages":[{"role":"user"}],"n":123456789012345678901234567890}',
    ],
)
def test_sliced_parse_matches_parse_on_edge_cases(raw: bytes) -> None:
    _same(raw)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 1_023, 1_025, 5_000])
@pytest.mark.parametrize("where", ["messages", "member"])
def test_sliced_parse_limits_depth_as_parse_does(depth: int, where: str) -> None:
    if where == "messages":  # the body, the array and the message are three levels
        deep = b"[" * (depth - 3) + b"]" * (depth - 3)
        raw = b'{"model":"m","messages":[{"role":"user"},{"role":"user","x":' + deep + b"}]}"
    else:
        deep = b"[" * (depth - 1) + b"]" * (depth - 1)
        raw = b'{"model":"m","messages":[{"role":"user"}],"x":' + deep + b"}"
    kind, _ = _same(raw)
    assert kind == ("ok" if depth <= MAX_DEPTH else "error")


def test_a_body_of_many_messages_is_built_in_many_slices() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": str(i)} for i in range(50)]}
    steps = parse_steps(orjson.dumps(body))
    yields = 0
    sent: Any = None
    try:
        while True:
            request = steps.send(sent)
            sent = request.call() if isinstance(request, sliced.Offload) else None
            yields += 1
    except StopIteration as done:
        parsed, validated = done.value
    assert parsed == body and validated.messages == body["messages"]
    assert yields > 50  # 25 slices to build, 25 to validate, and the walks


async def test_the_loop_runs_other_work_between_slices() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": str(i)} for i in range(50)]}
    ctx = RequestContext(raw_body=orjson.dumps(body), headers={})
    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_work())
    await parse_request(ctx)
    task.cancel()
    assert ctx.body == body and ctx.request is not None
    assert ticks >= 50  # 25 slices built, 25 validated, each followed by a turn for others


async def test_without_the_native_walker_a_large_body_is_parsed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parse_module, "NATIVE", False)
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}] * 20})
    ctx = RequestContext(raw_body=raw, headers={})
    await parse_request(ctx)
    assert ctx.request is not None and ctx.body == orjson.loads(raw)
    with pytest.raises(InvalidRequestError, match="messages"):
        await parse_request(RequestContext(raw_body=raw.replace(b'"user"', b'"bot"'), headers={}))
