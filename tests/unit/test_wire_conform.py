"""Replies and chunks brought to OpenAI's schema; request fields a provider cannot take."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import UnsupportedParameterError
from gateway.upstream import conform, param_support
from tests.conformance.openapi_schemas import CHAT_CHUNK, CHAT_COMPLETION, violations

VLLM_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "hi",
                "refusal": None,
                "annotations": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    "system_fingerprint": None,
    "prompt_logprobs": None,
}


def test_vllm_nulls_the_schema_forbids_are_dropped_and_the_rest_kept() -> None:
    assert violations(CHAT_COMPLETION, VLLM_REPLY) != []
    fixed = conform.conforming_reply(VLLM_REPLY)
    assert violations(CHAT_COMPLETION, fixed) == []
    message = fixed["choices"][0]["message"]
    assert "annotations" not in message and "function_call" not in message
    # Unknown fields and allowed nulls pass as they came.
    assert message["reasoning_content"] is None and fixed["prompt_logprobs"] is None
    assert "system_fingerprint" not in fixed


def test_relayed_bytes_change_only_where_the_schema_is_broken() -> None:
    body = orjson.dumps(VLLM_REPLY)
    patched, payload = conform.conformed_reply_bytes(body, VLLM_REPLY)
    assert orjson.loads(patched) == payload
    assert b'"usage":{"prompt_tokens":1' in patched
    fixed = conform.conforming_reply(VLLM_REPLY)
    assert conform.conformed_reply_bytes(orjson.dumps(fixed), fixed)[0] == orjson.dumps(fixed)


def test_litellm_reply_keeps_required_nulls() -> None:
    litellm_dump = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [],
                    "provider_specific_fields": {},
                },
            }
        ],
    }
    cleaned = conform.conforming_reply(
        conform.without_nulls(litellm_dump, ["provider_specific_fields"])
    )
    assert violations(CHAT_COMPLETION, cleaned) == []
    choice = cleaned["choices"][0]
    assert choice["logprobs"] is None
    assert choice["message"]["content"] is None and choice["message"]["refusal"] is None


def test_litellm_chunk_says_finish_reason_null_until_the_end() -> None:
    chunk = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"content": "a", "tool_calls": None}, "finish_reason": None}
        ],
    }
    cleaned = conform.conforming_chunk(conform.without_nulls(chunk))
    assert cleaned["choices"][0]["finish_reason"] is None
    assert violations(CHAT_CHUNK, cleaned) == []


ANTHROPIC = ["stream", "max_tokens", "temperature", "tools", "user"]


def test_a_field_that_would_change_the_reply_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedParameterError) as caught:
        param_support.fields_to_drop(
            {"model": "c", "seed": 1, "n": 2}, ANTHROPIC, "anthropic model c"
        )
    assert caught.value.param == "n" and caught.value.status_code == 400


def test_hints_are_dropped_and_defaults_ask_for_nothing() -> None:
    body = {"model": "c", "messages": [], "n": 1, "logprobs": False, "seed": 3, "metadata": None}
    assert param_support.fields_to_drop(body, ANTHROPIC, "t") == ["seed"]
    assert param_support.not_taken(body, ANTHROPIC) == ["n", "logprobs", "seed", "metadata"]
    notice = {"x-farebox-dropped-params": "seed"}
    assert param_support.dropped_notice(True, notice) == "seed"
    assert param_support.dropped_notice(False, notice) is None  # an upstream's own header
    assert param_support.dropped_notice(True, {"x-other": "1"}) is None
    assert param_support.notice_headers("seed") == notice
    assert param_support.notice_headers(None) == {}


def test_anthropic_tier_is_echoed_in_openai_words_when_it_has_one() -> None:
    reply = {"choices": [], "usage": {"service_tier": "standard"}}
    assert conform.with_tier_echo(reply)["service_tier"] == "default"
    batch = {"choices": [], "usage": {"service_tier": "batch"}}
    assert "service_tier" not in conform.with_tier_echo(batch)
    echoed = {"choices": [], "service_tier": "flex", "usage": {"service_tier": "standard"}}
    assert conform.with_tier_echo(echoed)["service_tier"] == "flex"
