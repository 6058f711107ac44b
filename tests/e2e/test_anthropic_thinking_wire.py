"""Anthropic thinking on the wire: adaptive models get an effort, never a stray field.

litellm's map lists `claude-opus-4-6` as an adaptive-thinking model, so the planner sends
`reasoning_effort` and litellm turns it into `thinking {type: adaptive}` plus
`output_config.effort`. A Messages API body has no top-level `reasoning_effort`: the
simulator refuses one as Anthropic does, so this test fails if it leaks through.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from gateway.sim.config import default_models
from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

CONFIG = """
models:
  opus: {{provider: anthropic, model: claude-opus-4-6, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
defaults:
  effort: low
"""


@pytest.fixture
def adaptive_sim(sim: SimControl) -> SimControl:
    """The simulator's Claude also answering as claude-opus-4-6."""
    models = [m.model_dump() for m in default_models()]
    for model in models:
        if model["api"] == "anthropic":
            model["aliases"] = ["claude-opus-4-6"]
    sim.http.post("/sim/config", json={"models": models}).raise_for_status()
    return sim


def test_adaptive_thinking_reaches_the_messages_api_as_an_effort(
    make_gateway: GatewayFactory, adaptive_sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=adaptive_sim.url))
    gateway = make_gateway(config=config)
    body = {"model": "opus", "messages": [{"role": "user", "content": "Plan it."}]}
    reply = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    (record,) = adaptive_sim.requests()
    sent = json.loads(base64.b64decode(str(record["body_b64"])))
    assert "reasoning_effort" not in sent
    assert sent["thinking"]["type"] == "adaptive"
    assert sent["output_config"] == {"effort": "low"}
    # An effort is not a token cap: nothing holds a budget, and the gateway says so.
    assert reply.headers["x-farebox-thinking-enforcement"] == "hint"


SEED = """
models:
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
  reasoning-claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
prices:
  claude: {{base: claude-opus-4-6}}            # billed like an adaptive model
  reasoning-claude: {{base: claude-opus-4-6}}
defaults:
  effort: high
routing:
  reasoning-claude:
    capabilities: {{supports_reasoning: true}}
"""


def test_an_unmapped_upstream_gets_no_borrowed_capabilities(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    """The price key's entry (adaptive Opus) is not the upstream's: nothing is refused."""
    config = tmp_path / "farebox.yaml"
    config.write_text(SEED.format(sim=sim.url))
    gateway = make_gateway(config=config)
    for alias in ("claude", "reasoning-claude"):
        body = {"model": alias, "max_tokens": 2560, "messages": [{"role": "user", "content": "Hi"}]}
        reply = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
    plain, reasoning = (json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests())
    # litellm does not know claude-sim: without a capability override no thinking is sent.
    assert "thinking" not in plain and "reasoning_effort" not in plain
    # With one, budgeted thinking fits under the client's max_tokens (high = 8192 lowered).
    assert reasoning["thinking"] == {"type": "enabled", "budget_tokens": 2559}
    assert reasoning["max_tokens"] == 2560 and "reasoning_effort" not in reasoning
