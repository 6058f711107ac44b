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
