"""What the planner keeps per route (merged capabilities, tiers offered) follows a reload.

The planner keeps, per policy and map entry, what a route gives every request alike
(gateway/policy/plan.py `_route_view`, gateway/policy/planner.py `route_capabilities`).
A reload builds a new policy, so the next request must be planned on the new file's
routing: these tests reload through the admin API and assert on what the upstream got.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

BEFORE = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
rules:
  - name: think-a-little
    match: {{model: chat}}
    thinking_budget: 24
routing:
  chat:
    capabilities: {{supports_thinking_budget: true}}
    tiers:
      flex: {{set: {{service_tier: flex}}}}
"""
AFTER = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
rules:
  - name: think-a-little
    match: {{model: chat}}
    thinking_budget: 24
routing:
  chat:
    tiers:
      flex: {{enabled: false}}
"""
USER_STEP = [{"role": "user", "content": "Plan the migration."}]


def _last_sent(sim: SimControl) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(base64.b64decode(str(sim.requests()[-1]["body_b64"])))
    return body


def test_a_reload_changes_the_tiers_and_capabilities_the_next_request_is_planned_with(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(BEFORE.format(sim=sim.url))
    gateway = make_gateway(config=config, reload_poll_s=3600)
    client = gateway.sdk()
    flex = {"X-Speed-Tier": "flex"}
    for _ in range(2):  # the second is planned from what the first kept
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=USER_STEP, extra_headers=flex
        )  # type: ignore[call-overload]
        sent = _last_sent(sim)
        assert sent["service_tier"] == "flex" and sent["thinking_token_budget"] == 24
        assert raw.headers["x-farebox-tier"] == "flex"
        assert raw.headers["x-farebox-thinking-enforcement"] == "backend"

    config.write_text(AFTER.format(sim=sim.url))
    reloaded = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert reloaded.status_code == 200, reloaded.text

    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=USER_STEP, extra_headers=flex
        )  # type: ignore[call-overload]
        sent = _last_sent(sim)
        # flex withdrawn: served at standard; no budget field the backend would not hold.
        assert "service_tier" not in sent and "thinking_token_budget" not in sent
        assert raw.headers["x-farebox-tier"] == "standard"
        assert raw.headers["x-farebox-thinking-enforcement"] == "hint"

    config.write_text(BEFORE.format(sim=sim.url))
    back = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert back.status_code == 200, back.text
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=USER_STEP, extra_headers=flex
    )  # type: ignore[call-overload]
    sent = _last_sent(sim)
    assert sent["service_tier"] == "flex" and sent["thinking_token_budget"] == 24
    assert raw.headers["x-farebox-thinking-enforcement"] == "backend"
    rows = gateway.last(5)
    assert rows.tier_served == "flex"


PRICED = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
prices:
  chat: {{input: {input}, output: 0}}
"""


def test_a_reloaded_price_is_the_one_the_next_request_pays(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(PRICED.format(sim=sim.url, input=1.0))  # USD per million tokens
    gateway = make_gateway(config=config, reload_poll_s=3600)
    client = gateway.sdk()
    costs = []
    for dollars in (1.0, 1.0, 3.0, 3.0):
        if costs and dollars != 1.0 and len(costs) == 2:
            config.write_text(PRICED.format(sim=sim.url, input=dollars))
            reloaded = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
            assert reloaded.status_code == 200, reloaded.text
        raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER_STEP)  # type: ignore[call-overload]
        usage = raw.parse().usage
        assert usage is not None
        cost = Decimal(raw.headers["x-farebox-cost-usd"])
        assert cost == Decimal(usage.prompt_tokens) * Decimal(str(dollars)) / 1_000_000
        costs.append(cost)
    assert costs[2] == 3 * costs[0]
