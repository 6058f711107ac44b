"""Responses to a litellm route (Anthropic's Messages API): translated to chat, then by litellm.

The gateway's translation gives litellm a chat completion; litellm speaks the Messages API
to the simulator; the reply and the stream come back as Responses, billed at Claude
Sonnet 4.5's prices, and a chain continues across the two calls.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

CONFIG = """
models:
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
prices:
  claude: {{base: claude-sonnet-4-5}}
"""
INPUT, OUTPUT = Decimal("3e-6"), Decimal("15e-6")


def test_responses_reach_an_anthropic_route_through_litellm(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    gateway = make_gateway(config=config)
    client = gateway.sdk()
    first = client.responses.create(
        model="claude", instructions="Be brief.", input="Hi.", max_output_tokens=300
    )
    assert first.output_text and first.usage is not None
    with client.responses.stream(
        model="claude", input="Hi again.", previous_response_id=first.id
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.usage is not None and final.usage.input_tokens > first.usage.input_tokens
    records = sim.requests()
    assert [r["path"] for r in records] == ["/v1/messages", "/v1/messages"]
    assert final.usage.input_tokens == records[1]["prompt_tokens"]
    cost = final.usage.input_tokens * INPUT + final.usage.output_tokens * OUTPUT
    ctx = gateway.last(2)
    assert ctx.cost is not None and ctx.cost.total == cost > 0
