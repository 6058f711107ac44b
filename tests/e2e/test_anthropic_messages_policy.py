"""Anthropic Messages inbound with virtual keys and a policy: identity, caps, thinking, errors.

The key sets team, project and output cap; the policy sets the thinking budget and the
answer cap. What reaches the simulator is the client's bytes with exactly those edits.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from gateway.rawjson import patch_object
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.test_anthropic_messages import _client, _close_clients, _sent

__all__ = ["_close_clients"]  # the SDK clients are closed after each test here too

ADMIN_KEY = "adm-messages-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
HI: Any = [{"role": "user", "content": "Plan the migration."}]

POLICY = """
models:
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
  opus: {{provider: anthropic, model: claude-opus-4-6, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
  strict-claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY, prefix: [strict]}}
prices:
  claude: {{base: claude-sonnet-4-5}}
rules:
  - name: claude-thinks-a-little
    match: {{model: claude}}
    thinking_budget: 2048
    max_tokens: {{default: 1000, ceiling: 1000}}
  - name: opus-low-effort
    match: {{model: opus}}
    effort: low
routing:
  claude:
    capabilities: {{supports_reasoning: true}}  # claude-sim is not in litellm's map
  opus:
    retry: {{attempts: 1, base_s: 0.01, max_s: 0.01, statuses: [529]}}  # Anthropic's overloaded
"""


@pytest.fixture
def keyed(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    models = [m for m in sim.http.get("/sim/config").json()["models"]]
    for model in models:
        if model["api"] == "anthropic":
            model["aliases"] = ["claude-opus-4-6"]  # answers as an adaptive-thinking model
    sim.http.post("/sim/config", json={"models": models}).raise_for_status()
    config = tmp_path / "farebox.yaml"
    config.write_text(POLICY.format(sim=sim.url))
    return make_gateway(config=config, admin_key=ADMIN_KEY)


@pytest.fixture
def admin(keyed: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=keyed.server.url, headers=ADMIN, timeout=10) as client:
        yield client


def _key(admin: httpx.Client, **attributes: Any) -> str:
    response = admin.post("/admin/keys", json=attributes)
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def _body(record: dict[str, Any]) -> bytes:
    return base64.b64decode(str(record["body_b64"]))


def test_a_keys_team_and_cap_and_the_policys_budget_reach_the_upstream(
    keyed: Gateway, admin: httpx.Client, sim: SimControl
) -> None:
    secret = _key(admin, team="research", project="agents", max_output_tokens=2500)
    client, recorded = _client(keyed, api_key=secret)
    message = client.messages.create(
        model="claude",
        max_tokens=8000,
        thinking={"type": "enabled", "budget_tokens": 6000},
        messages=HI,
        extra_headers={"X-Task-Id": "keyed-task"},
    )
    assert message.content
    record = _sent(sim)[-1]
    sent = json.loads(_body(record))
    # The key's cap (2500) holds the whole output; the policy's budget (2048) fits under it.
    assert sent["max_tokens"] == 2500
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    expected = patch_object(
        recorded.bodies[-1],
        {"model": "claude-sim", "max_tokens": 2500, "thinking": sent["thinking"]},
        set(),
    )
    assert _body(record) == expected  # nothing else changed, byte for byte
    ctx = keyed.last()
    assert ctx.identity.team == "research" and ctx.identity.project == "agents"
    assert ctx.task is not None and ctx.task.task_id == "keyed-task"
    assert ctx.cost is not None and ctx.cost.total > 0
    assert ctx.response_headers["x-farebox-rule"] == "claude-thinks-a-little"


def test_an_adaptive_models_effort_is_sent_in_the_messages_apis_own_fields(
    keyed: Gateway, admin: httpx.Client, sim: SimControl
) -> None:
    client, recorded = _client(keyed, api_key=_key(admin, team="research"))
    client.messages.create(model="opus", max_tokens=512, messages=HI)
    sent = json.loads(_body(_sent(sim)[-1]))
    assert "reasoning_effort" not in sent  # litellm's spelling never reaches the Messages API
    assert sent["thinking"] == {"type": "adaptive"}
    assert sent["output_config"] == {"effort": "low"}
    edits = {
        "model": "claude-opus-4-6",
        "thinking": sent["thinking"],
        "output_config": {"effort": "low"},
    }
    assert _body(_sent(sim)[-1]) == patch_object(recorded.bodies[-1], edits, set())


def test_credential_and_route_refusals_are_the_sdks_own_classes(
    keyed: Gateway, admin: httpx.Client
) -> None:
    wrong, _ = _client(keyed, api_key="fbx-not-a-real-key-000000000000")
    with pytest.raises(anthropic.AuthenticationError) as denied:
        wrong.messages.create(model="claude", max_tokens=8, messages=HI)
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert denied.value.body["type"] == "error"  # type: ignore[index]
    finance, _ = _client(keyed, api_key=_key(admin, team="research", role="finance"))
    with pytest.raises(anthropic.PermissionDeniedError) as forbidden:
        finance.messages.create(model="claude", max_tokens=8, messages=HI)
    assert forbidden.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    narrow, _ = _client(keyed, api_key=_key(admin, team="research", models=["opus"]))
    with pytest.raises(anthropic.PermissionDeniedError):
        narrow.messages.create(model="claude", max_tokens=8, messages=HI)
    with pytest.raises(anthropic.PermissionDeniedError):
        narrow.messages.count_tokens(model="claude", messages=HI)
    assert not keyed.seen  # refused before any upstream call: nothing booked


def test_a_keys_rate_limit_refuses_in_anthropics_shape_before_the_upstream(
    keyed: Gateway, admin: httpx.Client, sim: SimControl
) -> None:
    secret = _key(admin, team="research", rate_limit={"requests_per_min": 1})
    client, _ = _client(keyed, api_key=secret)
    raw = client.messages.with_raw_response.create(model="claude", max_tokens=64, messages=HI)
    assert raw.headers["x-farebox-budget-reserved-usd"]  # the request held its worst case
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="claude", max_tokens=64, messages=HI)
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 60
    assert len(_sent(sim)) == 1  # the refused request never left the gateway


def test_a_strict_route_refuses_a_volatile_prefix_before_the_upstream(
    keyed: Gateway, admin: httpx.Client, sim: SimControl
) -> None:
    client, _ = _client(keyed, api_key=_key(admin, team="research"))
    guide = "You review invoices line by line, citing each rule you apply. " * 60
    refused = 0
    for minute in range(2):
        system: Any = [
            {
                "type": "text",
                "text": f"Current time: 2026-11-29T10:{minute:02d}:07Z\n{guide}",
                "cache_control": {"type": "ephemeral"},
            }
        ]
        try:
            client.messages.create(
                model="strict-claude",
                max_tokens=16,
                system=system,
                messages=HI,
                extra_headers={"X-Task-Id": "strict-task"},
            )
        except anthropic.BadRequestError as error:
            refused += 1
            assert error.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
            assert "volatile" in error.message or "time" in error.message
    assert refused >= 1
    assert len(_sent(sim)) == 2 - refused  # a refused request never reached the upstream


@pytest.mark.parametrize("stream", [False, True])
def test_a_routes_retry_applies_and_books_each_attempt(
    keyed: Gateway, admin: httpx.Client, sim: SimControl, stream: bool
) -> None:
    sim.fault(match={"path": "/v1/messages"}, status=529, count=1)  # Anthropic's overloaded
    client, _ = _client(keyed, api_key=_key(admin, team="research"))
    task = f"retry-{stream}"
    headers = {"X-Task-Id": task}
    if stream:
        with client.messages.stream(
            model="opus", max_tokens=64, messages=HI, extra_headers=headers
        ) as events:
            assert events.get_final_message().content
    else:
        assert client.messages.create(
            model="opus", max_tokens=64, messages=HI, extra_headers=headers
        ).content
    assert len(_sent(sim)) == 2
    reply = httpx.get(f"{keyed.base_url}/tasks/{task}", headers=ADMIN, timeout=30)
    rows = sorted(reply.json()["requests"], key=lambda row: row["attempt"])
    assert [(r["attempt"], r["status_code"]) for r in rows] == [(0, 529), (1, 200)]
