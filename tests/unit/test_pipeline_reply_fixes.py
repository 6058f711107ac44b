"""`reply_fixes` gives what building the conforming reply and diffing it gave."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.upstream import conform

INTS = st.integers(-(2**53), 2**53)  # what orjson renders
NAMES = ["role", "content", "refusal", "annotations", "function_call", "tool_calls", "extra"]
VALUES = st.one_of(st.none(), st.text(max_size=4), INTS, st.lists(INTS, max_size=2))
MESSAGES = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=6)
CHOICES = st.one_of(
    st.fixed_dictionaries(
        {"index": st.integers(0, 3)},
        optional={
            "message": st.one_of(MESSAGES, st.none(), st.text(max_size=2)),
            "logprobs": st.none(),
            "finish_reason": st.one_of(st.none(), st.just("stop")),
        },
    ),
    INTS,
    st.none(),
)
REPLIES = st.fixed_dictionaries(
    {"id": st.just("chatcmpl-1"), "object": st.just("chat.completion")},
    optional={
        "system_fingerprint": st.one_of(st.none(), st.just("fp")),
        "choices": st.one_of(st.lists(CHOICES, max_size=3), st.none(), st.text(max_size=2)),
        "usage": st.one_of(st.none(), st.just({"prompt_tokens": 1})),
        "model": st.just("m"),
    },
)


def _by_diff(payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What `conformed_reply_bytes` did before `reply_fixes`."""
    fixed = conform.conforming_reply(payload)
    if fixed == payload:
        return {}, []
    return conform.top_level_edits(payload, fixed)


@settings(max_examples=400, deadline=None)
@given(REPLIES)
def test_reply_fixes_are_the_diff_of_the_conforming_reply(payload: dict[str, Any]) -> None:
    assert conform.reply_fixes(payload) == _by_diff(payload)


@settings(max_examples=200, deadline=None)
@given(REPLIES)
def test_conformed_bytes_are_the_conforming_reply(payload: dict[str, Any]) -> None:
    body = orjson.dumps(payload)
    out, fixed = conform.conformed_reply_bytes(body, payload)
    assert fixed == conform.conforming_reply(payload)
    assert orjson.loads(out) == fixed
    if _by_diff(payload) == ({}, []):
        assert out is body and fixed is payload


def test_a_reply_missing_refusal_gets_it_and_keeps_its_bytes_elsewhere() -> None:
    body = (
        b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},'
        b'"logprobs":null,"finish_reason":"stop"}],"system_fingerprint":null,"usage":{"a":1}}'
    )
    out, fixed = conform.conformed_reply_bytes(body, orjson.loads(body))
    assert out == (
        b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi",'
        b'"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"a":1}}'
    )
    assert list(fixed) == ["id", "choices", "usage"]


def test_nulls_to_remove_come_in_the_replys_order() -> None:
    payload = {"id": "c", "usage": None, "choices": [], "system_fingerprint": None}
    assert (
        conform.reply_fixes(payload) == _by_diff(payload) == ({}, ["usage", "system_fingerprint"])
    )
    out, fixed = conform.conformed_reply_bytes(orjson.dumps(payload), payload)
    assert out == b'{"id":"c","choices":[]}' and list(fixed) == ["id", "choices"]
