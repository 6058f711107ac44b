"""Anthropic Messages inbound to a chat-completions route, translated by the gateway.

The real `anthropic` SDK -> gateway -> the simulator's OpenAI-wire `/v1/chat/completions`
(the `chat` and `thinker` routes, vLLM family) -> ledger. Checked: the chat body the
simulator received, the Anthropic message and events the client got (usage in
`message_start` never 0), and the usage and cost the pipeline booked.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

SCHEMA: Any = {  # keys deliberately not in sorted order: the order must survive
    "type": "object",
    "required": ["number"],
    "properties": {"number": {"type": "string"}},
}
TOOLS: Any = [{"name": "lookup_invoice", "description": "Find an invoice.", "input_schema": SCHEMA}]
META: Any = {"user_id": "user-7", "task_id": "translated-whole"}  # task_id is Farebox's
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


@pytest.fixture
def client(gateway: Gateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=gateway.server.url, api_key="sk-client-translated", max_retries=0
    ) as sdk:
        yield sdk


def _chat_bodies(sim: SimControl) -> list[dict[str, Any]]:
    """What the simulator's chat endpoint received, oldest first, in its key order."""
    records = [r for r in sim.requests() if r["path"] == "/v1/chat/completions"]
    return [orjson.loads(base64.b64decode(str(r["body_b64"]))) for r in records]


def _records(sim: SimControl) -> list[dict[str, Any]]:
    return [r for r in sim.requests() if r["path"] == "/v1/chat/completions"]


def test_a_message_is_translated_to_chat_and_billed(
    gateway: Gateway, client: anthropic.Anthropic, sim: SimControl
) -> None:
    raw = client.messages.with_raw_response.create(
        model="chat",
        max_tokens=64,
        system=[
            {"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral"}}
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
                    },
                    {"type": "text", "text": "What is a fare box?"},
                ],
            }
        ],
        stop_sequences=["\n\n\n"],
        extra_body={"temperature": 0.2},  # this SDK version has no temperature argument
        metadata=META,
    )
    message = raw.parse()
    assert message.type == "message" and message.model == "chat"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0

    (body,) = _chat_bodies(sim)
    assert body["model"] == "sim-chat" and body["user"] == "user-7" and "metadata" not in body
    assert body["stop"] == ["\n\n\n"] and body["temperature"] == 0.2
    assert body["messages"][0] == {"role": "system", "content": "Answer briefly."}
    image, text = body["messages"][1]["content"]
    assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}
    assert text == {"type": "text", "text": "What is a fare box?"}
    assert b"cache_control" not in orjson.dumps(body)  # dropped: the server caches on its own

    (record,) = _records(sim)
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    cached = message.usage.cache_read_input_tokens or 0
    assert ctx.usage.prompt_tokens == message.usage.input_tokens + cached == record["prompt_tokens"]
    assert ctx.usage.completion_tokens == message.usage.output_tokens == record["completion_tokens"]
    assert ctx.cost.total > 0 and Decimal(raw.headers["x-farebox-cost-usd"]) == ctx.cost.total
    assert ctx.task is not None and ctx.task.task_id == "translated-whole"


def test_a_tool_round_trip_through_a_chat_route(
    gateway: Gateway, client: anthropic.Anthropic, sim: SimControl
) -> None:
    ask: Any = [{"role": "user", "content": "Check invoice 42."}]
    called = client.messages.create(
        model="chat", max_tokens=64, tools=TOOLS, tool_choice={"type": "any"}, messages=ask
    )
    assert called.stop_reason == "tool_use"
    (use,) = [block for block in called.content if block.type == "tool_use"]
    assert use.name == "lookup_invoice" and isinstance(use.input, dict) and "number" in use.input

    turns: Any = [
        *ask,
        {"role": "assistant", "content": [block.model_dump() for block in called.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "paid"}],
        },
    ]
    answer = client.messages.create(model="chat", max_tokens=64, tools=TOOLS, messages=turns)
    assert answer.stop_reason == "end_turn" and answer.content[0].type == "text"

    first, second = _chat_bodies(sim)
    assert first["tool_choice"] == "required"
    sent = first["tools"][0]["function"]
    assert list(sent["parameters"]) == list(SCHEMA)  # the client's key order, kept
    assert sent["name"] == "lookup_invoice" and sent["description"] == "Find an invoice."
    calls = second["messages"][1]["tool_calls"]
    assert calls[0]["id"] == use.id and orjson.loads(calls[0]["function"]["arguments"]) == use.input
    assert second["messages"][2] == {"role": "tool", "tool_call_id": use.id, "content": "paid"}
    assert gateway.last(2).usage is not None

    with client.messages.stream(
        model="chat", max_tokens=64, tools=TOOLS, tool_choice={"type": "any"}, messages=ask
    ) as stream:
        streamed = stream.get_final_message()  # the SDK joins the input_json_delta parts
    (streamed_use,) = [block for block in streamed.content if block.type == "tool_use"]
    assert streamed.stop_reason == "tool_use"
    assert streamed_use.name == "lookup_invoice" and streamed_use.input == use.input  # seeded


def test_a_stream_has_usage_in_message_start_and_message_delta(
    gateway: Gateway, client: anthropic.Anthropic, sim: SimControl
) -> None:
    with client.messages.stream(
        model="thinker",
        max_tokens=512,
        thinking={"type": "enabled", "budget_tokens": 256},
        messages=[{"role": "user", "content": "Why do fares vary?"}],
    ) as stream:
        events = [event.model_dump(exclude_none=True) for event in stream]
        final = stream.get_final_message()
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    start = events[0]["message"]["usage"]
    assert start["input_tokens"] > 0  # the gateway's own count: never 0/0
    (delta,) = [event for event in events if event["type"] == "message_delta"]
    assert delta["usage"]["output_tokens"] > 0
    assert [block.type for block in final.content] == ["thinking", "text"]

    (body,) = _chat_bodies(sim)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["thinking_token_budget"] <= 256  # the budget, in vLLM's own field
    (record,) = _records(sim)
    ctx = gateway.last()
    assert ctx.usage is not None  # `thinker` has no price in the test book: usage only
    assert ctx.usage.prompt_tokens == record["prompt_tokens"]
    assert ctx.usage.completion_tokens == record["completion_tokens"] == final.usage.output_tokens
    assert ctx.timings.first_token is not None

    with client.messages.stream(
        model="chat", max_tokens=32, messages=[{"role": "user", "content": "Say hi."}]
    ) as text:
        said = "".join(text.text_stream)
    assert said and said == text.get_final_message().content[0].text  # type: ignore[union-attr]
    priced = gateway.last(2)
    assert priced.usage is not None and priced.usage.completion_tokens > 0
    assert priced.cost is not None and priced.cost.total > 0


def test_count_tokens_on_a_chat_route_is_the_gateways_estimate(
    gateway: Gateway, client: anthropic.Anthropic, sim: SimControl
) -> None:
    prompt: Any = {
        "model": "chat",
        "system": "Answer briefly.",
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "How many tokens is this prompt, roughly?"}],
    }
    counted = client.messages.count_tokens(**prompt)
    assert not sim.requests()  # estimated here: a chat server has no count endpoint
    assert len(gateway.seen) == 0  # free: no ledger row
    message = client.messages.create(max_tokens=16, **prompt)
    served = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    # An estimate of the content: the server's chat template adds tokens the gateway cannot
    # see (the simulator's ChatML markers: 59 counted, 102 served for this prompt).
    assert served // 2 <= counted.input_tokens <= served


POLICY = """
models:
  thinker: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
prices:
  thinker: {{gpu: {{cost_per_hour: "3.60", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}}}
rules:
  - name: thinker-thinks-a-little
    match: {{model: thinker}}
    thinking_budget: 128
    max_tokens: {{default: 600, ceiling: 600}}
routing:
  thinker:
    capabilities: {{supports_thinking_budget: true}}
"""


def test_the_policy_caps_a_translated_thinking_budget_and_the_ledger_books_it(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(POLICY.format(sim=sim.url))
    gateway = make_gateway(config=config)
    with anthropic.Anthropic(base_url=gateway.server.url, api_key="k", max_retries=0) as sdk:
        message = sdk.messages.create(
            model="thinker",
            max_tokens=4000,
            thinking={"type": "enabled", "budget_tokens": 3000},
            messages=[{"role": "user", "content": "Plan the migration."}],
            extra_headers={"X-Task-Id": "translated-policy"},
        )
    (body,) = _chat_bodies(sim)
    assert body["thinking_token_budget"] == 128  # the rule's cap, in vLLM's field
    assert body["max_tokens"] == 600 + 128  # the answer's ceiling, plus the budget vLLM counts in
    assert message.content[0].type == "thinking"
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.completion_tokens == message.usage.output_tokens > 0
    task = httpx.get(f"{gateway.base_url}/tasks/translated-policy", timeout=30).json()
    assert task["request_count"] == 1  # the ledger row
    assert Decimal(task["cost"]["total"]) == ctx.cost.total > 0
