"""Policies end to end: each rule kind changes what the upstream receives."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

TOOL_STEP = [
    {"role": "user", "content": "Find invoice 7."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "invoice 7: paid"},
]
USER_STEP = [{"role": "user", "content": "Plan the migration."}]

POLICY = """
models:
  thinker: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  fragile: {{provider: openai, model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang}}
  capped: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  pinned: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
defaults:
  max_tokens: {{default: 300, ceiling: 600}}
rules:
  - name: claude-thinks-a-little
    match: {{model: claude}}
    thinking_budget: 2048
    max_tokens: {{default: 1000, ceiling: 1000}}
  - name: pinned-first-effort
    match: {{model: pinned, step: user_turn}}
    effort: high
    pin_effort_per_task: true
  - name: pinned-later-steps
    match: {{model: pinned}}
    effort: low
    pin_effort_per_task: true
  - name: short-thoughts
    match: {{model: capped}}
    thinking_budget: 10
  - name: think-on-user-turns
    match: {{model: thinker, step: user_turn}}
    thinking_budget: 24
  - name: no-thinking-on-tool-results
    match: {{model: thinker, step: tool_result}}
    effort: none
  - name: overnight-tool-steps-on-flex
    match: {{model: chat, step: tool_result}}
    tier: {{force: flex}}
routing:
  claude:
    capabilities: {{supports_reasoning: true}}  # claude-sim is not in litellm's map
  thinker:
    capabilities: {{supports_thinking_budget: true, supports_continue_final_message: true}}
  chat:
    tiers:
      flex: {{set: {{service_tier: flex}}}}
    fallbacks:
      - {{from_tier: flex, statuses: [429, 503], tier: standard}}
    retry: {{attempts: 0}}
  capped:
    # No hard budget on this backend: Farebox cuts the thinking on the stream.
    capabilities: {{supports_continue_final_message: true}}
  fragile:
    retry: {{attempts: 0}}
    breaker: {{failures: 2, window_s: 60, cooldown_s: 60}}
"""


@pytest.fixture
def policy_file(tmp_path: Path, sim: SimControl) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(sim=sim.url))
    return path


def _sent(sim: SimControl) -> list[dict[str, Any]]:
    return [json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests()]


def test_rules_change_what_the_upstream_receives(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    client = gateway.sdk()
    first = client.chat.completions.create(model="thinker", messages=USER_STEP, max_tokens=5000)  # type: ignore[arg-type]
    client.chat.completions.create(model="thinker", messages=TOOL_STEP)  # type: ignore[arg-type]
    user_turn, tool_result = _sent(sim)
    # user_turn: a 24-token thinking budget; the 5000-token ask is clamped to the ceiling
    # (plus the budget, since vLLM counts thinking inside max_tokens).
    assert user_turn["thinking_token_budget"] == 24
    assert user_turn["max_tokens"] == 600 + 24
    assert first.usage is not None and first.usage.completion_tokens_details is not None
    assert first.usage.completion_tokens_details.reasoning_tokens == 24
    # tool_result: thinking off, and the default output cap set.
    assert tool_result["chat_template_kwargs"]["enable_thinking"] is False
    assert tool_result["max_tokens"] == 300
    rows = gateway.last(2)
    assert rows.task is not None and rows.task.step_kind == "tool_result"
    assert gateway.seen[0].clamped and not gateway.seen[1].clamped
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert 'farebox_policy_clamps_total{model="thinker",rule="think-on-user-turns"} 1.0' in metrics


def test_flex_429_falls_back_to_standard_with_two_ledger_rows(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    sim.fault(match={"model": "sim-chat", "service_tier": "flex"}, status=429, count=1)
    raw = gateway.sdk().chat.completions.with_raw_response.create(
        model="chat",
        messages=TOOL_STEP,
        extra_headers={"X-Task-Id": "task-flex"},  # type: ignore[arg-type]
    )
    assert raw.headers["x-farebox-tier"] == "standard"
    flex, standard = _sent(sim)
    assert flex["service_tier"] == "flex" and "service_tier" not in standard
    task = httpx.get(f"{gateway.base_url}/tasks/task-flex", timeout=30).json()
    rows = sorted(task["requests"], key=lambda r: r["attempt"])
    assert [(r["attempt"], r["status_code"]) for r in rows] == [(0, 429), (1, 200)]
    assert rows[0]["request_id"] == rows[1]["request_id"]
    assert rows[0]["tier_requested"] == "flex" and rows[1]["tier_served"] == "standard"


def test_invalid_policy_file_leaves_the_old_one_in_force(
    make_gateway: GatewayFactory, policy_file: Path
) -> None:
    gateway = make_gateway(config=policy_file)
    good = policy_file.read_text()
    policy_file.write_text(good.replace("thinking_budget: 24", "thinking_budget: lots"))
    refused = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert refused.status_code == 400
    assert "policy.yaml:" in refused.json()["error"]["message"]
    assert "thinking_budget" in refused.json()["error"]["message"]
    # Still the old policy: the 24-token budget applies.
    gateway.sdk().chat.completions.create(model="thinker", messages=USER_STEP)  # type: ignore[arg-type]
    assert gateway.last().task is not None
    policy_file.write_text(good.replace("thinking_budget: 24", "thinking_budget: 32"))
    applied = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert applied.status_code == 200


def test_policy_explain_matches_what_the_request_then_does(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl, tmp_path: Path
) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "thinker", "messages": USER_STEP, "max_tokens": 5000}))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "policy",
            "explain",
            str(request),
            "--config",
            str(policy_file),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert explained["rule"] == "think-on-user-turns" and explained["step_kind"] == "user_turn"
    gateway = make_gateway(config=policy_file)
    httpx.post(f"{gateway.base_url}/chat/completions", content=request.read_bytes(), timeout=30)
    (sent,) = _sent(sim)
    for field, value in explained["edits"]["set"].items():
        assert sent[field] == value
    assert gateway.last().response_headers["x-farebox-rule"] == "think-on-user-turns"


def test_circuit_breaker_opens_after_repeated_failures(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    sim.fault(match={"model": "sim-sglang-thinker"}, status=500, count=2)
    body = {"model": "fragile", "messages": USER_STEP}
    for _ in range(2):
        assert (
            httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30).status_code
            == 500
        )
    blocked = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30)
    assert blocked.status_code == 503 and blocked.json()["error"]["code"] == "circuit_open"
    assert len(sim.requests()) == 2  # the open circuit sent nothing upstream
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    labels = f'backend="{sim.base_url}",model="fragile",status="503",tier="standard"'
    assert f"farebox_requests_total{{{labels}}} 1.0" in metrics  # the ledger's backend name


def test_stream_enforced_thinking_cap_answers_in_one_stream(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    sim.http.post("/sim/config", json={"decode_ms_per_token": 10})  # a cut can be seen upstream
    stream = gateway.sdk().chat.completions.create(
        model="capped",
        messages=USER_STEP,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
    reasoning = [d for d in deltas if d.get("reasoning")]
    answer = "".join(d.get("content") or "" for d in deltas)
    assert len(reasoning) == 10  # cut at the budget (the model would think for 40)
    assert answer.strip()  # and the answer still arrived, in the same stream
    assert sum(1 for d in deltas if d.get("role")) == 1  # one stream, one opening
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 10
    assert usage.completion_tokens >= 10 + len(answer.split())
    assert usage.model_extra is not None and "cost" in usage.model_extra
    first, follow_up = _sent(sim)
    assert "thinking_token_budget" not in first
    assert follow_up["continue_final_message"] is True
    assert follow_up["messages"][-1]["role"] == "assistant"
    assert follow_up["messages"][-1]["content"].rstrip().endswith("</think>")
    ctx = gateway.last()  # booked once the relay closed: the cut call is cancelled by then
    deadline = time.monotonic() + 10
    while not any(r.get("cancelled") for r in sim.requests()):  # the cut generation stopped
        assert time.monotonic() < deadline, "the cut generation was not cancelled upstream"
        time.sleep(0.05)
    assert ctx.usage is not None and ctx.usage.reasoning_tokens == 10


def test_effort_stays_pinned_within_a_task(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    client = gateway.sdk(default_headers={"X-Task-Id": "task-pinned"})
    client.chat.completions.create(model="pinned", messages=USER_STEP)  # type: ignore[arg-type]
    client.chat.completions.create(model="pinned", messages=TOOL_STEP)  # type: ignore[arg-type]
    gateway.sdk().chat.completions.create(model="pinned", messages=TOOL_STEP)  # type: ignore[arg-type]
    first, second, other_task = _sent(sim)
    assert first["reasoning_effort"] == second["reasoning_effort"] == "high"  # cache-stable
    assert other_task["reasoning_effort"] == "low"  # a request of its own is not pinned


def test_a_changed_file_is_reloaded_by_itself(
    make_gateway: GatewayFactory, policy_file: Path
) -> None:
    gateway = make_gateway(config=policy_file)
    text = policy_file.read_text()
    extra = '  extra: {provider: openai, model: sim-chat, base_url: "http://127.0.0.1:1/v1"}\n'
    policy_file.write_text(text.replace("models:\n", "models:\n" + extra, 1))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        ids = [m["id"] for m in httpx.get(f"{gateway.base_url}/models", timeout=5).json()["data"]]
        if "extra" in ids:
            return
        time.sleep(0.2)
    raise AssertionError("the changed configuration file was not reloaded")


def test_anthropic_thinking_budget_reaches_the_messages_api(
    make_gateway: GatewayFactory, policy_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=policy_file)
    reply = gateway.sdk().chat.completions.create(model="claude", messages=USER_STEP)  # type: ignore[arg-type]
    assert reply.choices[0].message.content
    (sent,) = _sent(sim)
    # Anthropic counts thinking inside max_tokens: the answer cap plus the budget.
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["max_tokens"] == 1000 + 2048
