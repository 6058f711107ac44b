"""The Responses <-> chat completions translation (pure), read back by the real openai SDK.

The translated event stream is handed to the SDK's own stream reader through httpx's
transport seam (the bytes the gateway would send), so the SDK's accumulator checks the
event order, ids and shapes: function calls with argument deltas, reasoning, text.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.pipeline.context import BodyEdits
from gateway.pipeline.responses_request import native_edits, policy_view
from gateway.upstream import responses_wire as wire
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.upstream.responses_wire import chat_body, input_items, response_from_chat
from gateway.usage import Usage

TOOL: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def test_a_request_becomes_chat_messages_tools_and_caps() -> None:
    native: Any = {
        "model": "m",
        "instructions": "Be brief.",
        "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "lookup"},
        "max_output_tokens": 100,
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}},
        "store": False,
        "stream": True,
    }
    items: Any = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:x"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    body = chat_body(native, items)
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]
    assert body["messages"][2]["content"] == [{"type": "image_url", "image_url": {"url": "data:x"}}]
    assert [c["id"] for c in body["messages"][3]["tool_calls"]] == ["c1", "c2"]  # merged
    assert body["tools"] == [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["max_completion_tokens"] == 100 and body["reasoning_effort"] == "low"
    assert body["response_format"]["type"] == "json_schema"
    assert body["stream_options"] == {"include_usage": True}
    assert "store" not in body and "instructions" not in body
    with pytest.raises(ValueError, match="function tools"):
        chat_body({"model": "m", "tools": [{"type": "web_search"}]}, [])


def test_the_policys_chat_edits_land_on_responses_fields() -> None:
    native: Any = {
        "model": "a",
        "input": "hi",
        "max_output_tokens": 900,
        "reasoning": {"effort": "high", "summary": "auto"},
        "temperature": 1,
    }
    view = policy_view(native, input_items(native["input"]))
    assert view["max_completion_tokens"] == 900 and view["reasoning_effort"] == "high"
    edits = BodyEdits(
        {
            "model": "b",
            "max_completion_tokens": 300,
            "reasoning_effort": "low",
            "stream_options": {"include_usage": True},
            "thinking": {"type": "enabled"},
        },
        {"temperature"},
    )
    out = native_edits(edits, native)
    assert out.set_fields == {
        "model": "b",
        "max_output_tokens": 300,
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    assert out.remove == {"temperature"}


def _chunk(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def _call(index: int, call_id: str | None, name: str | None, args: str) -> dict[str, Any]:
    function = {"arguments": args} | ({"name": name} if name else {})
    return {"index": index, "id": call_id, "type": "function", "function": function}


def _translated() -> tuple[bytes, ChatToResponses]:
    teller = ChatToResponses({"model": "m", "tools": [TOOL]}, "resp_1", 1)
    chunks = [
        _chunk(role="assistant", content=""),
        _chunk(reasoning="Think "),
        _chunk(reasoning="twice."),
        _chunk(content="Calling."),
        _chunk(tool_calls=[_call(0, "call_a", "lookup", '{"q":')]),
        _chunk(tool_calls=[_call(0, None, None, ' "a"}')]),
        _chunk(tool_calls=[_call(1, "call_b", "lookup", '{"q": "b"}')]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = teller.start()
    for chunk in chunks:
        events += teller.feed(chunk)
    usage = Usage(prompt_tokens=50, cached_tokens=20, completion_tokens=30, reasoning_tokens=4)
    events += teller.finish(usage)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return b"".join(sse(e) for e in events), teller


def test_the_sdk_reads_the_translated_stream_with_function_calls() -> None:
    wire, _ = _translated()

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=wire, headers={"content-type": "text/event-stream"})

    http = httpx.Client(transport=httpx.MockTransport(serve))
    client = openai.OpenAI(api_key="k", base_url="http://gw/v1", http_client=http)
    with client, client.responses.stream(model="m", input="hi", tools=[TOOL]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.function_call_arguments.delta") == 3
    assert kinds.count("response.output_item.done") == 4
    assert [item.type for item in final.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_a", '{"q": "a"}'),
        ("call_b", '{"q": "b"}'),
    ]
    assert final.output_text == "Calling."
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 20
    assert final.usage.output_tokens_details.reasoning_tokens == 4


def test_a_whole_chat_reply_becomes_a_response() -> None:
    reply = {
        "choices": [
            {
                "message": {
                    "content": "Done.",
                    "reasoning_content": "Hmm.",
                    "tool_calls": [_call(0, "call_x", "lookup", "{}")],
                },
                "finish_reason": "length",
            }
        ]
    }
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    response = response_from_chat({"model": "m"}, reply, usage, "resp_2")
    assert [item["type"] for item in response["output"]] == [
        "reasoning",
        "message",
        "function_call",
    ]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["total_tokens"] == 15


def test_every_event_and_response_validates_against_the_sdks_wire_types() -> None:
    """The openai SDK's types are generated from OpenAI's OpenAPI document: strict checks."""
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    wire, _ = _translated()  # reasoning, text and two function calls
    made = [orjson.loads(block.split(b"data: ", 1)[1]) for block in wire.split(b"\n\n") if block]
    assert len(made) > 20
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for event in made:
        parsed = adapter.validate_python(event)
        assert parsed.type == event["type"]
    whole = response_from_chat(
        {"model": "m"},
        {"choices": [{"message": {"content": "Hi.", "tool_calls": [_call(0, "c", "f", "{}")]}}]},
        Usage(prompt_tokens=1, completion_tokens=1),
        "resp_4",
    )
    response = Response.model_validate(whole)
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.usage is not None and response.usage.total_tokens == 2


def test_new_ids_are_openais_shape_and_never_repeat() -> None:
    """`resp_` (or `msg_`, ...) and 32 hex digits of 128 random bits, as OpenAI's; drawn
    from the request ids' pool, each value given out once, across its refills."""
    ids = [wire.new_id(prefix) for prefix in ("resp", "msg") for _ in range(2_000)]
    assert all(re.fullmatch(r"(resp|msg)_[0-9a-f]{32}", value) for value in ids)
    assert len({value.split("_")[1] for value in ids}) == len(ids)
