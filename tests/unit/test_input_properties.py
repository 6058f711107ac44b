"""Property tests of the pure input stages: any bytes, only the documented errors.

`patch_object` round-trips every JSON object and raises only `RawJsonError`; `parse` and
`load_object` raise only `InvalidRequestError`, whatever the bytes or nesting.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import parse
from gateway.prefix.lint import lint_conversation
from gateway.rawjson import RawJsonError, patch_object
from gateway.schemas.body import MAX_DEPTH, load_object
from gateway.schemas.lint import lint_bodies

KEYS = st.sampled_from(["model", "messages", "stream", "a", "b", "é", 'q"uote', "\\", ""])
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
SCALARS |= st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=6)
# Whitespace variants: compact, Python's spaced, and pretty-printed.
DUMPS = st.sampled_from(
    [
        lambda o: orjson.dumps(o),
        lambda o: json.dumps(o).encode(),
        lambda o: json.dumps(o, indent=2, ensure_ascii=False).encode(),
    ]
)
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(OBJECTS, DUMPS, st.dictionaries(KEYS, VALUES, max_size=3), st.sets(KEYS, max_size=4))
def test_patch_object_round_trips(
    obj: dict[str, Any], dump: Any, set_fields: dict[str, Any], remove: set[str]
) -> None:
    raw = dump(obj)
    out = patch_object(raw, set_fields, remove)
    expected = {k: v for k, v in obj.items() if k not in remove - set(set_fields)}
    expected.update(set_fields)
    assert json.loads(out) == expected
    untouched = [k for k in obj if k not in remove and k not in set_fields]
    assert [k for k in json.loads(out) if k in untouched] == untouched  # order kept


@FAST
@given(st.binary(max_size=200), st.dictionaries(KEYS, SCALARS, max_size=2), st.sets(KEYS))
def test_patch_object_raises_only_raw_json_error_on_any_bytes(
    raw: bytes, set_fields: dict[str, Any], remove: set[str]
) -> None:
    with contextlib.suppress(RawJsonError):
        patch_object(raw, set_fields, remove)


@FAST
@given(OBJECTS, st.integers(0, 200), st.integers(0, 20))
def test_patch_object_raises_only_raw_json_error_on_mangled_json(
    obj: dict[str, Any], cut: int, junk: int
) -> None:
    raw = orjson.dumps(obj)
    mangled = raw[:cut] + b'[{"\\,:'[junk % 7 :] + raw[cut:]
    with contextlib.suppress(RawJsonError):
        patch_object(mangled, {"model": "x"}, {"a"})


@pytest.mark.parametrize("depth", [1_000, 5_000, 100_000])
def test_patch_object_handles_any_depth(depth: int) -> None:
    raw = b'{"a":' + b"[" * depth + b'"]"' + b"]" * depth + b',"b":1}'
    out = patch_object(raw, {"b": 2}, {"c"})
    assert out == raw.replace(b'"b":1', b'"b":2')
    with pytest.raises(RawJsonError):
        patch_object(raw[:-3] + b"}", {"b": 2})  # one bracket short


def _parse(raw: bytes) -> None:
    parse(RequestContext(raw_body=raw, headers={}))


@FAST
@given(st.binary(max_size=300))
def test_parse_raises_only_invalid_request_on_any_bytes(raw: bytes) -> None:
    with contextlib.suppress(InvalidRequestError):
        _parse(raw)


MESSAGE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "role": VALUES | st.sampled_from(["user", "system", "tool"]),
        "content": VALUES | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), VALUES)),
        "name": VALUES,
    },
)
CHAT_SHAPES = st.fixed_dictionaries(
    {},
    optional={
        "model": VALUES | st.just("chat"),
        "messages": VALUES | st.lists(MESSAGE_FIELDS | VALUES, max_size=3),
        "stream": VALUES,
        "stream_options": VALUES,
        "max_tokens": VALUES,
        "metadata": VALUES,
        "requests": VALUES | st.lists(VALUES, max_size=2),
    },
)


def _lint(raw: bytes) -> None:
    lint_conversation(lint_bodies(load_object(raw)))


@FAST
@given(CHAT_SHAPES)
def test_parse_and_lint_raise_only_invalid_request_on_any_shape(body: dict[str, Any]) -> None:
    raw = orjson.dumps(body)
    for check in (_parse, _lint):
        try:
            check(raw)
        except InvalidRequestError as exc:
            assert len(exc.message) < 5000


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 1, 1_000, 1_025, 100_000])
def test_parse_limits_depth_and_names_the_problem(depth: int) -> None:
    nested = b"[" * (depth - 1) + b"]" * (depth - 1)  # the object itself is one level
    raw = b'{"model":"m","messages":[{"role":"user"}],"x":' + (nested or b"0") + b"}"
    if depth <= MAX_DEPTH:
        load_object(raw)
        return
    with pytest.raises(InvalidRequestError, match=r"nested|JSON"):
        _parse(raw)
