"""OpenAI Responses inbound (/v1/responses), with the real `openai` SDK as the client.

SDK -> gateway -> simulator -> ledger, on two kinds of route: `wire: responses` (the
simulator's own /v1/responses, as OpenAI or vLLM serve it: forwarded natively) and a
chat-only route (translated to /v1/chat/completions and back). Checked: what the simulator
received, what the client got (Response objects, the typed event stream, usage with
cached and reasoning tokens), what the ledger billed, previous_response_id chains as one
task, store: false, and the policy's effort and output cap in Responses fields.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.rawjson import patch_object
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

CONFIG = """
models:
  native: {{model: sim-chat, base_url: "{sim}/v1", family: vllm, wire: responses}}
  native-thinker: {{model: sim-thinker, base_url: "{sim}/v1", family: vllm, wire: responses}}
  chat: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  thinker: {{model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  capped: {{model: sim-thinker, base_url: "{sim}/v1", family: vllm, wire: responses}}
prices:
  native: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  native-thinker: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  chat: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  thinker: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  capped: {{input: 1.00, cached_input: 0.10, output: 4.00}}
rules:
  - name: capped-low-effort
    match: {{model: capped}}
    effort: low
    max_tokens: {{default: 300, ceiling: 300}}
routing:
  capped:
    capabilities: {{supports_reasoning: true}}
"""
INPUT, CACHED, OUTPUT = Decimal("1e-6"), Decimal("1e-7"), Decimal("4e-6")
INSTRUCTIONS = "You answer questions about fare boxes, briefly and exactly. " * 40
TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup_fare",
        "description": "Find the fare between two stops.",
        "parameters": {
            "type": "object",
            "properties": {"origin": {"type": "string"}, "to": {"type": "string"}},
            "required": ["origin", "to"],
        },
    }
]


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


class Recorded:
    """The bodies the SDK sent, as bytes on the wire."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> None:
        self.bodies.append(request.read())


def _client(gateway: Gateway) -> tuple[openai.OpenAI, Recorded]:
    recorded = Recorded()
    http = httpx.Client(event_hooks={"request": [recorded]})
    client = gateway.sdk(http_client=http)
    return client, recorded


def _sent(sim: SimControl) -> list[dict[str, Any]]:
    return [r for r in sim.requests() if str(r["path"]).startswith("/v1/")]


def _body(record: dict[str, Any]) -> bytes:
    return base64.b64decode(str(record["body_b64"]))


def _cost(usage: Any) -> Decimal:
    cached = usage.input_tokens_details.cached_tokens
    return (usage.input_tokens - cached) * INPUT + cached * CACHED + usage.output_tokens * OUTPUT


@pytest.mark.parametrize(
    ("alias", "path"), [("native", "/v1/responses"), ("chat", "/v1/chat/completions")]
)
def test_a_whole_response_is_served_and_billed(
    gateway: Gateway, sim: SimControl, alias: str, path: str
) -> None:
    client, recorded = _client(gateway)
    raw = client.responses.with_raw_response.create(
        model=alias,
        instructions=INSTRUCTIONS,
        input="What is a fare box?",
        max_output_tokens=200,
        metadata={"task_id": f"resp-whole-{alias}", "purpose": "faq"},
    )
    response = raw.parse()
    assert response.object == "response" and response.status in ("completed", "incomplete")
    Response.model_validate(raw.http_response.json())  # strictly, as OpenAI's schema says
    assert response.output_text
    assert response.usage is not None and response.usage.input_tokens > 0
    (record,) = _sent(sim)
    assert record["path"] == path
    if alias == "native":  # the SDK's bytes, only the model and Farebox's metadata changed
        edits = {"model": "sim-chat", "metadata": {"purpose": "faq"}}
        assert _body(record) == patch_object(recorded.bodies[0], edits, set())
    else:
        sent = httpx.Response(200, content=_body(record)).json()
        assert sent["messages"][0] == {"role": "system", "content": INSTRUCTIONS}
        assert sent["max_completion_tokens"] == 200
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.prompt_tokens == response.usage.input_tokens == record["prompt_tokens"]
    assert ctx.usage.completion_tokens == response.usage.output_tokens
    assert ctx.cost.total == _cost(response.usage)
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == ctx.cost.total
    assert ctx.task is not None and ctx.task.task_id == f"resp-whole-{alias}"


@pytest.mark.parametrize(
    ("alias", "path"), [("native-thinker", "/v1/responses"), ("thinker", "/v1/chat/completions")]
)
def test_a_stream_has_the_typed_events_reasoning_and_usage(
    gateway: Gateway, sim: SimControl, alias: str, path: str
) -> None:
    client, _ = _client(gateway)
    with client.responses.stream(model=alias, input="Explain fare capping.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    strict: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for event in events:  # the SDK builds them leniently; OpenAI's schema, strictly
        strict.validate_python(event.to_dict())
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert {"response.content_part.added", "response.output_item.done"} <= set(kinds)
    assert [item.type for item in final.output] == ["reasoning", "message"]
    usage = final.usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens > 0
    (record,) = _sent(sim)
    assert record["path"] == path and record["stream"] is True
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.reasoning_tokens == usage.output_tokens_details.reasoning_tokens
    assert ctx.usage.completion_tokens == usage.output_tokens == record["completion_tokens"]
    assert ctx.cost.total == _cost(usage)
    assert ctx.timings.first_token is not None and ctx.timings.first_answer_token is not None
    assert ctx.task is not None  # a chain's task, named by the gateway
    task = httpx.get(f"{gateway.base_url}/tasks/{ctx.task.task_id}", timeout=30).json()
    (row,) = task["requests"]  # the ledger row, reasoning apart from the answer
    assert row["reasoning_tokens"] == usage.output_tokens_details.reasoning_tokens
    assert row["completion_tokens"] == usage.output_tokens


@pytest.mark.parametrize("alias", ["native", "chat"])
def test_a_previous_response_id_chain_is_one_task_with_cache_hits(
    gateway: Gateway, sim: SimControl, alias: str
) -> None:
    client, _ = _client(gateway)
    first = client.responses.create(model=alias, instructions=INSTRUCTIONS, input="Hello.")
    second = client.responses.create(
        model=alias, instructions=INSTRUCTIONS, input="And then?", previous_response_id=first.id
    )
    with client.responses.stream(
        model=alias,
        instructions=INSTRUCTIONS,
        input=[{"role": "user", "content": "Last one."}],
        previous_response_id=second.id,
        extra_headers={"X-Task-Done": "true"},
    ) as stream:
        third = stream.get_final_response()
    assert second.previous_response_id == first.id  # echoed, though the upstream saw none
    assert third.previous_response_id == second.id
    records = _sent(sim)
    assert len(records) == 3
    # The gateway expands the chain: the upstream gets a stateless request.
    last = httpx.Response(200, content=_body(records[-1])).json()
    assert "previous_response_id" not in last
    if alias == "native":
        texts = [
            item.get("content")
            for item in last["input"]
            if item.get("type") != "message" or item.get("role") == "user"
        ]
        assert texts[:1] == ["Hello."] and len(last["input"]) == 5  # 3 turns in, 2 answers
    else:
        roles = [m["role"] for m in last["messages"]]
        assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    contexts = [gateway.last(3)] and gateway.seen[-3:]
    tasks = {ctx.task.task_id for ctx in contexts if ctx.task is not None}
    assert len(tasks) == 1 and not contexts[0].task.implicit  # type: ignore[union-attr]
    assert contexts[2].usage is not None and contexts[2].usage.cached_tokens > 0
    (task_id,) = tasks
    task = httpx.get(f"{gateway.base_url}/tasks/{task_id}", timeout=30).json()
    assert task["request_count"] == 3 and task["ended"] == "finished"  # X-Task-Done
    assert task_id.startswith("chain-")
    costs = sum((ctx.cost.total for ctx in contexts if ctx.cost is not None), Decimal(0))
    assert Decimal(task["cost"]["total"]) == costs


def test_unknown_and_unstored_previous_ids_are_openais_400(
    gateway: Gateway, sim: SimControl
) -> None:
    client, _ = _client(gateway)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="chat", input="Hi.", previous_response_id="resp_missing")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"
    error = caught.value.response.json()["error"]
    assert error["message"] == "Previous response with id 'resp_missing' not found."
    assert error["type"] == "invalid_request_error"
    stateless = client.responses.create(model="native", input="Hi.", store=False)
    assert gateway.last().task is not None and gateway.last().task.implicit  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as again:
        client.responses.create(model="native", input="More.", previous_response_id=stateless.id)
    assert again.value.code == "previous_response_not_found"
    assert len(_sent(sim)) == 1  # the refused calls never reached the upstream


def test_function_tool_turns_are_translated_for_chat_routes(
    gateway: Gateway, sim: SimControl
) -> None:
    client, _ = _client(gateway)
    items: Any = [
        {"role": "user", "content": "Fare from A to B?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup_fare",
            "arguments": '{"origin": "A", "to": "B"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "$2.50"},
    ]
    response = client.responses.create(model="chat", input=items, tools=TOOLS, tool_choice="auto")
    assert response.output_text
    sent = httpx.Response(200, content=_body(_sent(sim)[0])).json()
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {k: TOOLS[0][k] for k in ("name", "description", "parameters")},
        }
    ]
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "lookup_fare"
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "$2.50"}
    assert gateway.last().task.step_kind == "tool_result"  # type: ignore[union-attr]
    native = client.responses.create(model="native", input=items, tools=TOOLS)
    assert native.output_text and _sent(sim)[1]["path"] == "/v1/responses"


def test_the_policys_effort_and_cap_become_responses_fields(
    gateway: Gateway, sim: SimControl
) -> None:
    client, _ = _client(gateway)
    response = client.responses.create(
        model="capped", input="Think about fares.", max_output_tokens=5000
    )
    sent = httpx.Response(200, content=_body(_sent(sim)[0])).json()
    # The rule's answer cap (300) plus the low effort's thinking room, as for chat.
    planned = gateway.last().edits.set_fields
    assert sent["max_output_tokens"] == planned["max_completion_tokens"] < 5000
    assert response.usage is not None
    assert response.usage.output_tokens <= sent["max_output_tokens"]
    assert sent["reasoning"] == {"effort": "low"}
    assert "max_completion_tokens" not in sent and "reasoning_effort" not in sent
    assert gateway.last().response_headers["x-farebox-rule"] == "capped-low-effort"


def test_refusals_have_openais_shape(gateway: Gateway, sim: SimControl) -> None:
    client, _ = _client(gateway)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="no-such-model", input="Hi.")
    assert unknown.value.param == "model"
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="chat", input=None)  # type: ignore[arg-type]
    assert missing.value.param == "input"
    hosted: Any = [{"type": "web_search"}]
    with pytest.raises(openai.BadRequestError) as untranslatable:
        client.responses.create(model="chat", input="Search.", tools=hosted)
    assert untranslatable.value.param == "tools"
    assert sim.requests() == []  # none of these reached the upstream
    with pytest.raises(openai.BadRequestError) as upstream:  # the simulator refuses, as OpenAI
        client.responses.create(model="native", input="Hi.", max_output_tokens=8)
    assert "max_output_tokens" in upstream.value.message
    assert gateway.last().status_code == 400  # the refused attempt is booked


def test_a_streamed_function_call_has_argument_deltas(gateway: Gateway, sim: SimControl) -> None:
    """The simulator calls the tool when told to (tool_choice required), streamed natively."""
    client, _ = _client(gateway)
    events = list(
        client.responses.create(
            model="native",
            input="Fare from A to B?",
            tools=TOOLS,
            tool_choice="required",
            stream=True,
        )
    )
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) >= 2 and len(done) == 1 and done[0].arguments == "".join(deltas)
    assert set(orjson.loads(done[0].arguments)) == {"origin", "to"}  # the schema's required
    final = events[-1]
    assert final.type == "response.completed"
    (call,) = final.response.output
    assert call.type == "function_call" and call.name == "lookup_fare"
    ctx = gateway.last()
    assert (
        ctx.usage is not None
        and ctx.usage.completion_tokens == sim.requests()[0]["completion_tokens"]
    )
    assert ctx.timings.first_answer_token is not None  # the first argument delta
    # The ledger row carries the whole breakdown, as the task's requests list shows.
    assert ctx.task is not None
    task = httpx.get(f"{gateway.base_url}/tasks/{ctx.task.task_id}", timeout=30).json()
    (row,) = task["requests"]
    assert row["prompt_tokens"] == ctx.usage.prompt_tokens
    assert row["completion_tokens"] == ctx.usage.completion_tokens
    assert row["cached_tokens"] == ctx.usage.cached_tokens
