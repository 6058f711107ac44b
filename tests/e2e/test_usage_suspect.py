"""Nonsense usage from an upstream: the client sees it as sent, the ledger bills it clamped.

The simulator's `usage` fault replaces its usage object; the gateway runs with its real
ledger (SQLite under the data dir), read back through GET /v1/tasks.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.pipeline.record import COMPONENT_CEILING
from gateway.usage import MAX_TOKENS_PER_CALL
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

MESSAGES = [{"role": "user", "content": "Say hello."}]
# Billed as sent, this is 1e9 reasoning tokens at $1e-6: $1,000 for an empty answer.
NONSENSE = {
    "prompt_tokens": 10,
    "completion_tokens": 0,
    "total_tokens": 10,
    "prompt_tokens_details": {"cached_tokens": 50},
    "completion_tokens_details": {"reasoning_tokens": 1_000_000_000},
}


def booked(gateway: Gateway, task: str) -> dict[str, Any]:
    """The task as the ledger has it."""
    response = httpx.get(f"{gateway.base_url}/tasks/{task}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def suspect_count(gateway: Gateway, model: str) -> float:
    """farebox_usage_suspect_total for `model`, read from /metrics."""
    text = httpx.get(f"{gateway.server.url}/metrics").text
    prefix = f'farebox_usage_suspect_total{{model="{model}"}} '
    values = [
        float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix)
    ]
    return values[0] if values else 0.0


def test_nonsense_usage_is_clamped_flagged_and_kept(gateway: Gateway, sim: SimControl) -> None:
    sim.fault(match={"model": "sim-chat"}, usage=NONSENSE)
    client = gateway.sdk(default_headers={"X-Task-Id": "nonsense"})
    completion = client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    # The client sees the upstream's numbers, untouched.
    assert completion.usage is not None and completion.usage.prompt_tokens == 10
    details = completion.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == 1_000_000_000

    [row] = booked(gateway, "nonsense")["requests"]
    assert row["usage_suspect"] is True
    assert json.loads(row["usage_reported"]) == NONSENSE
    assert (row["prompt_tokens"], row["cached_tokens"]) == (10, 10)
    assert (row["completion_tokens"], row["reasoning_tokens"]) == (0, 0)
    assert Decimal(row["cost_reasoning"]) == 0
    assert Decimal(row["cost_total"]) < Decimal("0.000001")
    assert suspect_count(gateway, "chat") == 1.0
    # Clamped, the row was storable: the ledger set nothing aside.
    metrics = httpx.get(f"{gateway.server.url}/metrics").text
    assert "farebox_ledger_rows_rejected_total 0.0" in metrics.splitlines()


def test_streamed_nonsense_is_clamped_and_the_next_request_is_not(
    gateway: Gateway, sim: SimControl
) -> None:
    huge = {"prompt_tokens": 3_000_000_000, "completion_tokens": -7, "total_tokens": "n/a"}
    sim.fault(match={"model": "sim-chat"}, usage=huge)
    client = gateway.sdk(default_headers={"X-Task-Id": "streamed"})
    stream = client.chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert usage[-1] is not None and usage[-1].prompt_tokens == 3_000_000_000
    client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]

    first, second = booked(gateway, "streamed")["requests"]
    assert first["usage_suspect"] is True and json.loads(first["usage_reported"]) == huge
    assert (first["prompt_tokens"], first["completion_tokens"]) == (MAX_TOKENS_PER_CALL, 0)
    assert second["usage_suspect"] is False and second["usage_reported"] is None
    assert second["prompt_tokens"] > 0
    assert suspect_count(gateway, "chat") == 1.0


@pytest.mark.parametrize("model", ["thinker", "claude", "claude-cached"])
def test_honest_usage_is_billed_as_sent(gateway: Gateway, sim: SimControl, model: str) -> None:
    # Long enough to be cached: the second call reads (and Anthropic's first writes) a cache.
    messages = [{"role": "system", "content": "You are a careful agent. " * 400}, *MESSAGES]
    client = gateway.sdk(default_headers={"X-Task-Id": f"honest-{model}"})
    sent = [
        client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
        for _ in range(2)
    ]
    rows = booked(gateway, f"honest-{model}")["requests"]
    for completion, row in zip(sent, rows, strict=True):
        assert completion.usage is not None
        assert row["usage_suspect"] is False and row["usage_reported"] is None
        assert row["prompt_tokens"] == completion.usage.prompt_tokens
        assert row["completion_tokens"] == completion.usage.completion_tokens
    if model != "claude":  # Anthropic caches only at breakpoints, which claude-cached adds
        assert rows[-1]["cached_tokens"] > 0
    assert suspect_count(gateway, model) == 0.0


def test_an_absurd_price_is_booked_capped_not_a_500(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    # A price meant per token, written where the book expects per million: 1e12 USD a token.
    config = tmp_path / "absurd.yaml"
    config.write_text(
        f"models:\n  chat: {{model: sim-chat, base_url: '{sim.base_url}', family: vllm}}\n"
        "prices:\n  chat: {input: 1e18, output: 1e18}\n"
    )
    gateway = make_gateway(config=config)
    client = gateway.sdk(default_headers={"X-Task-Id": "absurd"})
    completion = client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content
    [row] = booked(gateway, "absurd")["requests"]
    assert row["status_code"] == 200
    assert Decimal(row["cost_input"]) == COMPONENT_CEILING
    assert Decimal(row["cost_total"]) == 2 * COMPONENT_CEILING
