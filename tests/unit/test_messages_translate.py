"""The Messages <-> chat translation, as pure functions (no server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.pipeline.messages_stream_translate import StreamTranslator
from gateway.pipeline.messages_translate import to_chat, to_message
from gateway.pipeline.messages_translate_call import TranslatedEvents
from tests.chat_reads import Reads

SCHEMA = {"type": "object", "required": ["b"], "properties": {"b": {}, "a": {}}}


def test_a_full_request_becomes_the_chat_body() -> None:
    body: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "f", "description": "d", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "temperature": 0.5,
        "top_k": 5,
        "metadata": {"user_id": "u1"},
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Calling."},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "ok"}],
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            },
        ],
    }
    chat = to_chat(body, "vllm")
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"b":1,"a":2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
        },
    ]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": SCHEMA}}
    ]
    assert list(chat["tools"][0]["function"]["parameters"]) == ["type", "required", "properties"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["parallel_tool_calls"] is False
    assert (chat["max_tokens"], chat["stop"], chat["user"]) == (100, ["END"], "u1")
    assert (chat["temperature"], chat["top_k"]) == (0.5, 5)
    assert b"cache_control" not in orjson.dumps(chat)
    assert "top_k" not in to_chat(body, "openai")  # OpenAI refuses it


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("vllm", {"thinking_token_budget": 2048}),
        ("sglang", {"chat_template_kwargs": {"thinking_budget": 2048}}),
        ("openai", {"reasoning_effort": "low"}),
    ],
)
def test_a_thinking_budget_lands_in_the_familys_field(
    family: Any, expected: dict[str, Any]
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    chat = to_chat(body | {"thinking": {"type": "enabled", "budget_tokens": 2048}}, family)
    assert {k: chat[k] for k in expected} == expected


def test_thinking_off_and_adaptive_effort() -> None:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    off = to_chat(body | {"thinking": {"type": "disabled"}}, "vllm")
    assert off["chat_template_kwargs"] == {"enable_thinking": False}
    adaptive = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}
    assert to_chat(body | adaptive, "openai")["reasoning_effort"] == "high"


def test_documents_and_server_tools_are_refused_by_position() -> None:
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "x"},
    }
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": [pdf]}]}
    with pytest.raises(InvalidRequestError) as refused:
        to_chat(body, "vllm")
    assert refused.value.param == "messages.0.content.0"
    tools = {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    with pytest.raises(InvalidRequestError):
        to_chat({"model": "m", "messages": [{"role": "user", "content": "x"}]} | tools, "vllm")


def test_a_completion_becomes_a_message() -> None:
    reply = {
        "id": "chatcmpl-abc",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "reasoning_content": "think",
                    "content": "Looking.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"b":1}'},
                        }
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    message = to_message(reply, "chat")
    assert message["id"] == "msg_abc" and message["model"] == "chat"
    assert message["content"] == [
        {"type": "thinking", "thinking": "think", "signature": ""},
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"b": 1}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {
        "input_tokens": 18,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 32,
        "output_tokens": 7,
    }
    length = {"choices": [{"finish_reason": "length", "message": {"content": "a"}}]}
    assert to_message(length, "m")["stop_reason"] == "max_tokens"
    stop = {
        "choices": [{"finish_reason": "stop", "stop_reason": "END", "message": {"content": "a"}}]
    }
    assert (
        to_message(stop, "m", ["END"])["stop_reason"],
        to_message(stop, "m", ["END"])["stop_sequence"],
    ) == (
        "stop_sequence",
        "END",
    )


def _events(out: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(event.split(b"data: ", 1)[1]) for event in out]


def test_a_chat_stream_becomes_anthropic_events_with_usage_at_both_ends() -> None:
    translator = StreamTranslator("chat", input_estimate=40)
    chunks: list[dict[str, Any]] = [
        {
            "id": "chatcmpl-1",
            "choices": [{"delta": {"role": "assistant", "reasoning_content": "hm"}}],
        },
        {"choices": [{"delta": {"content": "Hi"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"b":'}}]}}
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 9}},
    ]
    out: list[bytes] = []
    for chunk in chunks:
        for event, told in translator.feed(chunk):
            assert orjson.loads(event.split(b"data: ", 1)[1]) == told  # the object it holds
            out.append(event)
    events = _events(out + [event for event, _ in translator.finish()])
    kinds = [e["type"] for e in events]
    assert kinds == [
        "message_start",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # tool_use
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0]["message"]["usage"]["input_tokens"] == 40  # the gateway's count
    assert events[7]["content_block"] == {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    partial = "".join(e["delta"]["partial_json"] for e in events[8:10])
    assert orjson.loads(partial) == {"b": 1}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"]["input_tokens"] == 42 and events[-2]["usage"]["output_tokens"] == 9
    assert translator.finish() == []  # closes once


async def _chat_events(*datas: bytes) -> AsyncIterator[bytes]:
    for data in datas:
        yield (data if data.startswith(b":") else b"data: " + data) + b"\n\n"  # ":" a comment


async def _translated(*datas: bytes) -> list[dict[str, Any]]:
    translator = StreamTranslator("chat", input_estimate=3)
    return _events([e async for e in TranslatedEvents(_chat_events(*datas), translator)])


def test_the_stream_glue_ends_at_done_and_turns_an_in_band_error_into_an_error_event() -> None:
    chunk = orjson.dumps({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]})
    whole = asyncio.run(_translated(b": keep-alive", chunk, b"[DONE]", chunk))
    assert [e["type"] for e in whole][-2:] == ["message_delta", "message_stop"]
    assert whole[-2]["usage"]["input_tokens"] == 3  # no usage chunk came: the estimate stays
    failed = asyncio.run(_translated(chunk, orjson.dumps({"error": {"message": "KV cache full"}})))
    assert failed[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "KV cache full"},
    }
    cut = asyncio.run(_translated(chunk))  # no [DONE]: no message_stop, the relay says so
    assert "message_stop" not in [e["type"] for e in cut]


def test_a_read_of_chat_events_is_told_at_once_with_each_events_object() -> None:
    def chat(data: bytes) -> bytes:
        return b"data: " + data + b"\n\n"

    first = chat(orjson.dumps({"id": "c", "choices": [{"delta": {"content": "a"}}]}))
    second = chat(orjson.dumps({"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}))

    async def run() -> tuple[bytes, list[Any], list[Any], list[Any]]:
        events = TranslatedEvents(
            Reads([first, b": keep-alive\n\n"], [second, chat(b"[DONE]")]),
            StreamTranslator("chat", input_estimate=3),
        )
        taken = await anext(events)  # as `first_event` takes it
        events.requeue_taken()  # and the relay gets it back, with its object
        return (
            taken,
            await events.relayed_batch(),
            await events.relayed_batch(),
            await events.relayed_batch(),
        )

    taken, one, two, end = asyncio.run(run())
    assert [told["type"] for _, told in one] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    assert one[0][0] == taken
    assert [told["type"] for _, told in two] == [
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    for event, told in one + two:  # each object is what its bytes hold: nothing to parse back
        assert orjson.loads(event.split(b"data: ", 1)[1]) == told
    assert end == []  # after [DONE]


def test_the_first_event_goes_out_before_the_rest_of_its_read_is_translated() -> None:
    """`first_event` takes one event: only the first chat event of the read is told for
    it; the rest of that read is told at once with the relay's next batch."""

    def chat(text: str) -> bytes:
        return b"data: " + orjson.dumps({"choices": [{"delta": {"content": text}}]}) + b"\n\n"

    async def run() -> tuple[list[Any], list[Any]]:
        events = TranslatedEvents(
            Reads([chat("a"), chat("b"), chat("c")]), StreamTranslator("chat", input_estimate=3)
        )
        await anext(events)
        events.requeue_taken()
        return await events.relayed_batch(), await events.relayed_batch()

    first, rest = asyncio.run(run())
    assert [told["type"] for _, told in first] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    assert [told["delta"]["text"] for _, told in rest] == ["b", "c"]


def test_a_mid_conversation_system_message_stays_where_it_stands() -> None:
    turns: Any = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "Env: linux"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "Be brief."},
    ]
    chat = to_chat({"model": "m", "system": "S", "messages": turns}, "vllm")
    assert chat["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Env: linux"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "Be brief."},
    ]
    addition: Any = {"role": "system", "content": [{"type": "tool_addition", "name": "x"}]}
    with pytest.raises(InvalidRequestError) as refused:
        to_chat({"model": "m", "messages": [turns[0], addition]}, "vllm")
    assert refused.value.param == "messages.1.content.0"
    with pytest.raises(InvalidRequestError, match="got 'tool'"):
        to_chat({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "vllm")
