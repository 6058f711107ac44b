"""The stream-enforced thinking cap on Anthropic Messages and Responses streams.

Real clients (`anthropic`, `openai`) -> gateway -> the simulator's chat or Responses
server -> ledger. A route without a per-request budget has its thinking cut at the
policy's budget of 8 on the stream, as chat's are: continued for the answer where the
backend can continue (`capped`: vLLM's `continue_final_message`), ended where it cannot
(`cut`: `thinking_overrun: cut`). Checked: the client parses one well-formed stream of
its own protocol; the simulator got the cut call and the continuation (or only the cut
one); the ledger row says `stream`, 8 reasoning tokens and the cost of both calls.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

CONFIG = """
models:
  capped: {{model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  cut: {{model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang}}
  native-cut: {{model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang, wire: responses}}
prices:
  capped: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  cut: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  native-cut: {{input: 1.00, cached_input: 0.10, output: 4.00}}
defaults:
  thinking_budget: 8
routing:
  capped:
    capabilities: {{supports_continue_final_message: true}}   # no budget field: cut and go on
  cut:
    capabilities: {{supports_reasoning: true}}
    thinking_overrun: cut                                      # no continuation: end there
  native-cut:
    capabilities: {{supports_reasoning: true}}
    thinking_overrun: cut
"""
BUDGET = 8
HEADER = "x-farebox-thinking-enforcement"
INPUT, CACHED, OUTPUT = Decimal("1e-6"), Decimal("1e-7"), Decimal("4e-6")
QUESTION = "Plan the migration."
QUESTION_TURN = {"role": "user", "content": QUESTION}


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    sim.http.post("/sim/config", json={"decode_ms_per_token": 5})  # a cut is seen upstream
    return make_gateway(config=config)


@pytest.fixture
def claude(gateway: Gateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=gateway.server.url, api_key="sk-client-cap", max_retries=0
    ) as sdk:
        yield sdk


def _bodies(sim: SimControl) -> list[dict[str, Any]]:
    records = [r for r in sim.requests() if str(r["path"]).startswith("/v1/")]
    return [orjson.loads(base64.b64decode(str(r["body_b64"]))) for r in records]


def _row(gateway: Gateway, task: str) -> dict[str, Any]:
    gateway.last()
    reply = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30)
    reply.raise_for_status()
    (row,) = reply.json()["requests"]
    return dict(row)


def _wait_cancelled(sim: SimControl) -> None:
    """The cut generation was stopped upstream (the simulator marks it cancelled)."""
    deadline = time.monotonic() + 10
    while not any(r.get("cancelled") for r in sim.requests()):
        assert time.monotonic() < deadline, "the cut generation was not cancelled upstream"
        time.sleep(0.05)


def _assert_billed(gateway: Gateway, task: str, cost: Any) -> None:
    """One ledger row: the cap held on the stream, and the price the client was shown."""
    row = _row(gateway, task)
    assert row["thinking_enforcement"] == "stream" and row["reasoning_tokens"] == BUDGET
    assert row["status_code"] == 200
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.reasoning_tokens == BUDGET
    usage = ctx.usage  # both calls: the cut one (counted) and the continuation (reported)
    cached = usage.cached_tokens
    expected = (usage.prompt_tokens - cached) * INPUT + cached * CACHED
    expected += usage.completion_tokens * OUTPUT
    assert ctx.cost.total == expected and Decimal(cost["total"]) == expected
    assert Decimal(str(row["cost_total"])) == expected
    alias = ctx.alias
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    line = f'farebox_thinking_enforcement_total{{enforcement="stream",model="{alias}"}} 1.0'
    assert line in metrics


def test_a_messages_stream_is_cut_and_continued(
    gateway: Gateway, claude: anthropic.Anthropic, sim: SimControl
) -> None:
    with claude.messages.stream(
        model="capped",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},  # as Claude Code asks: clamped
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"x-task-id": "cap-messages"},
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert stream.response.headers[HEADER] == "stream"
    kinds = [e.type for e in events]
    assert kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
    thinking = [
        e for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    ]
    assert len(thinking) == BUDGET  # cut at the budget (the model would think for 40)
    blocks = [block.type for block in message.content]
    assert blocks == ["thinking", "text"] and message.content[1].text.strip()  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens >= BUDGET + len(message.content[1].text.split())  # type: ignore[union-attr]
    (delta,) = [e for e in events if e.type == "message_delta"]
    cost = (delta.usage.model_extra or {})["cost"]
    assert cost["currency"] == "USD" and cost["priced"] is True

    first, follow_up = _bodies(sim)
    assert first.get("thinking_token_budget") == BUDGET  # the client's 1024, clamped by the rule
    assert follow_up["continue_final_message"] is True
    assert follow_up["messages"][-1]["role"] == "assistant"
    assert follow_up["messages"][-1]["content"].rstrip().endswith("</think>")
    _wait_cancelled(sim)
    _assert_billed(gateway, "cap-messages", cost)


def test_a_messages_stream_without_continuation_ends_at_the_budget(
    gateway: Gateway, claude: anthropic.Anthropic, sim: SimControl
) -> None:
    with claude.messages.stream(
        model="cut",
        max_tokens=200,
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"x-task-id": "cap-messages-cut"},
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    thinking = [
        e for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    ]
    assert len(thinking) == BUDGET
    assert [block.type for block in message.content] == ["thinking"]  # no answer after a cut
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == BUDGET
    assert [e.type for e in events][-2:] == ["message_delta", "message_stop"]
    (delta,) = [e for e in events if e.type == "message_delta"]
    cost = (delta.usage.model_extra or {})["cost"]
    (sent,) = _bodies(sim)  # one upstream call, never a continuation
    assert "continue_final_message" not in sent
    _wait_cancelled(sim)
    _assert_billed(gateway, "cap-messages-cut", cost)


def test_a_translated_responses_stream_is_cut_and_continued(
    gateway: Gateway, sim: SimControl
) -> None:
    client = gateway.sdk(default_headers={"x-task-id": "cap-responses"})
    with client.responses.stream(model="capped", input=QUESTION, store=False) as stream:
        events = list(stream)
        response = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    assert kinds.count("response.reasoning_text.delta") == BUDGET
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))  # one stream, numbered once
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output_text.strip() and response.status == "completed"
    usage = response.usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens == BUDGET
    cost = (usage.model_extra or {})["cost"]
    _, follow_up = _bodies(sim)
    assert follow_up["continue_final_message"] is True
    assert follow_up["messages"][-1]["content"].rstrip().endswith("</think>")
    _wait_cancelled(sim)
    _assert_billed(gateway, "cap-responses", cost)


@pytest.mark.parametrize("alias", ["cut", "native-cut"])
def test_a_responses_stream_without_continuation_ends_incomplete(
    gateway: Gateway, sim: SimControl, alias: str
) -> None:
    task = f"cap-responses-{alias}"
    client = gateway.sdk(default_headers={"x-task-id": task})
    with client.responses.stream(model=alias, input=QUESTION, store=False) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    response = events[-1].response  # type: ignore[union-attr]  # the SDK's final is .completed
    assert kinds.count("response.reasoning_text.delta") == BUDGET
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    assert kinds[-3:-1] == ["response.reasoning_text.done", "response.output_item.done"]
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["reasoning"]
    usage = response.usage
    assert usage is not None and usage.output_tokens == BUDGET
    cost = (usage.model_extra or {})["cost"]
    (sent,) = _bodies(sim)
    assert "continue_final_message" not in sent
    _wait_cancelled(sim)
    _assert_billed(gateway, task, cost)


@pytest.mark.parametrize(
    ("path", "alias"),
    [
        ("messages", "capped"),
        ("messages", "cut"),
        ("responses", "capped"),
        ("responses", "cut"),
        ("responses", "native-cut"),
    ],
)
def test_every_event_of_a_cut_stream_is_valid_in_its_protocol(
    gateway: Gateway, sim: SimControl, path: str, alias: str
) -> None:
    """Each event validates strictly against the SDK's own event types; names match data."""
    if path == "messages":
        body: dict[str, Any] = {"model": alias, "max_tokens": 200, "messages": [QUESTION_TURN]}
        strict: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    else:
        body = {"model": alias, "input": QUESTION, "store": False}
        strict = TypeAdapter(ResponseStreamEvent)
    url = f"{gateway.server.url}/v1/{path}"
    headers = {"Authorization": "Bearer sk-client-cap"}
    with httpx.stream("POST", url, json=body | {"stream": True}, headers=headers) as reply:
        text = reply.read()
    assert reply.status_code == 200 and reply.headers[HEADER] == "stream"
    kinds = []
    for raw in (e for e in text.split(b"\n\n") if e.strip()):
        name, data = raw.split(b"\n", 1)
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert name == b"event: " + payload["type"].encode()
        strict.validate_python(payload)
        kinds.append(payload["type"])
    assert kinds[-1] in ("message_stop", "response.completed", "response.incomplete")
    assert "error" not in kinds
    thought = ("thinking_delta", "response.reasoning_text.delta")
    deltas = [raw for raw in text.split(b"\n\n") if any(k.encode() in raw for k in thought)]
    assert len(deltas) == BUDGET
    gateway.last()
