"""The route's prefix actions on translated requests: Messages and Responses sent as chat.

A client that sends its tools in another order (and their keys in another order) on the
second step of a task breaks the prompt cache. On a route with `prefix: [normalize,
sticky_cache_key]` the gateway rewrites the chat body it sends, translated from the
Anthropic Messages API (`anthropic` SDK) or from the Responses API (`openai` SDK), as it
does for chat completions: the simulator receives the tools in one canonical form both
times and the same `prompt_cache_key`; the second step is `stable` in `X-Farebox-Prefix`,
a cache hit in the ledger, where the same steps on a route without the actions are a
break and a miss. On an Anthropic route reached through litellm, `anthropic_cache_control`
places the breakpoints a translated Responses request did not carry.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

CONFIG = """
models:
  tidy: {{model: sim-chat, base_url: "{sim}/v1", family: openai, prefix: [normalize, sticky_cache_key]}}
  plain: {{model: sim-chat, base_url: "{sim}/v1", family: openai}}
  claude-cached:
    provider: anthropic
    model: claude-sim
    base_url: "{sim}"
    api_key_env: FAREBOX_TEST_ANTHROPIC_KEY
    prefix: [anthropic_cache_control]
prices:
  tidy: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  plain: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  claude-cached: {{base: claude-sonnet-4-5}}
"""
GUIDE = "You are the billing agent. Follow the runbook exactly. " * 120
SCHEMA: Any = {"type": "object", "properties": {"id": {"type": "string"}}}
SCHEMA_REORDERED: Any = {"properties": {"id": {"type": "string"}}, "type": "object"}
NAMES = ("lookup_invoice", "refund_invoice")


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


def _messages_tools(step: int) -> list[dict[str, Any]]:
    """Anthropic tools: step 1 in another order, each with its keys in another order."""
    if step == 0:
        return [{"name": n, "description": "Act.", "input_schema": SCHEMA} for n in NAMES]
    return [
        {"input_schema": SCHEMA_REORDERED, "description": "Act.", "name": n} for n in NAMES[::-1]
    ]


def _responses_tools(step: int) -> list[dict[str, Any]]:
    if step == 0:
        return [{"type": "function", "name": n, "parameters": SCHEMA} for n in NAMES]
    return [{"parameters": SCHEMA_REORDERED, "name": n, "type": "function"} for n in NAMES[::-1]]


def _via_messages(gateway: Gateway) -> Callable[[str, str, int], str]:
    sdk = anthropic.Anthropic(base_url=gateway.server.url, api_key="sk-prefix", max_retries=0)

    def step(alias: str, task: str, n: int) -> str:
        raw = sdk.messages.with_raw_response.create(
            model=alias,
            max_tokens=32,
            system=GUIDE,
            tools=_messages_tools(n),  # type: ignore[arg-type]
            messages=[{"role": "user", "content": f"Check invoice {n}."}],
            extra_headers={"X-Task-Id": task},
        )
        return raw.headers["x-farebox-prefix"]

    return step


def _via_responses(gateway: Gateway) -> Callable[[str, str, int], str]:
    client = gateway.sdk(api_key="sk-prefix")

    def step(alias: str, task: str, n: int) -> str:
        raw = client.responses.with_raw_response.create(
            model=alias,
            instructions=GUIDE,
            tools=_responses_tools(n),  # type: ignore[arg-type]
            input=f"Check invoice {n}.",
            max_output_tokens=32,
            store=False,
            extra_headers={"X-Task-Id": task},
        )
        return raw.headers["x-farebox-prefix"]

    return step


def _sent(sim: SimControl, count: int) -> list[dict[str, Any]]:
    records = [r for r in sim.requests() if r["path"] == "/v1/chat/completions"][-count:]
    return [orjson.loads(base64.b64decode(str(r["body_b64"]))) for r in records]


def _rows(gateway: Gateway, task: str) -> list[dict[str, Any]]:
    rows = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30).json()["requests"]
    return sorted(rows, key=lambda row: str(row["task_step"] or row["created_at"]))


@pytest.mark.parametrize("wire", ["messages", "responses"])
def test_normalize_and_sticky_key_apply_to_the_translated_body(
    gateway: Gateway, sim: SimControl, wire: str
) -> None:
    step = (_via_messages if wire == "messages" else _via_responses)(gateway)
    headers = [step("tidy", f"tidy-{wire}", n) for n in range(2)]
    first, second = _sent(sim, 2)
    # The simulator got one canonical tool list twice: sorted by name, keys sorted.
    assert first["tools"] == second["tools"]
    assert orjson.dumps(first["tools"]) == orjson.dumps(second["tools"])  # key order too
    assert [t["function"]["name"] for t in second["tools"]] == list(NAMES)
    assert list(second["tools"][0]["function"]["parameters"]) == ["properties", "type"]
    key = first["prompt_cache_key"]
    assert key.startswith("fbx-") and second["prompt_cache_key"] == key
    assert headers[1] == "stable"
    tidy_rows = _rows(gateway, f"tidy-{wire}")
    assert len(tidy_rows) == 2 and str(tidy_rows[1]["prefix_status"]).startswith("hit")
    assert tidy_rows[1]["cached_tokens"] > 1000

    plain = [step("plain", f"plain-{wire}", n) for n in range(2)]
    unchanged = _sent(sim, 2)
    assert [t["function"]["name"] for t in unchanged[1]["tools"]] == list(NAMES[::-1])
    assert "prompt_cache_key" not in unchanged[0]
    assert plain[1].startswith("break; segment=tools")
    plain_rows = _rows(gateway, f"plain-{wire}")
    assert str(plain_rows[1]["prefix_status"]).startswith("miss")
    assert plain_rows[1]["cached_tokens"] < 100


def test_a_translated_responses_clients_own_cache_key_is_sent(
    gateway: Gateway, sim: SimControl
) -> None:
    gateway.sdk().responses.create(
        model="plain", input="Hi.", prompt_cache_key="my-agent-7", store=False
    )
    (sent,) = _sent(sim, 1)
    assert sent["prompt_cache_key"] == "my-agent-7"
    gateway.sdk().responses.create(
        model="tidy", input="Hi.", prompt_cache_key="my-agent-7", store=False
    )
    (sent,) = _sent(sim, 1)
    assert sent["prompt_cache_key"] == "my-agent-7"  # the client's wins over a sticky one


def test_breakpoints_reach_an_anthropic_route_for_a_translated_response(
    gateway: Gateway, sim: SimControl
) -> None:
    client = gateway.sdk()
    first = client.responses.create(
        model="claude-cached", instructions=GUIDE, input="First question.", max_output_tokens=32
    )
    raw = client.responses.with_raw_response.create(
        model="claude-cached",
        instructions=GUIDE,  # instructions are not carried along a chain
        input="Next.",
        previous_response_id=first.id,
        max_output_tokens=32,
    )
    second = raw.parse()
    sent = [r for r in sim.requests() if r["path"] == "/v1/messages"][-1]
    body = orjson.loads(base64.b64decode(str(sent["body_b64"])))
    assert "cache_control" in orjson.dumps(body).decode()  # placed by the gateway
    assert not raw.headers["x-farebox-prefix"].startswith("uncacheable")
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens > 1000
    row = _rows(gateway, str(raw.headers["x-task-id"]))[-1]
    # `unexpected_hit` as on chat: the check runs before the breakpoints are placed.
    assert "hit" in str(row["prefix_status"]) and row["cached_tokens"] > 1000
