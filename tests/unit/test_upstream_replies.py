"""Replies are checked once, at the edge; the meter reads whatever passes without raising."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from gateway.errors import UpstreamProtocolError
from gateway.pipeline.measure import Meter
from gateway.upstream.replies import chunk_object, error_in_chunk, reply_object

GOOD = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}


def test_a_well_formed_reply_is_returned_parsed() -> None:
    assert reply_object(orjson.dumps(GOOD), "x") == GOOD


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"hello",
        b"[1, 2]",
        b'"text"',
        b'{"choices": [',
        b'{"id": "no choices"}',
        b'{"choices": {"0": {}}}',
        b'{"choices": ["x"]}',
        b'{"choices": [{"message": "x"}]}',
        b'{"choices": [], "usage": "lots"}',
    ],
)
def test_an_unreadable_reply_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        reply_object(body, "vllm (10.0.0.1:8000)")
    assert caught.value.status_code == 502 and caught.value.code == "upstream_bad_reply"
    assert "vllm (10.0.0.1:8000)" in caught.value.message


@pytest.mark.parametrize(
    "event", [b": keep-alive\n\n", b"data: [DONE]\n\n", b"data:\n\n", b"event: ping\n\n"]
)
def test_events_without_a_chunk_pass(event: bytes) -> None:
    assert chunk_object(event, "x") is None


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1]",
        b'{"choices": {"0": {}}}',
        b'{"choices": [{"delta": "oops"}]}',
        b'{"choices": [], "usage": "lots"}',
        b'{"choices": [3]}',
    ],
)
def test_a_malformed_chunk_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        chunk_object(b"data: " + data + b"\n\n", "x")


def _junk(rnd: random.Random, depth: int = 0) -> Any:
    """Any JSON value, with the keys a chat completion has, in any type."""
    kinds = ["str", "int", "float", "none", "bool", "list", "dict"]
    kind = rnd.choice(kinds if depth < 4 else kinds[:5])
    if kind == "list":
        return [_junk(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if kind == "dict":
        keys = [
            "choices",
            "delta",
            "message",
            "usage",
            "content",
            "reasoning",
            "tool_calls",
            "finish_reason",
            "service_tier",
            "speed",
            "prompt_tokens",
            "completion_tokens",
            "prompt_tokens_details",
            "cached_tokens",
        ]
        return {rnd.choice(keys): _junk(rnd, depth + 1) for _ in range(rnd.randint(0, 5))}
    return {
        "str": "x",
        "int": rnd.randint(-(10**30), 10**30),
        "float": 1.5,
        "none": None,
        "bool": True,
    }[kind]


def test_the_meter_never_raises_on_any_shape() -> None:
    rnd = random.Random(11)
    for _ in range(3000):
        payload = _junk(rnd)
        meter = Meter()
        if isinstance(payload, dict):
            meter.observe_chunk(payload)
            meter.observe_reply(payload)
        assert isinstance(meter.seen_answer, str) and isinstance(meter.seen_reasoning, str)


def test_an_error_event_becomes_the_error_it_reports() -> None:
    vllm = {"error": {"message": "overloaded sk-secret-1234", "type": "server_error", "code": 503}}
    error = error_in_chunk(vllm, "vllm", ["sk-secret-1234"])
    assert error is not None and error.status_code == 503 and error.error_type == "server_error"
    assert "sk-secret-1234" not in error.message
    odd = error_in_chunk({"error": "boom"}, "vllm")
    assert odd is not None and odd.status_code == 502
    assert error_in_chunk({"choices": [], "usage": {}}, "x") is None
    assert error_in_chunk({"error": None, "choices": []}, "x") is None
