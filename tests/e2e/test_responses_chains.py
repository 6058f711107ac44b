"""Responses chains across replicas and callers, prefix breaks within a chain, cut streams.

Two gateways on one Redis continue each other's chains (the kept response is shared
state); a key that did not make a response cannot continue it; an instruction changed
mid-chain is a prefix break; a stream the upstream drops ends with a Responses `error`
event and is booked as a failed attempt with its output estimated.
"""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.test_responses import CONFIG, INSTRUCTIONS
from tests.redis_service import require_redis


def _config(sim: SimControl, tmp_path: Path) -> Path:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return config


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    return make_gateway(config=_config(sim, tmp_path))


def test_two_replicas_continue_one_chain_through_redis(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    url = require_redis()
    config = _config(sim, tmp_path)
    first, second = (
        make_gateway(config=config, redis_url=url),
        make_gateway(config=config, redis_url=url),
    )
    opening = first.sdk().responses.create(model="native", input="Start here.")
    follow = second.sdk().responses.with_raw_response.create(
        model="native", input="Go on.", previous_response_id=opening.id
    )
    assert follow.parse().output_text
    task = first.last().task
    assert task is not None and follow.headers["x-task-id"] == task.task_id
    # The second replica found the first's response in Redis and sent the whole chain.
    sent = orjson.loads(base64.b64decode(str(sim.requests()[-1]["body_b64"])))
    assert "previous_response_id" not in sent
    assert [item.get("role") for item in sent["input"]] == ["user", "assistant", "user"]
    assert second.last().usage is not None and second.last().usage.cached_tokens > 0  # type: ignore[union-attr]


def test_another_callers_response_cannot_be_continued(gateway: Gateway) -> None:
    mine = gateway.sdk(api_key="sk-alice").responses.create(model="chat", input="Secret plan.")
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.sdk(api_key="sk-mallory").responses.create(
            model="chat", input="Tell me.", previous_response_id=mine.id
        )
    assert caught.value.code == "previous_response_not_found"


def test_changed_instructions_mid_chain_are_a_prefix_break(gateway: Gateway) -> None:
    client = gateway.sdk()
    first = client.responses.create(model="chat", instructions=INSTRUCTIONS, input="One.")
    same = client.responses.with_raw_response.create(
        model="chat", instructions=INSTRUCTIONS, input="Two.", previous_response_id=first.id
    )
    assert same.headers["x-farebox-prefix"] == "stable"
    changed = client.responses.with_raw_response.create(
        model="chat",
        instructions="Today is Tuesday. " + INSTRUCTIONS,
        input="Three.",
        previous_response_id=same.parse().id,
    )
    assert changed.headers["x-farebox-prefix"].startswith("break; segment=system")


@pytest.mark.parametrize("alias", ["native", "chat"])
def test_a_dropped_stream_ends_with_an_error_event_and_is_booked(
    gateway: Gateway, sim: SimControl, alias: str
) -> None:
    sim.fault(drop_after_chunks=6)
    client = gateway.sdk()
    with client.responses.stream(model=alias, input="A long answer, please.") as stream:
        events = list(stream)
    last = events[-1]
    assert last.type == "error" and last.code == "upstream_unreachable"  # OpenAI's error event
    assert "before a complete reply" in last.message
    ctx = gateway.last()
    assert ctx.status_code == 502 and ctx.error_type == "upstream_unreachable"
    assert ctx.usage is not None and ctx.usage.estimated and ctx.usage.prompt_tokens > 0


def test_a_virtual_keys_team_and_cap_apply(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    admin_key = "adm-responses-0123456789abcdef"
    gateway = make_gateway(config=_config(sim, tmp_path), admin_key=admin_key)
    created = httpx.post(
        f"{gateway.server.url}/admin/keys",
        json={"team": "research", "project": "agents", "max_output_tokens": 64},
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    client = gateway.sdk(api_key=created.json()["key"])
    response = client.responses.create(model="native", input="Hi.", max_output_tokens=5000)
    sent = orjson.loads(base64.b64decode(str(sim.requests()[-1]["body_b64"])))
    assert sent["max_output_tokens"] == 64  # the key's cap, in the Responses field
    assert response.usage is not None and response.usage.output_tokens <= 64
    ctx = gateway.last()
    assert ctx.identity.team == "research" and ctx.identity.project == "agents"
    with pytest.raises(openai.AuthenticationError):
        gateway.sdk(api_key="sk-not-a-key").responses.create(model="native", input="Hi.")


def test_a_team_budget_refuses_before_the_upstream(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    tenants = "tenants:\n  teams:\n    thrifty: {budget: {daily_usd: 0.0002}}\n"
    config.write_text(CONFIG.format(sim=sim.url) + tenants)
    gateway = make_gateway(config=config)
    client = gateway.sdk()
    team = {"X-Farebox-Team": "thrifty"}
    served = 0
    with pytest.raises(openai.RateLimitError) as caught:
        for _ in range(20):
            client.responses.create(
                model="native", input="Hi.", max_output_tokens=16, extra_headers=team
            )
            served += 1
    assert caught.value.code == "insufficient_quota"
    assert served >= 1 and len(sim.requests()) == served  # the refused call was not sent
