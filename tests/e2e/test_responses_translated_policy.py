"""A translated Responses request gets every chat-only field the policy sets.

The policy plans in chat terms; a Responses request served over chat completions is sent
as a chat body, so a chat-only field (vLLM's `thinking_token_budget`) must reach the
upstream as it would for a chat request: checked on what the simulator received and on
what the ledger billed.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson

from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

POLICY = """
models:
  thinker: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
prices:
  thinker: {{input: 1.00, cached_input: 0.10, output: 4.00}}
rules:
  - name: thinker-thinks-a-little
    match: {{model: thinker}}
    thinking_budget: 128
    max_tokens: {{default: 600, ceiling: 600}}
routing:
  thinker:
    capabilities: {{supports_thinking_budget: true}}
"""


def _chat_bodies(sim: SimControl) -> list[dict[str, Any]]:
    records = [r for r in sim.requests() if r["path"] == "/v1/chat/completions"]
    return [orjson.loads(base64.b64decode(str(r["body_b64"]))) for r in records]


def test_the_thinking_budget_field_reaches_a_translated_responses_call(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(POLICY.format(sim=sim.url))
    gateway = make_gateway(config=config)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0)
    reply = client.responses.create(
        model="thinker",
        input="Plan the migration.",
        max_output_tokens=4000,
        reasoning={"effort": "high"},
        extra_headers={"X-Task-Id": "responses-budget"},
    )
    (body,) = _chat_bodies(sim)
    assert body["thinking_token_budget"] == 128  # the rule's cap, in vLLM's own field
    assert body["max_completion_tokens"] == 600 + 128  # the answer's ceiling plus the budget
    assert reply.usage is not None
    reasoning = reply.usage.output_tokens_details.reasoning_tokens
    assert 0 < reasoning <= 128  # the simulator held the budget it was sent
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.reasoning_tokens == reasoning
    task = httpx.get(f"{gateway.base_url}/tasks/responses-budget", timeout=30).json()
    assert task["request_count"] == 1
    assert Decimal(task["cost"]["total"]) == ctx.cost.total > 0
