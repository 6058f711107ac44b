"""Cache money end to end: what a prefix break cost, in the ledger and the metric, and
Anthropic routes that cache nothing because the request carries no breakpoints."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

GUIDE = "You are the billing agent. Follow the runbook exactly. " * 120
CONFIG = """
models:
  gpt:
    provider: openai
    model: sim-chat
    base_url: {sim}/v1
    family: openai
  claude:
    provider: anthropic
    model: claude-sim
    base_url: {sim}
    api_key_env: FAREBOX_TEST_ANTHROPIC_KEY
  claude-cached:
    provider: anthropic
    model: claude-sim
    base_url: {sim}
    api_key_env: FAREBOX_TEST_ANTHROPIC_KEY
    prefix: [anthropic_cache_control]
prices:
  gpt: {{base: gpt-4o}}
  claude: {{base: claude-sonnet-4-5}}
  claude-cached: {{base: claude-sonnet-4-5}}
"""
MILLION = 1_000_000


@pytest.fixture
def priced(make_gateway: GatewayFactory, tmp_path: Path, sim: SimControl) -> Gateway:
    path = tmp_path / "farebox.yaml"
    path.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=path)


def _turns(step: int, stamp_on_top: bool) -> list[dict[str, str]]:
    system = f"Current time: 2026-11-30T10:{step:02d}:07Z\n{GUIDE}" if stamp_on_top else GUIDE
    messages = [{"role": "system", "content": system}]
    for earlier in range(step):
        messages += [
            {"role": "user", "content": f"Check invoice {earlier}."},
            {"role": "assistant", "content": f"Invoice {earlier} is paid."},
        ]
    return [*messages, {"role": "user", "content": f"Check invoice {step}."}]


def _send(gateway: Gateway, model: str, task: str, messages: Any) -> httpx.Response:
    body = {"model": model, "messages": messages}
    headers = {"X-Task-Id": task, "Authorization": "Bearer sk-client-key"}
    response = httpx.post(f"{gateway.base_url}/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response


def _per_token(gateway: Gateway, model: str, cached: bool) -> Decimal:
    """The route's price of one input token (or one cache read), from the gateway's own book."""
    body = {"model": model, "input_tokens": MILLION, "cached_tokens": MILLION if cached else 0}
    quote = httpx.post(f"{gateway.base_url}/cost/estimate", json=body).json()
    return Decimal(quote["cached" if cached else "input"]) / MILLION


def _lost_metric(gateway: Gateway, model: str) -> Decimal:
    text = httpx.get(f"{gateway.server.url}/metrics").text
    found = re.search(rf'farebox_prefix_lost_usd_total\{{model="{model}"\}} (\S+)', text)
    return Decimal(found.group(1)) if found else Decimal(0)


def _rows(gateway: Gateway, task: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = httpx.get(f"{gateway.base_url}/tasks/{task}").json()["requests"]
    return rows


def test_a_timestamp_moved_to_the_top_books_the_lost_dollars(priced: Gateway) -> None:
    before = _lost_metric(priced, "gpt")
    replies = [
        _send(priced, "gpt", "task-break", _turns(0, stamp_on_top=False)),
        _send(priced, "gpt", "task-break", _turns(1, stamp_on_top=True)),
    ]
    for reply in replies:  # announced before the call, never more than the prompt itself
        expected = int(reply.headers["x-farebox-expected-cached-tokens"])
        assert 0 <= expected <= reply.json()["usage"]["prompt_tokens"]
    assert "volatile_value" in replies[1].headers["x-farebox-prefix"]

    first, broken = _rows(priced, "task-break")
    saving = _per_token(priced, "gpt", cached=False) - _per_token(priced, "gpt", cached=True)
    assert saving > 0
    assert first["prefix_lost_usd"] == "0E-10" or Decimal(first["prefix_lost_usd"]) == 0
    assert broken["prefix_status"] == "miss:volatile_value"
    # The forecast is what the first request left in the cache: never above the prompt.
    assert 1024 <= broken["expected_cached_tokens"] <= broken["prompt_tokens"]
    missed = broken["expected_cached_tokens"] - broken["cached_tokens"]
    lost = Decimal(broken["prefix_lost_usd"])
    assert lost == (missed * saving).quantize(Decimal("1e-10"))
    assert lost > 0
    assert _lost_metric(priced, "gpt") - before == pytest.approx(lost, abs=Decimal("1e-9"))


def test_a_stable_prefix_loses_nothing_and_is_announced_within_the_prompt(priced: Gateway) -> None:
    for step in range(3):
        reply = _send(priced, "gpt", "task-stable", _turns(step, stamp_on_top=False))
        usage = reply.json()["usage"]
        expected = int(reply.headers["x-farebox-expected-cached-tokens"])
        assert expected <= usage["prompt_tokens"]
        assert reply.headers["x-farebox-prefix"] == "stable"
    rows = _rows(priced, "task-stable")
    assert [Decimal(r["prefix_lost_usd"]) for r in rows] == [0, 0, 0]
    assert all(r["prefix_status"].startswith("hit") for r in rows[1:])
    assert _lost_metric(priced, "gpt") == 0


def test_anthropic_without_breakpoints_is_reported_uncacheable(
    priced: Gateway, sim: SimControl
) -> None:
    replies = [_send(priced, "claude", "task-bare", _turns(s, False)) for s in range(2)]
    for reply in replies:
        status = reply.headers["x-farebox-prefix"]
        assert status.startswith("uncacheable; reason=no breakpoints; fix=")
        assert "cache_control" in status
        assert reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert [r["prefix_status"] for r in _rows(priced, "task-bare")] == ["uncacheable"] * 2

    # The same prompts on a route that places breakpoints are cacheable, and are cached.
    cached = [_send(priced, "claude-cached", "task-marked", _turns(s, False)) for s in range(2)]
    assert not cached[1].headers["x-farebox-prefix"].startswith("uncacheable")
    assert cached[1].json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 1000

    lint = httpx.post(
        f"{priced.base_url}/prefix/lint", json={"model": "claude", "messages": _turns(0, False)}
    ).json()
    assert lint["clean"] is False and lint["cache"] == "uncacheable"
    assert lint["uncacheable"]["reason"] == "no breakpoints"
    assert "cache_control" in lint["uncacheable"]["fix"]
