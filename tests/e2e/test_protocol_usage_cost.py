"""`usage.cost` in Anthropic Messages and OpenAI Responses replies, as chat's carry it.

Real clients (`anthropic`, `openai`) -> gateway -> simulator -> ledger, whole and
streamed, on a native and a translated route of each protocol. Checked: the SDK still
parses every reply; the cost it shows (a whole reply's `usage`, a stream's
`message_delta` usage or `response.completed`'s `response.usage`) is the usage it shows
times the route's prices, equals `X-Farebox-Cost-Usd` where a header can carry it, and
equals what the ledger billed; the upstream's own usage fields are kept beside it.
"""

from __future__ import annotations

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

CONFIG = """
models:
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
  chat: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  native: {{model: sim-chat, base_url: "{sim}/v1", family: vllm, wire: responses}}
prices:
  claude: {{input: 3.00, cached_input: 0.30, output: 15.00}}
  chat: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  native: {{input: 1.00, cached_input: 0.10, output: 4.00}}
"""
PER_TOKEN = {
    "claude": (Decimal("3e-6"), Decimal("3e-7"), Decimal("15e-6")),
    "chat": (Decimal("1e-6"), Decimal("1e-7"), Decimal("4e-6")),
    "native": (Decimal("1e-6"), Decimal("1e-7"), Decimal("4e-6")),
}
QUESTION = "What is a fare box?"


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


@pytest.fixture
def claude(gateway: Gateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=gateway.server.url, api_key="sk-client-cost", max_retries=0
    ) as sdk:
        yield sdk


def _priced(alias: str, uncached: int, cached: int, output: int) -> Decimal:
    full, read, out = PER_TOKEN[alias]
    return uncached * full + cached * read + output * out


def _billed(gateway: Gateway, task: str) -> Decimal:
    """The task's one ledger row's cost, equal to what the pipeline priced."""
    ctx = gateway.last()
    assert ctx.cost is not None and ctx.cost.total > 0
    reply = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30)
    reply.raise_for_status()
    (row,) = reply.json()["requests"]
    assert Decimal(str(row["cost_total"])) == ctx.cost.total
    return ctx.cost.total


def _sent_paths(sim: SimControl) -> list[str]:
    return [str(r["path"]) for r in sim.requests() if str(r["path"]).startswith("/v1/")]


def _check_cost(cost: dict[str, Any], total: Decimal) -> None:
    assert cost["currency"] == "USD" and cost["priced"] is True
    assert Decimal(cost["total"]) == total
    assert Decimal(cost["input"]) + Decimal(cost["cached"]) + Decimal(cost["output"]) <= total


@pytest.mark.parametrize(
    ("alias", "path"), [("claude", "/v1/messages"), ("chat", "/v1/chat/completions")]
)
def test_a_whole_message_carries_its_cost(
    gateway: Gateway, claude: anthropic.Anthropic, sim: SimControl, alias: str, path: str
) -> None:
    task = f"cost-message-{alias}"
    raw = claude.messages.with_raw_response.create(
        model=alias,
        max_tokens=64,
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"x-task-id": task},
    )
    message = raw.parse()  # the SDK parses it, `cost` kept as an extra field
    usage = message.usage
    cost = (usage.model_extra or {})["cost"]
    cached = usage.cache_read_input_tokens or 0
    expected = _priced(alias, usage.input_tokens, cached, usage.output_tokens)
    _check_cost(cost, expected)
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == expected == _billed(gateway, task)
    keys = list(orjson.loads(raw.http_response.content)["usage"])
    assert keys[0] == "input_tokens" and keys[-1] == "cost"  # added after the upstream's own
    assert _sent_paths(sim) == [path]


@pytest.mark.parametrize(
    ("alias", "path"), [("claude", "/v1/messages"), ("chat", "/v1/chat/completions")]
)
def test_a_streamed_message_carries_its_cost_in_message_delta(
    gateway: Gateway, claude: anthropic.Anthropic, sim: SimControl, alias: str, path: str
) -> None:
    task = f"cost-message-stream-{alias}"
    with claude.messages.stream(
        model=alias,
        max_tokens=64,
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"x-task-id": task},
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()  # the SDK accumulates the stream as usual
    (delta,) = [e for e in events if e.type == "message_delta"]
    assert message.content[0].type == "text" and message.content[0].text
    usage = message.usage
    cost = (delta.usage.model_extra or {})["cost"]
    cached = usage.cache_read_input_tokens or 0
    expected = _priced(alias, usage.input_tokens, cached, usage.output_tokens)
    _check_cost(cost, expected)
    assert expected == _billed(gateway, task)
    (start,) = [e for e in events if e.type == "message_start"]
    assert "cost" not in (start.message.usage.model_extra or {})  # only the final count
    assert _sent_paths(sim) == [path]


@pytest.mark.parametrize(
    ("alias", "path"), [("native", "/v1/responses"), ("chat", "/v1/chat/completions")]
)
def test_a_whole_response_carries_its_cost(
    gateway: Gateway, sim: SimControl, alias: str, path: str
) -> None:
    task = f"cost-response-{alias}"
    client = gateway.sdk(default_headers={"x-task-id": task})
    raw = client.responses.with_raw_response.create(model=alias, input=QUESTION, store=False)
    response = raw.parse()
    assert response.output_text
    usage = response.usage
    assert usage is not None
    cached = usage.input_tokens_details.cached_tokens
    expected = _priced(alias, usage.input_tokens - cached, cached, usage.output_tokens)
    _check_cost((usage.model_extra or {})["cost"], expected)
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == expected == _billed(gateway, task)
    assert _sent_paths(sim) == [path]


@pytest.mark.parametrize(
    ("alias", "path"), [("native", "/v1/responses"), ("chat", "/v1/chat/completions")]
)
def test_a_streamed_response_carries_its_cost_when_completed(
    gateway: Gateway, sim: SimControl, alias: str, path: str
) -> None:
    task = f"cost-response-stream-{alias}"
    client = gateway.sdk(default_headers={"x-task-id": task})
    with client.responses.stream(model=alias, input=QUESTION, store=False) as stream:
        events = list(stream)
        response = stream.get_final_response()
    assert events[-1].type == "response.completed" and response.output_text
    usage = response.usage
    assert usage is not None
    cached = usage.input_tokens_details.cached_tokens
    expected = _priced(alias, usage.input_tokens - cached, cached, usage.output_tokens)
    _check_cost((usage.model_extra or {})["cost"], expected)
    assert expected == _billed(gateway, task)
    created = [e for e in events if e.type == "response.created"]
    assert created[0].response.usage is None  # only the final event has a usage, and cost
    assert _sent_paths(sim) == [path]


def test_a_native_message_delta_gains_only_cost(gateway: Gateway, sim: SimControl) -> None:
    """On a native Messages stream `message_delta` keeps its name, fields and order."""
    body = {
        "model": "claude",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    headers = {"x-api-key": "sk-client-cost", "anthropic-version": "2023-06-01"}
    url = f"{gateway.server.url}/v1/messages"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as reply:
        text = reply.read()
    events = [e for e in text.split(b"\n\n") if e.strip()]
    (delta,) = [e for e in events if e.startswith(b"event: message_delta\n")]
    data = orjson.loads(delta.split(b"\ndata: ", 1)[1])
    assert list(data) == ["type", "delta", "usage"]  # as the simulator (and Anthropic) send it
    assert list(data["usage"])[-1] == "cost" and data["usage"]["output_tokens"] > 0
    ctx = gateway.last()
    assert ctx.cost is not None and Decimal(data["usage"]["cost"]["total"]) == ctx.cost.total
    assert events[-1].startswith(b"event: message_stop\n")
    assert _sent_paths(sim) == ["/v1/messages"]
